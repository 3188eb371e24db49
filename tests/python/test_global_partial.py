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


def test_regions_held_by_generators_end_in_any_order(mesh, dp, tp):
    from cspmd._lib import ops

    import exits
    with spmd.set_current_mesh(mesh), typecheck(local=False):
        x, w = _xw(dp, tp)
        outer = exits.region(spmd.out_partial_axes(dp))
        inner = exits.region(spmd.out_partial_axes(tp))
        next(outer), next(inner)
        # the outer (dp) region ends first (left early, so its end check
        # is not run, as with an error in the body); the inner one stays
        outer.close()
        assert ops.partial_decl_depth() == 1
        y = x @ w                                      # P on tp: the tp region governs
        assert spmd.get_local_type(y)[spmd.MeshAxis.of(tp)] is P
        inner.close()
        assert ops.partial_decl_depth() == 0


def test_interrupt_at_every_step_of_a_region(monkeypatch, mesh, dp, tp):
    from cspmd import regions
    from cspmd._lib import ops

    import exits

    def wrap_steps(m, inject):
        m.setattr(regions.ops, "partial_decl_open", inject.wrap(ops.partial_decl_open))
        m.setattr(regions.ops, "partial_decl_end", inject.wrap(ops.partial_decl_end))

    with spmd.set_current_mesh(mesh), typecheck(local=False):
        x, w = _xw(dp, tp)

        def run():
            with spmd.out_partial_axes(tp):
                with spmd.out_partial_axes(tp):
                    x @ w

        exits.interrupt_every_step(monkeypatch, wrap_steps, run,
                                   lambda: ops.partial_decl_depth() == 0 or pytest.fail(
                                       f"{ops.partial_decl_depth()} regions left open"),
                                   min_steps=4)


def test_a_region_closed_on_another_thread_is_an_error(mesh, dp, tp):
    """The core keeps each thread's regions: another thread cannot end the
    opener's.  Closing there raises; the opener ends it itself (limits.md)."""
    from cspmd._lib import ops

    import exits
    with spmd.set_current_mesh(mesh), typecheck(local=False):
        g = exits.region(spmd.out_partial_axes(tp))
        next(g)
        with pytest.raises(RuntimeError, match="is not open on this thread"):
            exits.on_thread(g.close)
        assert ops.partial_decl_depth() == 1          # still the opener's
        with pytest.raises(SpmdTypeError, match="declares axis mesh_tp"):
            ops.partial_decl_pop()                     # nothing was made Partial
        assert ops.partial_decl_depth() == 0
