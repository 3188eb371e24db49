"""Global mode on what sdpa runs on CUDA besides its kernel, on meta
tensors: constant_pad_nd pads a head dim that is not a multiple of 8 (pad
[0, n] on the last dim) and a slice cuts it back; padding an unsharded dim
keeps the shard, padding the sharded dim is refused."""

import pytest
import torch

import cspmd as spmd
from cspmd import P, R, S

aten = torch.ops.aten


def _t(mesh, dp, tp, tp_ty, shape=(2, 4, 8, 4)):
    return spmd.assert_type(torch.randn(*shape, device="meta"), {dp: R, tp: tp_ty})


def _spec(t):
    return str(spmd.get_partition_spec(t))


def test_constant_pad_of_an_unsharded_dim_keeps_the_shard(mesh, dp, tp):
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck(local=False):
        q = _t(mesh, dp, tp, S(1), shape=(2, 4, 8, 12))
        padded = aten.constant_pad_nd(q, [0, 4])
        assert padded.shape[-1] == 16
        assert _spec(padded) == "PartitionSpec(None, mesh_tp, None, None)"
        back = padded[..., :12]
        assert _spec(back) == "PartitionSpec(None, mesh_tp, None, None)"


def test_constant_pad_of_a_sharded_dim_is_refused(mesh, dp, tp):
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck(local=False):
        q = _t(mesh, dp, tp, S(3), shape=(2, 4, 8, 12))
        with pytest.raises(spmd.SpmdTypeError, match="aten::constant_pad_nd on axis mesh_tp: "
                           "it pads the sharded dim 3 by \\(0, 4\\)"):
            aten.constant_pad_nd(q, [0, 4])


def test_constant_pad_of_a_partial_input_only_with_zero(mesh, dp, tp):
    """Padding a Partial with 0 keeps it Partial; with another value the
    local rule refuses first (the shard rule refuses it too)."""
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck(local=False):
        p = spmd.assert_type(torch.randn(2, 4, device="meta"), {dp: R, tp: P})
        assert {repr(a): t.name for a, t in spmd.get_local_type(aten.constant_pad_nd(p, [0, 4])).items()}["mesh_tp"] == "P"
        with pytest.raises(spmd.SpmdTypeError, match="Partial type on axis mesh_tp in a linear op"):
            aten.constant_pad_nd(p, [0, 4], 1)


@pytest.mark.parametrize("op,nargs", [
    ("_scaled_dot_product_flash_attention", 5),
    ("_scaled_dot_product_cudnn_attention", 7),
])
def test_cuda_attention_kernels_without_a_rule_are_refused(mesh, dp, tp, op, nargs):
    """docs/limits.md: global mode has no shard rule yet for the CUDA
    attention kernels; it refuses them by name rather than guess."""
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck(local=False):
        q = _t(mesh, dp, tp, S(1))
        extra = {5: (0.0, True), 7: (None, True, 0.0, True)}[nargs]
        with pytest.raises(spmd.SpmdTypeError, match="aten::" + op):
            getattr(aten, op)(q, q, q, *extra)
