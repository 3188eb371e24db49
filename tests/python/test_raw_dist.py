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


def test_all_gather_checks_each_tensor_of_its_output_list(tp_checked):
    # dist.all_gather passes its outputs to c10d as a list of lists: every
    # tensor in it is checked, and the index names the one that is wrong.
    tp = tp_checked
    x = typed(torch.ones(2), tp, V)
    outs = [typed(torch.zeros(2), tp, R) for _ in range(4)]
    dist.all_gather(outs, x, group=tp)
    outs[2] = typed(torch.zeros(2), tp, V)
    with pytest.raises(spmd.SpmdTypeError, match=r"^all_gather: expected output "
                       r"tensor_list\[2\] type R/I on axis mesh_tp, got V"):
        dist.all_gather(outs, x, group=tp)
    outs[2] = spmd.assert_type(torch.zeros(2), {spmd.MeshAxis.of(2, 4): R})  # not on tp
    with pytest.raises(spmd.SpmdTypeError, match=r"output tensor_list\[2\] has no type "
                       r"for axis mesh_tp"):
        dist.all_gather(outs, x, group=tp)


def test_all_gather_wrong_output_list_as_reference(mesh, tp):
    import reference
    ref = reference.load()
    reference.load("spmd_types.checker")
    for lib in (spmd, ref):
        x = lib.assert_type(torch.ones(2), {tp: lib.V})
        outs = [lib.assert_type(torch.zeros(2), {tp: lib.V}) for _ in range(4)]
        with lib.checker.typecheck():
            with pytest.raises(Exception, match=r"all_gather: expected output "
                               r"tensor_list\[0\] type") as e:
                dist.all_gather(outs, x, group=tp)
        assert type(e.value).__name__ == "SpmdTypeError"


def _overlapping_permissive_all_reduce(lib, mesh, tp):
    """x typed P on dp only; a raw all_reduce over the whole world (which
    overlaps dp) in permissive mode."""
    world = dist.distributed_c10d._get_default_group()
    x = lib.assert_type(torch.ones(2), {lib.MeshAxis.of(mesh.get_group("dp")): lib.P})
    with lib.checker.typecheck(strict_mode="permissive"):
        dist.all_reduce(x, group=world)
    return x


def test_permissive_all_reduce_on_an_overlapping_group_is_refused(mesh, tp):
    """Deliberate difference (docs/differences.md): the reference records R
    on the world axis next to P on dp, a type whose axes overlap; cspmd
    raises and leaves the tensor's type as it was."""
    import reference
    ref = reference.load()
    reference.load("spmd_types.checker")
    dp_axis = spmd.MeshAxis.of(mesh.get_group("dp"))
    with pytest.raises(spmd.SpmdTypeError) as e:
        _overlapping_permissive_all_reduce(spmd, mesh, tp)
    world = spmd.MeshAxis.of(8, 1)
    assert str(e.value).startswith(
        f"all_reduce: the tensor has no type for axis {world!r} (permissive mode), so the "
        f"collective would make it R there; but its type {{mesh_dp: P}} has an axis that "
        f"overlaps {world!r}")
    x = spmd.assert_type(torch.ones(2), {dp_axis: P})
    with spmd.checker.typecheck(strict_mode="permissive"):
        with pytest.raises(spmd.SpmdTypeError):
            dist.all_reduce(x, group=dist.distributed_c10d._get_default_group())
    assert spmd.get_local_type(x) == {dp_axis: P}  # unchanged
    theirs = ref.get_local_type(_overlapping_permissive_all_reduce(ref, mesh, tp))
    axes = list(theirs)
    assert len(axes) == 2 and not axes[0].isorthogonal(axes[1])
