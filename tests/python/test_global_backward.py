"""Backward in global mode: the ops ``backward()`` runs go through the C
shard rules like forward ops, so intermediate gradients carry specs; each
parameter's gradient must arrive with the parameter's spec and the dual
local type.  Valid 2-D MLP, attention, embedding and cross-entropy steps
pass; a custom backward that returns a gradient sharded on the wrong dim
is caught, at the next backward op or at the parameter."""

import pytest
import torch
import torch.nn.functional as F

import cspmd as spmd
from cspmd import I, P, R, S, PartitionSpec as PS, SpmdTypeError
from cspmd.checker import typecheck


def _letters(t):
    return {repr(a): v.name for a, v in spmd.get_local_type(t).items()}


def _spec(*entries):
    return PS(*[None if e is None else spmd.MeshAxis.of(e) for e in entries])


def test_mlp_gradients_carry_specs_through_backward(mesh, dp, tp):
    with spmd.set_current_mesh(mesh), typecheck(local=False):
        x = spmd.assert_type(torch.randn(4, 8), {dp: S(0), tp: R})
        w1 = spmd.assert_type(torch.randn(8, 16, requires_grad=True), {dp: R, tp: S(1)})
        w2 = spmd.assert_type(torch.randn(16, 8, requires_grad=True), {dp: R, tp: S(0)})
        h = torch.relu(x @ w1)
        seen = {}
        h.register_hook(lambda g: seen.update(h=spmd.get_partition_spec(g)))
        y = spmd.all_reduce(h @ w2, tp, src=P, dst=I)
        loss = spmd.all_reduce((y * y).sum(), dp, src=P, dst=I)
        loss.backward()
    # the intermediate gradient is sharded as h is: dp on rows, tp on columns
    assert seen["h"] == _spec(dp, tp)
    assert _letters(w1.grad) == _letters(w2.grad) == {"mesh_dp": "P", "mesh_tp": "V"}
    assert spmd.get_partition_spec(w1.grad) == _spec(None, tp)
    assert spmd.get_partition_spec(w2.grad) == _spec(tp, None)


def test_attention_block_backward(mesh, dp, tp):
    """Heads sharded on tp (per-head weights [H, C, D]), tokens on dp and
    gathered before the attention; layer norm, softmax, 3-D matmuls (whose
    decomposition merges and splits dims, undone in backward), a
    reduce_scatter of the output projection."""
    T, C, H, D = 4, 16, 2, 8
    with spmd.set_current_mesh(mesh), typecheck(local=False):
        x = spmd.assert_type(torch.randn(T, C), {dp: S(0), tp: R})
        ln = spmd.assert_type(torch.ones(C, requires_grad=True), {dp: R, tp: R})
        ws = [spmd.assert_type(torch.randn(H, C, D, requires_grad=True), {dp: R, tp: S(0)})
              for _ in range(3)]
        wo = spmd.assert_type(torch.randn(H, D, C, requires_grad=True), {dp: R, tp: S(0)})
        h = spmd.all_gather(F.layer_norm(x, (C,), ln), dp, src=S(0), dst=R)
        q, k, v = (torch.matmul(h, w) for w in ws)              # [H, T, D]
        a = torch.softmax(q @ k.transpose(-1, -2) / D ** 0.5, dim=-1)
        y = ((a @ v) @ wo).sum(0)                                 # [T, C], P on tp
        y = spmd.reduce_scatter(y, tp, src=P, dst=S(0))
        loss = spmd.all_reduce(y.pow(2).sum(), tp, src=P, dst=I)
        spmd.convert(loss, dp, src=R, dst=P).backward()
    for w in ws + [wo]:
        assert _letters(w.grad) == {"mesh_dp": "P", "mesh_tp": "V"}
        assert spmd.get_partition_spec(w.grad) == _spec(tp, None, None)
    assert spmd.get_partition_spec(ln.grad) is None


def test_sum_over_a_sharded_dim_backward(mesh, dp, tp):
    """sum's backward expands the replicated gradient to the summed
    tensor's local sizes: that is its shard of the global gradient."""
    with spmd.set_current_mesh(mesh), typecheck(local=False):
        x = spmd.assert_type(torch.randn(4, 8, requires_grad=True), {dp: R, tp: S(0)})
        w = spmd.assert_type(torch.randn(4, 8, requires_grad=True), {dp: R, tp: S(0)})
        col = spmd.all_reduce((x * w).sum(0), tp, src=P, dst=R)  # [8]
        z = (col.unsqueeze(0) * x).sum(1)                         # [4] S(0)
        loss = spmd.all_reduce(z.sum(), tp, src=P, dst=I)
        spmd.convert(loss, dp, src=R, dst=P).backward()
    for t in (x, w):
        assert spmd.get_partition_spec(t.grad) == _spec(tp, None)
        assert _letters(t.grad) == {"mesh_dp": "P", "mesh_tp": "V"}


def test_embedding_and_cross_entropy_backward(mesh, dp, tp):
    with spmd.set_current_mesh(mesh), typecheck(local=False):
        table = spmd.assert_type(torch.randn(10, 8, requires_grad=True), {dp: R, tp: S(1)})
        idx = spmd.assert_type(torch.randint(0, 10, (4, 3)), {dp: S(0), tp: R})
        e = F.embedding(idx, table)                                # S(2) on tp
        head = spmd.assert_type(torch.randn(8, 10, requires_grad=True), {dp: R, tp: S(0)})
        logits = spmd.all_reduce(e @ head, tp, src=P, dst=R)     # [4, 3, 10]
        tgt = spmd.assert_type(torch.randint(0, 10, (4, 3)), {dp: S(0), tp: R})
        loss = F.cross_entropy(logits.flatten(0, 1), tgt.flatten(), reduction="sum")
        loss = spmd.all_reduce(loss, dp, src=P, dst=I)
        spmd.convert(loss, tp, src=R, dst=P).backward()
    assert spmd.get_partition_spec(table.grad) == _spec(None, tp)
    assert spmd.get_partition_spec(head.grad) == _spec(tp, None)


class _Transposed(torch.autograd.Function):
    """Identity forward; the backward returns the gradient transposed: for
    a square tensor sharded on dim 0 a gradient sharded on dim 1."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        return g.transpose(0, 1)


def test_wrong_gradient_spec_at_the_parameter(mesh, dp, tp):
    with spmd.set_current_mesh(mesh), typecheck(local=False):
        x = spmd.assert_type(torch.randn(4, 4, requires_grad=True), {dp: R, tp: S(0)})
        w = spmd.assert_type(torch.randn(4, 4), {dp: R, tp: S(0)})
        loss = spmd.all_reduce((_Transposed.apply(x) * w).sum(), tp, src=P, dst=I)
        with pytest.raises(SpmdTypeError, match=r"Gradient PartitionSpec mismatch for .*: the "
                           r"tensor is sharded as \(mesh_tp, None\), so its gradient must be "
                           r"too, but the gradient is sharded as \(None, mesh_tp\)"):
            spmd.convert(loss, dp, src=R, dst=P).backward()
    assert x.grad is None


def test_wrong_gradient_spec_at_the_next_backward_op(mesh, dp, tp):
    with spmd.set_current_mesh(mesh), typecheck(local=False):
        x = spmd.assert_type(torch.randn(4, 4, requires_grad=True), {dp: R, tp: S(0)})
        w = spmd.assert_type(torch.randn(4, 4), {dp: R, tp: S(0)})
        loss = spmd.all_reduce((_Transposed.apply(x * w) * w).sum(), tp, src=P, dst=I)
        with pytest.raises(SpmdTypeError) as e:
            spmd.convert(loss, dp, src=R, dst=P).backward()
    msg = str(e.value)
    assert "No valid sharding strategy for aten::mul.Tensor on axis mesh_tp" in msg
    assert "during backward, in MulBackward0" in msg
    assert x.grad is None


def test_local_mode_backward_keeps_no_specs(mesh, dp, tp):
    with spmd.set_current_mesh(mesh), typecheck():
        w = spmd.assert_type(torch.randn(8, 16, requires_grad=True), {dp: I, tp: S(1)})
        h = w * 2
        seen = {}
        h.register_hook(lambda g: seen.update(h=spmd.get_partition_spec(g)))
        spmd.reinterpret(h.sum(), tp, src=spmd.V, dst=P).backward()
    assert seen["h"] is None and spmd.get_partition_spec(w.grad) is None
