"""Strict vs permissive, mesh completeness, untyped operands."""

import pytest
import torch

import cspmd as spmd
from cspmd import I, P, R, V, MeshAxis, SpmdTypeError
from cspmd.checker import no_typecheck, typecheck
from conftest import ltype


def test_strict_missing_axis_from_current_mesh(mesh, typed, tp_axis):
    with spmd.set_current_mesh(mesh), typecheck():
        x = typed({tp_axis: R})
        y = typed(R)
        with pytest.raises(SpmdTypeError) as ei:
            x + y
    msg = str(ei.value)
    assert "args[0] missing axis mesh_dp from the current mesh {mesh_dp, mesh_tp}" in msg
    assert "args[0] has axes {mesh_tp}" in msg


def test_strict_missing_axis_index_counts_operands(mesh, typed, dp_axis):
    with spmd.set_current_mesh(mesh), typecheck():
        with pytest.raises(SpmdTypeError, match=r"args\[1\] missing axis mesh_tp from the current mesh"):
            typed(R) + typed({dp_axis: R})


def test_strict_both_operands_partial_annotations(mesh, typed, tp_axis):
    # Both operands lack mesh_dp: still an error in strict mode under the mesh.
    with spmd.set_current_mesh(mesh), typecheck():
        with pytest.raises(SpmdTypeError, match="missing axis mesh_dp from the current mesh"):
            typed({tp_axis: V}) * typed({tp_axis: V})


def test_permissive_skips_missing_axis(mesh, typed, tp_axis):
    with spmd.set_current_mesh(mesh), typecheck(strict_mode="permissive"):
        out = typed({tp_axis: R}) + typed(V)
        assert ltype(out) == {"mesh_dp": "V", "mesh_tp": "V"}
        # a mesh axis nobody is typed on is simply absent from the output
        out = typed({tp_axis: V}) * typed({tp_axis: R})
        assert ltype(out) == {"mesh_tp": "V"}


def test_permissive_still_checks_present_axes(mesh, typed, tp_axis):
    with spmd.set_current_mesh(mesh), typecheck(strict_mode="permissive"):
        with pytest.raises(SpmdTypeError, match="on axis mesh_tp in a linear op"):
            typed({tp_axis: P}) + typed(R)


def test_strict_without_mesh_union_of_operand_axes(typed, dp_axis, tp_axis):
    with typecheck():
        with pytest.raises(SpmdTypeError) as ei:
            typed({tp_axis: R}) + typed({dp_axis: R, tp_axis: R})
    msg = str(ei.value)
    assert "args[0] missing axis mesh_dp. args[0] has axes {mesh_tp}" in msg
    assert "union of all operand axes is {mesh_dp, mesh_tp}" in msg
    assert "All operands must be annotated on the same set of mesh axes." in msg


def test_no_mesh_same_axes_ok(typed, tp_axis):
    with typecheck():
        out = typed({tp_axis: R}) * typed({tp_axis: V})
    assert ltype(out) == {"mesh_tp": "V"}


def test_operand_axis_outside_current_mesh_strict(typed, dp_axis, tp_axis):
    with spmd.set_current_mesh({"tp": MeshAxis.of(4, 1)}), typecheck():
        # operands are first reinterpreted onto the current
        # mesh; an axis that cannot fold into it is rejected there.
        with pytest.raises(SpmdTypeError, match=r"args\[1\] cannot be auto-reinterpreted from "
                           r"\{mesh_dp, mesh_tp\} to the current mesh \{mesh_tp\}"):
            typed({tp_axis: R}) + typed({dp_axis: R, tp_axis: R})
        with pytest.raises(SpmdTypeError, match=r"args\[0\] cannot be auto-reinterpreted"):
            typed({dp_axis: R}) + typed({dp_axis: R})


def test_empty_typed_randn_fails_strict_under_mesh(checked, typed):
    x = torch.randn(4, 4)
    assert spmd.has_local_type(x) and spmd.get_local_type(x) == {}
    with pytest.raises(SpmdTypeError, match=r"args\[0\] missing axis mesh_dp from the current mesh"):
        x + typed(R)
    # even alone: {} op {} under a mesh lacks the mesh axes
    with pytest.raises(SpmdTypeError, match="missing axis mesh_dp"):
        x * x


def test_empty_typed_annotated_then_ok(checked):
    x = spmd.assert_type(torch.randn(4), R)
    assert ltype(x * 2) == {"mesh_dp": "R", "mesh_tp": "R"}


def test_empty_typed_permissive_ignored(mesh, typed):
    with spmd.set_current_mesh(mesh), typecheck("permissive"):
        x = torch.randn(4, 4)
        assert ltype(x + typed(V)) == {"mesh_dp": "V", "mesh_tp": "V"}
        out = x + x
        assert spmd.has_local_type(out) and spmd.get_local_type(out) == {}


def test_empty_op_empty_without_mesh():
    with typecheck():
        x = torch.randn(3)
        out = x + x
    assert spmd.has_local_type(out)
    assert spmd.get_local_type(out) == {}


def test_untyped_with_typed_strict_error(checked, typed):
    with no_typecheck():
        u = torch.ones(4, 4)
    assert not spmd.has_local_type(u)
    with pytest.raises(SpmdTypeError, match=r"args\[0\] missing axis mesh_dp"):
        u + typed(R)


def test_all_untyped_op_runs_unchecked(checked):
    # cspmd's deliberate choice: an op whose tensor operands are all untyped is
    # not checked and its result stays untyped.
    with no_typecheck():
        u = torch.ones(4, 4)
    out = u + u
    assert not spmd.has_local_type(out)
    with no_typecheck():
        assert torch.equal(out, torch.full((4, 4), 2.0))


def test_all_untyped_op_is_where_cspmd_differs_from_the_reference(mesh, dp, tp):
    """The reference's strict mode raises "missing axis" on ``relu(u)`` for a
    never-annotated ``u``; cspmd runs it unchecked (torch.empty and the
    bookkeeping inside torch functions make untyped tensors that are not
    user values).  An untyped value is still caught where it meets the
    typed program -- a typed operand, a collective, backward() -- each
    with the "no type at all" hint (docs/differences.md)."""
    from reference import load

    ref, ref_checker = load(), load("spmd_types.checker")
    with ref.set_current_mesh(mesh), ref_checker.typecheck():
        u = torch.randn(4)
        with pytest.raises(ref.SpmdTypeError, match=r"args\[0\] missing axis mesh_dp"):
            torch.relu(u)

    with spmd.set_current_mesh(mesh), typecheck():
        with no_typecheck():
            u = torch.randn(4, requires_grad=True)
        h = torch.relu(u) * 2                                  # unchecked, untyped
        assert not spmd.has_local_type(h)
        x = spmd.assert_type(torch.randn(4), {dp: R, tp: R})
        with pytest.raises(SpmdTypeError, match="has no type at all: annotate it"):
            x + h
        with pytest.raises(SpmdTypeError, match="has no type at all: annotate it"):
            spmd.all_reduce(h, tp, src=P, dst=R)
        with pytest.raises(SpmdTypeError, match="loss tensor with no SPMD type annotation"):
            h.sum().backward()


def test_permissive_untyped_with_typed(mesh, typed):
    with spmd.set_current_mesh(mesh), typecheck("permissive"):
        with no_typecheck():
            u = torch.ones(4, 4)
        assert ltype(u + typed(I)) == {"mesh_dp": "I", "mesh_tp": "I"}


def test_typecheck_rejects_bad_strict_mode():
    with pytest.raises(ValueError):
        with typecheck(strict_mode="lenient"):
            pass
