"""A tensor-parallel MLP trained in global mode (``typecheck(local=False)``)
on a dp x tp mesh: w1 column-sharded on tp (S(1)), w2 row-sharded (S(0)),
the batch sharded on dp (S(0)).

One step: ``relu(x @ w1) @ w2`` all-reduced over tp (P -> I), its squared
sum all-reduced over dp (P -> I), backward, each gradient all-reduced over
dp (P -> R), and the optimizer's step.  The same calls run with the checker
off too (an unchecked baseline).

tests/python/test_global_optimizers.py trains it with each optimizer and
benchmarks/bench_train_global.py measures its step.  Usage::

    w1, w2 = make_weights(hidden=8, ffn_shard=16)
    opt = torch.optim.AdamW([w1, w2], lr=1e-3, foreach=True)
    with spmd.set_current_mesh(mesh), typecheck(local=False):
        annotate_weights(dp, tp, w1, w2)
        train_step(dp, tp, w1, w2, x, opt)      # x: this rank's (batch, hidden)
    spmd.get_partition_spec(w1)                 # PartitionSpec(None, mesh_tp)
"""

import torch

import cspmd as spmd
from cspmd import I, P, R, S


def make_weights(hidden, ffn_shard, generator=None):
    """This rank's shards, leaves that require grad: w1 (hidden, ffn_shard)
    and w2 (ffn_shard, hidden), drawn in that order from ``generator``
    (torch's default one if None)."""
    w1 = torch.randn(hidden, ffn_shard, generator=generator).requires_grad_()
    w2 = torch.randn(ffn_shard, hidden, generator=generator).requires_grad_()
    return w1, w2


def annotate_weights(dp, tp, w1, w2):
    """w1 column-, w2 row-sharded on tp, both replicated on dp."""
    spmd.assert_type(w1, {dp: R, tp: S(1)})
    spmd.assert_type(w2, {dp: R, tp: S(0)})


def train_step(dp, tp, w1, w2, x, opt):
    """One step on this rank's batch shard x (sharded on dp)."""
    spmd.assert_type(x, {dp: S(0), tp: R})
    opt.zero_grad()
    y = spmd.all_reduce(torch.relu(x @ w1) @ w2, tp, src=P, dst=I)
    spmd.all_reduce(y.square().sum(), dp, src=P, dst=I).backward()
    for w in (w1, w2):
        w.grad = spmd.all_reduce(w.grad, dp, src=P, dst=R)
    opt.step()
