"""Strided shards in global mode: a view that merges a sharded dim behind
other dims -- (batch, heads) with the batch on dp and the heads on tp, as
torch's matmul folds the batch dims of 4-D operands -- gives the merged
dim a strided shard (each rank holds its block of every chunk); the ops
that keep dims whole carry it, and the view back to the merged dims makes
the shards ordinary again.  Explicit attention ``softmax(q @ k^T) @ v``
and einsum over such operands are accepted (the reference and DTensor
refuse them: docs/differences.md); anything that does not know strided
shards refuses them with a clear error."""

import pytest
import torch
import torch.nn.functional as F

import cspmd as spmd
from cspmd import I, P, R, S, V, PartitionSpec as PS, SpmdTypeError
from cspmd.checker import typecheck


@pytest.fixture
def glob(mesh):
    with spmd.set_current_mesh(mesh), typecheck(local=False):
        yield


def _spec(x):
    return spmd.get_partition_spec(x)


def test_explicit_attention_with_batch_and_heads_on_two_axes(glob, dp, tp):
    ax = spmd.MeshAxis.of
    q, k, v = (spmd.assert_type(torch.randn(2, 3, 5, 4), {dp: S(0), tp: S(1)})
               for _ in range(3))
    s = q @ k.transpose(-2, -1)
    assert _spec(s) == PS(ax(dp), ax(tp), None, None)
    o = torch.softmax(s / 2.0, -1) @ v
    assert _spec(o) == PS(ax(dp), ax(tp), None, None)
    assert spmd.get_local_type(o) == {ax(dp): V, ax(tp): V}
    e = torch.einsum("bhts,bhsd->bhtd", torch.softmax(torch.einsum("bhtd,bhsd->bhts", q, k), -1), v)
    assert _spec(e) == PS(ax(dp), ax(tp), None, None)


def test_heads_sharded_alone(glob, dp, tp):
    ax = spmd.MeshAxis.of
    q, k = (spmd.assert_type(torch.randn(2, 3, 5, 4), {dp: R, tp: S(1)}) for _ in range(2))
    assert _spec(q @ k.transpose(-2, -1)) == PS(None, ax(tp), None, None)


def test_backward_through_the_folds(glob, dp, tp):
    """Gradients pass the same folds: each leaf's gradient carries its spec."""
    ax = spmd.MeshAxis.of
    q, k = (spmd.assert_type(torch.randn(2, 3, 5, 4, requires_grad=True), {dp: S(0), tp: S(1)})
            for _ in range(2))
    s = torch.softmax(q @ k.transpose(-2, -1), -1) @ k
    loss = spmd.all_reduce(spmd.all_reduce(s.sum(), tp, src=P, dst=I), dp, src=P, dst=I)
    loss.backward()
    assert _spec(q.grad) == _spec(k.grad) == PS(ax(dp), ax(tp), None, None)


def test_linear_over_a_sequence_sharded_input(glob, dp, tp):
    """F.linear folds (batch, sequence) into one dim: a sequence shard
    behind a batch shard is strided there, and ordinary again after."""
    ax = spmd.MeshAxis.of
    x = spmd.assert_type(torch.randn(2, 4, 8), {dp: S(0), tp: S(1)})
    w = spmd.assert_type(torch.randn(6, 8), {dp: R, tp: R})
    y = F.linear(x, w, spmd.assert_type(torch.randn(6), {dp: R, tp: R}))
    assert _spec(y) == PS(ax(dp), ax(tp), None)
    assert _spec(x @ w.t()) == PS(ax(dp), ax(tp), None)


def test_a_user_merge_is_strided_until_viewed_back(glob, dp, tp):
    ax = spmd.MeshAxis.of
    x = spmd.assert_type(torch.randn(2, 3, 4), {dp: S(0), tp: S(1)})
    m = torch.relu(x.reshape(6, 4))
    with pytest.raises(SpmdTypeError, match=r"get_partition_spec: the tensor \(.*mesh_tp "
                                            r"\(strided by 2\).*\) has a dim sharded in strides"):
        _spec(m)
    assert _spec(m.view(2, 3, 4)) == PS(ax(dp), ax(tp), None)
    assert _spec(m.t().t().unsqueeze(0).squeeze(0).view(2, 12).view(2, 3, 4)) == \
        PS(ax(dp), ax(tp), None)


def test_what_strided_shards_do_not_take(glob, dp, tp):
    x = spmd.assert_type(torch.randn(2, 3, 4), {dp: R, tp: S(1)})
    m = x.reshape(6, 4)                                       # strided by 2
    other = spmd.assert_type(torch.randn(3, 4, 4), {dp: R, tp: S(0)}).reshape(12, 4)
    with pytest.raises(SpmdTypeError, match="operands 0 and 1 are sharded in different strides "
                                            r"\(2 and 1\)"):
        m + spmd.assert_type(torch.randn(6, 4), {dp: R, tp: S(0)})
    with pytest.raises(SpmdTypeError, match="No valid sharding strategy for aten::view on axis "
                                            "mesh_tp: the sharded dim 0, in 2 chunks"):
        m.view(3, 8)                                          # chunks cut apart
    with pytest.raises(SpmdTypeError, match="all_gather: the tensor .* has a dim sharded in "
                                            "strides"):
        spmd.all_gather(m, tp, src=S(0), dst=R)
    with pytest.raises(SpmdTypeError, match="operand 0 is sharded in strides on dim 0"):
        torch.flip(m, [1])                                    # the DTensor fallback
    assert other.shape == (12, 4)


def test_strided_shards_on_one_dim_are_ordered_by_their_strides(glob, dp, tp):
    """(b, h) sharded (tp, dp) merged: tp shards the outer dim, so it comes
    first on the merged dim whatever order the axes were seen in."""
    ax = spmd.MeshAxis.of
    x = spmd.assert_type(torch.randn(2, 3, 4), {dp: S(1), tp: S(0)})
    m = x.reshape(6, 4)
    with pytest.raises(SpmdTypeError, match=r"\(mesh_tp, mesh_dp \(strided by 2\)\)"):
        _spec(m)
    assert _spec(m.view(2, 3, 4)) == PS(ax(tp), ax(dp), None)
