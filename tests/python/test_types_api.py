"""The annotation and query API without ops."""

import pytest
import torch

import cspmd as spmd
from cspmd import I, P, R, V, MeshAxis, S, SpmdTypeError
from conftest import ltype


def test_public_names_and_error_class():
    assert spmd.Replicate is R and spmd.Invariant is I
    assert spmd.Varying is V and spmd.Partial is P
    assert spmd.Shard is S
    assert issubclass(SpmdTypeError, RuntimeError)
    assert not issubclass(SpmdTypeError, TypeError)
    assert issubclass(spmd.RedistributeError, SpmdTypeError)
    e = SpmdTypeError("bad", context="In f(...)")
    assert str(e) == "bad\n\nIn f(...)"
    assert str(SpmdTypeError("bad")) == "bad"


def test_type_reprs_and_duals():
    assert [repr(t) for t in (R, I, V, P)] == ["R", "I", "V", "P"]
    # str too (the reference's str is "PerMeshAxisLocalSpmdType.R"): every
    # message and f-string shows the letter.
    assert [str(t) for t in (R, I, V, P)] == ["R", "I", "V", "P"]
    assert f"{P} -> {S(0)}" == "P -> S(0)"
    assert (R.backward_type(), I.backward_type(), V.backward_type(), P.backward_type()) == \
        (P, I, V, R)
    assert repr(S(1)) == "S(1)" and S(0) == S(0) and S(0) != S(1)
    assert S(2).backward_type() == S(2)


def test_mesh_axis_canonical_equality():
    assert MeshAxis.of(4, 1) == MeshAxis.of([2, 2], [2, 1])
    assert MeshAxis.of([2, 3], [3, 1]) == MeshAxis.of(6, 1)
    assert MeshAxis.of(4, 1) != MeshAxis.of(4, 2)
    assert MeshAxis.of(4, 1).size() == 4
    assert MeshAxis.of(1, 1).size() == 1
    with pytest.raises(TypeError):
        MeshAxis.of(4)


def test_mesh_axis_orthogonality():
    assert MeshAxis.of(4, 1).isorthogonal(MeshAxis.of(2, 4))
    assert not MeshAxis.of(4, 1).isorthogonal(MeshAxis.of(4, 1))
    assert not MeshAxis.of(4, 1).isorthogonal(MeshAxis.of(2, 1))


def test_device_mesh_axes_are_named(dp_axis, tp_axis):
    assert repr(dp_axis) == "mesh_dp"
    assert repr(tp_axis) == "mesh_tp"
    # A 2x4 row-major grid: tp = 4:1, dp = 2:4.
    assert tp_axis == MeshAxis.of(4, 1)
    assert dp_axis == MeshAxis.of(2, 4)
    assert dp_axis.isorthogonal(tp_axis)


def test_set_current_mesh_device_mesh(mesh, dp_axis, tp_axis):
    assert spmd.current_mesh() is None
    with spmd.set_current_mesh(mesh):
        assert spmd.current_mesh() == frozenset({dp_axis, tp_axis})
        assert spmd.current_mesh_names() == {"dp": dp_axis, "tp": tp_axis}
        with spmd.set_current_mesh({"tp": MeshAxis.of(4, 1)}):
            assert spmd.current_mesh() == frozenset({tp_axis})
        assert spmd.current_mesh() == frozenset({dp_axis, tp_axis})
    assert spmd.current_mesh() is None


def test_set_current_mesh_dict_without_process_group():
    ax = MeshAxis.of(4, 1)
    one = MeshAxis.of(1, 1)
    with spmd.set_current_mesh({"tp": ax, "one": one}):
        assert spmd.current_mesh() == frozenset({ax})
        assert spmd.current_mesh_names() == {"tp": ax}
        assert spmd.current_mesh_all_names() == {"tp": ax, "one": one}


def test_set_current_mesh_rejects_non_orthogonal_axes():
    with pytest.raises(SpmdTypeError, match="not orthogonal"):
        with spmd.set_current_mesh({"a": MeshAxis.of(4, 1), "b": MeshAxis.of(2, 1)}):
            pass
    assert spmd.current_mesh() is None


def test_assert_type_then_query(dp_axis, tp_axis):
    x = torch.zeros(3)
    assert not spmd.has_local_type(x)
    assert spmd.get_local_type(x) == {}
    out = spmd.assert_type(x, {dp_axis: R, tp_axis: V})
    assert out is x
    assert spmd.has_local_type(x)
    assert spmd.get_local_type(x) == {dp_axis: R, tp_axis: V}


def test_assert_type_accepts_groups_and_names(mesh, dp, tp, dp_axis, tp_axis):
    x = spmd.assert_type(torch.zeros(3), {dp: I, tp: P})
    assert spmd.get_local_type(x) == {dp_axis: I, tp_axis: P}
    with spmd.set_current_mesh(mesh):
        y = spmd.assert_type(torch.zeros(3), {"dp": V, "tp": R})
        z = spmd.assert_type(torch.zeros(3), V)
    assert ltype(y) == {"mesh_dp": "V", "mesh_tp": "R"}
    assert ltype(z) == {"mesh_dp": "V", "mesh_tp": "V"}


def test_assert_type_empty_dict_is_typed():
    x = spmd.assert_type(torch.zeros(2), {})
    assert spmd.has_local_type(x)
    assert spmd.get_local_type(x) == {}


def test_assert_type_shard_is_varying_with_spec(tp_axis):
    x = spmd.assert_type(torch.zeros(4, 2), {tp_axis: S(0)})
    assert spmd.get_local_type(x) == {tp_axis: V}
    assert spmd.get_partition_spec(x) == spmd.PartitionSpec(tp_axis, None)


def test_assert_type_refines_and_merges(dp_axis, tp_axis):
    x = spmd.assert_type(torch.zeros(2), {tp_axis: R})
    spmd.assert_type(x, {tp_axis: R})            # same: fine
    spmd.assert_type(x, {dp_axis: V})            # new axis merged in
    assert spmd.get_local_type(x) == {tp_axis: R, dp_axis: V}
    spmd.assert_type(x, {dp_axis: P})            # V -> P silently allowed
    assert spmd.get_local_type(x)[dp_axis] is P


def test_assert_type_list_applies_to_each(tp_axis):
    xs = [torch.zeros(1), torch.zeros(2)]
    out = spmd.assert_type(xs, {tp_axis: V})
    assert isinstance(out, list) and len(out) == 2
    assert all(spmd.get_local_type(t) == {tp_axis: V} for t in xs)


def test_assert_type_like(dp_axis, tp_axis):
    src = spmd.assert_type(torch.zeros(2), {dp_axis: R, tp_axis: P})
    dst = torch.zeros(2)
    spmd.assert_type_like(dst, src, {tp_axis: V})
    assert spmd.get_local_type(dst) == {dp_axis: R, tp_axis: V}


def test_assert_type_rejects_bad_values(tp_axis):
    with pytest.raises(TypeError):
        spmd.assert_type(torch.zeros(2), {tp_axis: "R"})
    with pytest.raises(TypeError):
        spmd.assert_type(torch.zeros(2), 5)


def test_mutate_type(dp_axis, tp_axis):
    x = spmd.assert_type(torch.zeros(2), {dp_axis: V, tp_axis: V})
    spmd.mutate_type(x, tp_axis, src=V, dst=P)
    assert spmd.get_local_type(x) == {dp_axis: V, tp_axis: P}
    spmd.mutate_type(x, src={dp_axis: V}, dst={dp_axis: R})
    assert spmd.get_local_type(x) == {dp_axis: R, tp_axis: P}


def test_mutate_type_failure_leaves_tensor_unchanged(dp_axis, tp_axis):
    x = spmd.assert_type(torch.zeros(2), {dp_axis: V, tp_axis: R})
    with pytest.raises(SpmdTypeError, match="expected current type"):
        spmd.mutate_type(x, src=V, dst=P)   # tp is R, not V
    assert spmd.get_local_type(x) == {dp_axis: V, tp_axis: R}
    with pytest.raises(SpmdTypeError, match="not found"):
        spmd.mutate_type(spmd.assert_type(torch.zeros(2), {tp_axis: V}), dp_axis, src=V, dst=P)


def test_type_survives_detach_outside_checking(tp_axis):
    x = spmd.assert_type(torch.zeros(2), {tp_axis: P})
    # Outside typecheck() detach copies the stored type (BackendMeta).
    assert spmd.get_local_type(x.detach()) == {tp_axis: P}
