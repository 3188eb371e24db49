"""``out_partial_axes``: a block that declares the axes on which its ops'
results become Partial, checked by the core against what global shard
propagation derives (docs/global.md)."""

import pytest
import torch

import cspmd as spmd
from cspmd import P, R, S, V, PartitionSpec as PS, SpmdTypeError
from cspmd.checker import typecheck


def _xw(dp, tp):
    x = spmd.assert_type(torch.randn(2, 4, 8), {dp: S(0), tp: S(2)})
    w = spmd.assert_type(torch.randn(8, 6), {dp: R, tp: S(0)})
    return x, w


def test_declared_partial_is_accepted(mesh, dp, tp):
    with spmd.set_current_mesh(mesh), typecheck(local=False):
        x, w = _xw(dp, tp)
        with spmd.out_partial_axes(tp):
            y = x @ w                                  # row-parallel: P on tp
        assert spmd.get_local_type(y) == {spmd.MeshAxis.of(dp): V, spmd.MeshAxis.of(tp): P}
        assert spmd.get_partition_spec(y) == PS(spmd.MeshAxis.of(dp), None, None)
        with spmd.out_partial_axes({"dp", "tp"}):      # a set of names works too
            s = (x @ w).sum(0)
        assert spmd.get_local_type(s) == {spmd.MeshAxis.of(dp): P, spmd.MeshAxis.of(tp): P}


def test_undeclared_partial_is_refused_before_the_op_runs(mesh, dp, tp):
    with spmd.set_current_mesh(mesh), typecheck(local=False):
        x, w = _xw(dp, tp)
        with pytest.raises(SpmdTypeError, match=r"aten::mm makes its result Partial on axis "
                           r"mesh_tp, which out_partial_axes does not declare \(declared: "
                           r"mesh_dp\)"):
            with spmd.out_partial_axes(dp):
                x @ w
        with pytest.raises(SpmdTypeError, match=r"aten::sum.dim_IntList makes its result "
                           r"Partial on axis mesh_dp"):
            with spmd.out_partial_axes(tp):
                x.sum(0)
        y = x @ w                                      # outside a region: derived as before
        assert spmd.get_local_type(y)[spmd.MeshAxis.of(tp)] is P


def test_declared_axis_never_derived_fails_at_the_end(mesh, dp, tp):
    with spmd.set_current_mesh(mesh), typecheck(local=False):
        x, w = _xw(dp, tp)
        with pytest.raises(SpmdTypeError, match="out_partial_axes declares axis mesh_dp, but no "
                           "op in the region made its result Partial on it"):
            with spmd.out_partial_axes(dp, tp):
                x @ w                                  # P on tp only
        # the region ended anyway: later ops are outside it
        x @ w
        with pytest.raises(SpmdTypeError, match="declares axis mesh_tp"):
            with spmd.out_partial_axes(tp):
                torch.relu(x)                          # nothing Partial at all


def test_nested_regions_and_errors_in_the_body(mesh, dp, tp):
    with spmd.set_current_mesh(mesh), typecheck(local=False):
        x, w = _xw(dp, tp)
        with spmd.out_partial_axes(dp, tp):
            with spmd.out_partial_axes(tp):            # the innermost governs
                y = x @ w
            s = y.sum(0)                               # P on dp: the outer region's
        assert spmd.get_local_type(s)[spmd.MeshAxis.of(dp)] is P
        # an error in the body wins over the region's own end check
        with pytest.raises(ZeroDivisionError):
            with spmd.out_partial_axes(tp):
                1 / 0
        from cspmd._lib import ops
        assert ops.partial_decl_depth() == 0


def test_where_a_declaration_cannot_be_checked(mesh, dp, tp):
    with spmd.set_current_mesh(mesh), typecheck():
        with pytest.raises(ValueError, match=r"out_partial_axes needs global mode"):
            with spmd.out_partial_axes(tp):
                pass
    with spmd.set_current_mesh(mesh, local_axes=("dp",)), typecheck(local=False):
        with pytest.raises(ValueError, match="axis mesh_dp is a local axis"):
            with spmd.out_partial_axes(dp):
                pass
    with spmd.set_current_mesh(mesh), typecheck(local=False):
        with pytest.raises(ValueError, match="mesh_tp given twice"):
            with spmd.out_partial_axes(tp, "tp"):
                pass
        with pytest.raises(ValueError, match="expected 1 to"):
            with spmd.out_partial_axes():
                pass
    with spmd.out_partial_axes(tp):                    # checking off: runs unchecked
        torch.ones(2) @ torch.ones(2)
