"""Raw torch.distributed collectives inside a checked region."""

import pytest
import torch
import torch.distributed as dist

import cspmd as spmd
import cspmd.checker
from cspmd import I, P, R, V


def typed(t, tp, lt, dp=None):
    spmd.assert_type(t, {tp: lt} if dp is None else {tp: lt, dp: R})
    return t


@pytest.fixture
def tp_checked(mesh, tp):
    with spmd.checker.typecheck():
        yield tp


def test_all_reduce_partial_becomes_replicate(tp_checked):
    tp = tp_checked
    x = typed(torch.ones(4), tp, P)
    dist.all_reduce(x, group=tp)
    assert spmd.get_local_type(x) == {spmd.MeshAxis.of(tp): R}


def test_all_reduce_of_replicate_is_rejected_before_running(tp_checked):
    tp = tp_checked
    x = typed(torch.ones(4), tp, R)
    with pytest.raises(spmd.SpmdTypeError) as e:
        dist.all_reduce(x, group=tp)
    assert str(e.value).startswith("all_reduce: expected input type P "
                                   "on axis mesh_tp, got R")
    assert "In c10d::allreduce_" in str(e.value)
    assert spmd.get_local_type(x) == {spmd.MeshAxis.of(tp): R}


def test_missing_axis_strict_and_permissive(mesh, dp, tp):
    x = spmd.assert_type(torch.ones(4), {dp: R})  # typed, but not on tp
    with spmd.checker.typecheck():
        with pytest.raises(spmd.SpmdTypeError, match="tensor has no type for axis mesh_tp"):
            dist.all_reduce(x, group=tp)
    with spmd.checker.typecheck(strict_mode="permissive"):
        dist.all_reduce(x, group=tp)
    # permissive skips the check, but all_reduce still writes R on
    # the group's axis of a typed input.
    assert spmd.get_local_type(x) == {spmd.MeshAxis.of(dp): R, spmd.MeshAxis.of(tp): R}


def test_untyped_data_is_not_checked(mesh, tp):
    # As for every op whose tensors carry no type at all (DTensor's own
    # redistributions of its local tensors, for instance).
    x = torch.ones(4)
    with spmd.checker.typecheck():
        dist.all_reduce(x, group=tp)
    assert not spmd.has_local_type(x)


def test_all_gather_into_tensor_needs_annotated_output(tp_checked):
    tp = tp_checked
    x = typed(torch.ones(2), tp, V)
    out = typed(torch.zeros(8), tp, I)
    dist.all_gather_into_tensor(out, x, group=tp)
    assert spmd.get_local_type(out) == {spmd.MeshAxis.of(tp): I}  # never set by the rule
    bad = typed(torch.zeros(8), tp, V)
    with pytest.raises(spmd.SpmdTypeError, match=r"expected output tensor type "
                       r"R/I on axis mesh_tp, "
                       r"got V"):
        dist.all_gather_into_tensor(bad, x, group=tp)
    with pytest.raises(spmd.SpmdTypeError, match="expected input type V"):
        dist.all_gather_into_tensor(out, typed(torch.ones(2), tp, P), group=tp)


@pytest.mark.parametrize("call", ["all_reduce", "reduce_scatter_tensor"])
def test_varying_into_a_reduction_is_rejected(call, tp_checked):
    # A reduction sums Partial values; V must be converted to P first (the
    # reference raises the same for its raw collectives).
    tp = tp_checked
    x = typed(torch.ones(8), tp, V)
    with pytest.raises(spmd.SpmdTypeError) as e:
        if call == "all_reduce":
            dist.all_reduce(x, group=tp)
        else:
            dist.reduce_scatter_tensor(typed(torch.zeros(2), tp, V), x, group=tp)
    assert str(e.value).startswith(f"{call}: expected input type P on axis mesh_tp, got V")
    assert spmd.get_local_type(x) == {spmd.MeshAxis.of(tp): V}


def test_reduce_scatter_tensor(tp_checked):
    tp = tp_checked
    x = typed(torch.ones(8), tp, P)
    out = typed(torch.zeros(2), tp, V)
    dist.reduce_scatter_tensor(out, x, group=tp)
    with pytest.raises(spmd.SpmdTypeError, match="expected input type P"):
        dist.reduce_scatter_tensor(out, typed(torch.ones(8), tp, R), group=tp)


def test_functional_collectives_type_their_results(tp_checked):
    tp = tp_checked
    f = torch.ops._c10d_functional
    x = typed(torch.ones(8), tp, P)
    y = f.wait_tensor(f.all_reduce(x, "sum", tp.group_name))
    assert spmd.get_local_type(y) == {spmd.MeshAxis.of(tp): R}
    with pytest.raises(spmd.SpmdTypeError, match="all_reduce: expected input type P"):
        f.all_reduce(typed(torch.ones(8), tp, V), "sum", tp.group_name)
    z = f.wait_tensor(f.reduce_scatter_tensor(typed(torch.ones(8), tp, P), "sum", 4,
                                             tp.group_name))
    assert spmd.get_local_type(z) == {spmd.MeshAxis.of(tp): V}
    with pytest.raises(spmd.SpmdTypeError, match="all_gather_into_tensor: expected input type"):
        f.all_gather_into_tensor(typed(torch.ones(2), tp, R), 4, tp.group_name)


def test_unsupported_raw_collectives_raise(tp_checked):
    tp = tp_checked
    x = typed(torch.ones(2), tp, R)
    with pytest.raises(spmd.SpmdTypeError, match="type checking for raw torch.distributed."
                       "broadcast is not yet implemented; use the cspmd wrapper instead"):
        dist.broadcast(x, src=0, group=tp)


def test_raw_collectives_unchecked_outside_typecheck(mesh, tp):
    x = typed(torch.ones(4), tp, R)
    dist.all_reduce(x, group=tp)  # no checking: runs, type untouched
    assert spmd.get_local_type(x) == {spmd.MeshAxis.of(tp): R}
