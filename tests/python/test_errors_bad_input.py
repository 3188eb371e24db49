"""Bad input to the annotation API and rejected ops."""

import pytest
import torch

import cspmd as spmd
from cspmd import P, R, V, MeshAxis, SpmdTypeError
from cspmd.checker import no_typecheck, typecheck
from conftest import ltype


def test_unknown_axis_name(mesh):
    with spmd.set_current_mesh(mesh):
        with pytest.raises(SpmdTypeError) as ei:
            spmd.assert_type(torch.zeros(2), {"xx": R})
    assert str(ei.value).startswith("No mesh axis named 'xx' in the current mesh. Available: dp, tp")


def test_axis_name_without_mesh():
    x = torch.zeros(2)
    with pytest.raises(SpmdTypeError, match="Cannot resolve axis name 'tp'"):
        spmd.assert_type(x, {"tp": R})
    assert not spmd.has_local_type(x)


def test_size_one_axis_silently_dropped(tp_axis):
    x = spmd.assert_type(torch.zeros(2), {MeshAxis.of(1, 1): V})
    assert spmd.get_local_type(x) == {}
    y = spmd.assert_type(torch.zeros(2), {MeshAxis.of(1, 1): V, tp_axis: R})
    assert spmd.get_local_type(y) == {tp_axis: R}


def test_size_one_axis_by_name_in_mesh(tp_axis):
    with spmd.set_current_mesh({"tp": MeshAxis.of(4, 1), "one": MeshAxis.of(1, 1)}):
        x = spmd.assert_type(torch.zeros(2), {"one": P, "tp": V})
    assert spmd.get_local_type(x) == {tp_axis: V}


@pytest.mark.parametrize("bad", [3.0, [1.0, 2.0], None, "x"], ids=["float", "list", "None", "str"])
def test_non_tensor_to_assert_type(bad, tp_axis):
    with pytest.raises(TypeError):
        spmd.assert_type(bad, {tp_axis: R})


def test_non_tensor_to_queries():
    with pytest.raises(TypeError):
        spmd.has_local_type(1.0)
    with pytest.raises(TypeError):
        spmd.get_local_type([torch.zeros(1)])


def test_bare_type_without_mesh():
    x = torch.zeros(2)
    with pytest.raises(SpmdTypeError):
        spmd.assert_type(x, R)
    assert not spmd.has_local_type(x)


def test_non_orthogonal_axes_in_one_type():
    x = torch.zeros(2)
    with pytest.raises(SpmdTypeError) as ei:
        spmd.assert_type(x, {MeshAxis.of(4, 1): R, MeshAxis.of(2, 1): R})
    msg = str(ei.value)
    assert "are not orthogonal" in msg
    assert "All axes in a LocalSpmdType must be mutually orthogonal." in msg
    assert not spmd.has_local_type(x)


def test_non_orthogonal_refinement_keeps_old_type(tp_axis):
    x = spmd.assert_type(torch.zeros(2), {tp_axis: R})
    with pytest.raises(SpmdTypeError, match="not orthogonal"):
        spmd.assert_type(x, {MeshAxis.of(2, 2): R})
    assert spmd.get_local_type(x) == {tp_axis: R}


def test_jointly_non_orthogonal():
    with pytest.raises(SpmdTypeError, match="not mutually orthogonal"):
        spmd.assert_type(torch.zeros(1), {MeshAxis.of(2, 5): R, MeshAxis.of(2, 6): R,
                                          MeshAxis.of(2, 7): R})


def test_axis_not_in_current_mesh_strict(typed, dp_axis, tp_axis):
    with spmd.set_current_mesh({"tp": MeshAxis.of(4, 1)}), typecheck():
        ok = typed({tp_axis: R}) * typed({tp_axis: V})
        assert ltype(ok) == {"mesh_tp": "V"}
        with pytest.raises(SpmdTypeError) as ei:
            typed({tp_axis: R}) + typed({tp_axis: R, dp_axis: V})
        # mesh_dp is not in the current mesh and cannot fold into it
        assert ("args[1] cannot be auto-reinterpreted from {mesh_dp, mesh_tp} to the current "
                "mesh {mesh_tp}. Operand has axes [mesh_dp] not in the current mesh [mesh_tp] "
                "and has no destination to fold into.") in str(ei.value)
        assert "under mesh {mesh_tp}" in str(ei.value)


def test_nested_meshes(mesh, typed, dp_axis, tp_axis):
    with spmd.set_current_mesh(mesh), typecheck():
        full = typed(R)
        assert ltype(full * full) == {"mesh_dp": "R", "mesh_tp": "R"}
        tp_only = typed({tp_axis: V})
        with spmd.set_current_mesh({"tp": tp_axis}):
            # inner mesh is {mesh_tp}: a tp-only tensor is complete ...
            assert ltype(tp_only + tp_only) == {"mesh_tp": "V"}
            # ... and the inner mesh's names resolve, the outer's do not
            with pytest.raises(SpmdTypeError, match="No mesh axis named 'dp'"):
                spmd.assert_type(torch.zeros(1), {"dp": R})
        # back under the 2x4 mesh: tp-only is incomplete again
        with pytest.raises(SpmdTypeError, match="missing axis mesh_dp from the current mesh"):
            tp_only + tp_only


def test_refinement_conflict_leaves_type_unchanged(tp_axis, dp_axis):
    x = spmd.assert_type(torch.zeros(2), {dp_axis: V, tp_axis: R})
    with pytest.raises(SpmdTypeError) as ei:
        spmd.assert_type(x, {tp_axis: V})
    assert str(ei.value).startswith(
        "SPMD type mismatch on axis mesh_tp: tensor has R, "
        "expected V")
    assert spmd.get_local_type(x) == {dp_axis: V, tp_axis: R}


def test_refinement_conflict_multi_axis_atomic(tp_axis, dp_axis):
    # the dp entry would be fine (new axis) but tp conflicts: nothing is merged
    x = spmd.assert_type(torch.zeros(2), {tp_axis: P})
    with pytest.raises(SpmdTypeError, match="SPMD type mismatch on axis mesh_tp"):
        spmd.assert_type(x, {dp_axis: R, tp_axis: V})
    assert spmd.get_local_type(x) == {tp_axis: P}


def test_refinement_conflict_inside_typecheck(checked, typed):
    x = typed(R)
    with pytest.raises(SpmdTypeError, match="SPMD type mismatch on axis mesh_dp"):
        spmd.assert_type(x, V)
    assert ltype(x) == {"mesh_dp": "R", "mesh_tp": "R"}


def test_rejected_inplace_op_does_not_run(checked, typed):
    p = typed(P)
    r = typed(R)
    with no_typecheck():
        before = p.clone()
    with pytest.raises(SpmdTypeError, match="in a linear op requires all operands to be Partial"):
        p.add_(r)
    with no_typecheck():
        assert torch.equal(p, before)
    assert ltype(p) == {"mesh_dp": "P", "mesh_tp": "P"}


def test_rejected_out_op_does_not_write(checked, typed):
    o = typed(V)
    with no_typecheck():
        before = o.clone()
    with pytest.raises(SpmdTypeError):
        torch.add(typed(P), typed(R), out=o)
    with no_typecheck():
        assert torch.equal(o, before)
    assert ltype(o) == {"mesh_dp": "V", "mesh_tp": "V"}


def test_shard_out_of_range(tp_axis):
    with pytest.raises(SpmdTypeError):
        spmd.assert_type(torch.zeros(2), {tp_axis: spmd.S(1)})
    with pytest.raises(SpmdTypeError):
        spmd.assert_type(torch.zeros(()), {tp_axis: spmd.S(0)})


def test_error_is_runtime_error_through_dunder(checked, typed):
    # SpmdTypeError is a RuntimeError so Tensor's dunders do not swallow it.
    with pytest.raises(RuntimeError) as ei:
        typed(P) + typed(R)
    assert type(ei.value) is SpmdTypeError
