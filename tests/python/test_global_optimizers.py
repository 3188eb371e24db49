"""List ops and the fused optimizers in global mode: element i of each
list is checked as one pointwise op (its param, grad and optimizer state
must be sharded alike) and keeps its spec; the norm of a sharded tensor
(``_foreach_norm``, so ``clip_grad_norm_``) has no placement and raises
DTensorPropagationError, as in the reference (whose DTensor propagation
gives a p-norm Partial that it refuses).  The steps give the same numbers as unchecked."""

import os
import sys

import pytest
import torch

import cspmd as spmd
from cspmd import I, P, R, S, SpmdTypeError
from cspmd.checker import typecheck

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
from tp_mlp_global import annotate_weights, make_weights, train_step  # noqa: E402

OPTIMIZERS = {
    "sgd": lambda ps, **kw: torch.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.01, **kw),
    "adam": lambda ps, **kw: torch.optim.Adam(ps, lr=0.01, **kw),
    "adamw": lambda ps, **kw: torch.optim.AdamW(ps, lr=0.01, **kw),
}
IMPLS = {"for-loop": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}


def _spec(*entries):
    return spmd.PartitionSpec(*[None if e is None else spmd.MeshAxis.of(e) for e in entries])


def train(mesh, dp, tp, opt_name, impl, *, checked=True, steps=2):
    """The tensor-parallel MLP of examples/tp_mlp_global.py trained in
    global mode; returns the parameters and their specs."""
    torch.manual_seed(0)
    w1, w2 = make_weights(hidden=8, ffn_shard=16)
    xs = [torch.randn(4, 8) for _ in range(steps)]
    opt = OPTIMIZERS[opt_name]([w1, w2], **IMPLS[impl])

    def run():
        annotate_weights(dp, tp, w1, w2)
        for x in xs:
            train_step(dp, tp, w1, w2, x, opt)
        return [spmd.get_partition_spec(t) for t in (w1, w2)]

    if checked:
        with spmd.set_current_mesh(mesh), typecheck(local=False):
            specs = run()
    else:
        specs = None
        run()
    return w1.detach().clone(), w2.detach().clone(), specs


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("opt_name", OPTIMIZERS)
def test_optimizer_steps_in_global_mode(mesh, dp, tp, opt_name, impl):
    w1, w2, specs = train(mesh, dp, tp, opt_name, impl)
    assert specs == [_spec(None, tp), _spec(tp, None)]
    plain1, plain2, _ = train(mesh, dp, tp, opt_name, impl, checked=False)
    torch.testing.assert_close(w1, plain1)
    torch.testing.assert_close(w2, plain2)


def test_foreach_elements_must_be_sharded_alike(mesh, dp, tp):
    with spmd.set_current_mesh(mesh), typecheck(local=False):
        a = [spmd.assert_type(torch.randn(4, 4), {dp: R, tp: S(0)}),
             spmd.assert_type(torch.randn(4, 8), {dp: R, tp: S(1)})]
        ok = [spmd.assert_type(torch.randn(4, 4), {dp: R, tp: S(0)}),
              spmd.assert_type(torch.randn(4, 8), {dp: R, tp: S(1)})]
        out = torch._foreach_add(a, ok)
        assert [spmd.get_partition_spec(t) for t in out] == [_spec(tp, None), _spec(None, tp)]
        torch._foreach_mul_(a, 0.5)
        assert spmd.get_partition_spec(a[1]) == _spec(None, tp)
        bad = [ok[0], spmd.assert_type(torch.randn(4, 8), {dp: R, tp: S(0)})]
        before = a[1].clone()
        with pytest.raises(SpmdTypeError, match=r"No valid sharding strategy for "
                           r"aten::_foreach_add_\.List on axis mesh_tp: the global shapes do "
                           r"not broadcast"):
            torch._foreach_add_(a, bad)
    torch.testing.assert_close(a[1], before)  # a rejected op changes nothing


def test_norm_of_a_sharded_tensor_raises(mesh, dp, tp):
    with spmd.set_current_mesh(mesh), typecheck(local=False):
        g = [spmd.assert_type(torch.randn(4, 4), {dp: R, tp: S(0)})]
        with pytest.raises(spmd.DTensorPropagationError, match=r"aten::_foreach_norm\.Scalar: "
                           "the norm of a tensor sharded on dim 0 is not a sum of the shards' "
                           "norms"):
            torch._foreach_norm(g)
        w = spmd.assert_type(torch.randn(4, 4, requires_grad=True), {dp: R, tp: S(0)})
        w.grad = spmd.assert_type(torch.randn(4, 4), {dp: R, tp: S(0)})
        with pytest.raises(SpmdTypeError, match="the norm of a tensor sharded"):
            torch.nn.utils.clip_grad_norm_([w], 1.0, foreach=True)


@pytest.mark.parametrize("foreach", [True, False])
def test_clip_grad_norm_of_unsharded_gradients(mesh, dp, tp, foreach):
    """Data parallel: the batch sharded on dp, the parameters replicated;
    the reduced gradients are R and clipping by their norm is checked."""
    with spmd.set_current_mesh(mesh), typecheck(local=False):
        w = spmd.assert_type(torch.randn(8, 4, requires_grad=True), {dp: R, tp: R})
        x = spmd.assert_type(torch.randn(4, 8), {dp: S(0), tp: R})
        loss = spmd.all_reduce((x @ w).square().sum(), dp, src=P, dst=I)
        spmd.convert(loss, tp, src=R, dst=P).backward()
        w.grad = spmd.all_reduce(spmd.all_reduce(w.grad, dp, src=P, dst=R), tp, src=P, dst=R)
        norm = torch.nn.utils.clip_grad_norm_([w], 1.0, foreach=foreach)
        assert {repr(a): v.name for a, v in spmd.get_local_type(norm).items()} == {
            "mesh_dp": "R", "mesh_tp": "R"}
        torch.optim.SGD([w], lr=0.1, foreach=foreach).step()
        assert spmd.get_partition_spec(w) is None
