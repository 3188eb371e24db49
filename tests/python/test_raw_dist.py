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
def test_a_sum_takes_varying_values_as_summands(call, tp_checked):
    # As all_reduce(x, src=P) does (cspmd's and the reference's): the sum of
    # each rank's value. The reference's raw rule refuses it (docs/differences.md).
    tp = tp_checked
    x = typed(torch.ones(8), tp, V)
    if call == "all_reduce":
        dist.all_reduce(x, group=tp)
        assert spmd.get_local_type(x) == {spmd.MeshAxis.of(tp): R}
    else:
        out = typed(torch.zeros(2), tp, V)
        dist.reduce_scatter_tensor(out, x, group=tp)
        assert spmd.get_local_type(out) == {spmd.MeshAxis.of(tp): V}


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
        f.all_reduce(typed(torch.ones(8), tp, R), "sum", tp.group_name)
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


# ---- the reduce op decides the rule -----------------------------------------

RO = dist.ReduceOp
VALUE_OPS = [RO.PRODUCT, RO.MAX, RO.MIN, RO.BAND, RO.BOR, RO.BXOR]


def _raw_all_reduce(x, tp, op):
    dist.all_reduce(x, op=op, group=tp)
    return x


@pytest.mark.parametrize("op", VALUE_OPS, ids=str)
@pytest.mark.parametrize("lt", [V, R, I], ids=str)
def test_a_value_reduction_of_values_is_replicate(op, lt, tp_checked):
    # max/min/product/bitwise ops take each rank's value: the result is the
    # same on every rank, whatever the values were.
    tp = tp_checked
    x = _raw_all_reduce(typed(torch.ones(4, dtype=torch.int64), tp, lt), tp, op)
    assert spmd.get_local_type(x) == {spmd.MeshAxis.of(tp): R}


@pytest.mark.parametrize("op", VALUE_OPS, ids=str)
def test_a_value_reduction_of_summands_is_refused(op, tp_checked):
    # The max of P summands is not the max of the value they add up to.
    tp = tp_checked
    x = typed(torch.ones(4, dtype=torch.int64), tp, P)
    name = str(op).split(".")[-1].lower()
    with pytest.raises(spmd.SpmdTypeError) as e:
        dist.all_reduce(x, op=op, group=tp)
    assert str(e.value).startswith(
        f"all_reduce: a {name} reduction takes each rank's value, but the input is P on axis "
        f"mesh_tp: each rank holds a summand of the value, not the value. Sum it first")
    assert spmd.get_local_type(x) == {spmd.MeshAxis.of(tp): P}  # unchanged


@pytest.mark.parametrize("lt", [P, V, R, I], ids=str)
def test_a_mean_of_anything_is_replicate(lt, tp_checked):
    # avg of P: the sum scaled by 1/n (DDP's gradient mean); of values:
    # their mean. Either way the same on every rank.
    tp = tp_checked
    x = _raw_all_reduce(typed(torch.ones(4), tp, lt), tp, RO.AVG)
    assert spmd.get_local_type(x) == {spmd.MeshAxis.of(tp): R}


@pytest.mark.parametrize("lt", [R, I], ids=str)
def test_a_sum_needs_summands(lt, tp_checked):
    tp = tp_checked
    with pytest.raises(spmd.SpmdTypeError,
                       match=f"^all_reduce: expected input type P on axis mesh_tp, got {lt}"):
        _raw_all_reduce(typed(torch.ones(4), tp, lt), tp, RO.SUM)
    premul = dist._make_nccl_premul_sum(2.0)
    x = _raw_all_reduce(typed(torch.ones(4), tp, P), tp, premul)  # a scaled sum
    assert spmd.get_local_type(x) == {spmd.MeshAxis.of(tp): R}
    with pytest.raises(spmd.SpmdTypeError, match="expected input type P"):
        _raw_all_reduce(typed(torch.ones(4), tp, lt), tp, premul)


@pytest.mark.parametrize("op,lt,ok", [("sum", P, True), ("sum", V, True), ("sum", R, False),
                                      ("avg", V, True),
                                      ("max", V, True), ("max", P, False), ("min", R, True),
                                      ("product", P, False)])
def test_functional_all_reduce_by_reduce_op(op, lt, ok, tp_checked):
    import torch.distributed._functional_collectives as funcol
    tp = tp_checked
    f = torch.ops._c10d_functional
    for call in (lambda x: funcol.all_reduce(x, op, tp),  # what torchtitan's loss calls
                 lambda x: f.wait_tensor(f.all_reduce(x, op, tp.group_name)),
                 lambda x: f.wait_tensor(f.all_reduce_(x, op, tp.group_name)),
                 lambda x: funcol.all_reduce_coalesced([x, x.clone()], op, tp)[1]):
        x = typed(torch.ones(4), tp, lt)
        if ok:
            assert spmd.get_local_type(call(x)) == {spmd.MeshAxis.of(tp): R}
        else:
            with pytest.raises(spmd.SpmdTypeError, match="^all_reduce"):
                call(x)
            assert spmd.get_local_type(x) == {spmd.MeshAxis.of(tp): lt}


@pytest.mark.parametrize("op,lt,ok", [(RO.SUM, P, True), (RO.SUM, V, True), (RO.SUM, I, False),
                                      (RO.AVG, P, True),
                                      (RO.MAX, V, True), (RO.MAX, P, False)], ids=str)
def test_reduce_scatter_by_reduce_op(op, lt, ok, tp_checked):
    # Each rank keeps its own piece of the reduction: V whatever the op.
    import torch.distributed._functional_collectives as funcol
    tp = tp_checked
    out = typed(torch.zeros(2), tp, V)
    x = typed(torch.ones(8), tp, lt)
    if ok:
        dist.reduce_scatter_tensor(out, x, op=op, group=tp)
        name = str(op).split(".")[-1].lower()
        y = funcol.reduce_scatter_tensor(typed(torch.ones(8), tp, lt), name, 0, tp)
        assert spmd.get_local_type(y) == {spmd.MeshAxis.of(tp): V}
    else:
        with pytest.raises(spmd.SpmdTypeError, match="^reduce_scatter_tensor"):
            dist.reduce_scatter_tensor(out, x, op=op, group=tp)


def test_coalesced_all_reduce_types_every_tensor(tp_checked):
    tp = tp_checked
    xs = [typed(torch.ones(4), tp, P), typed(torch.ones(2), tp, P)]
    dist.all_reduce_coalesced(xs, group=tp)
    assert [spmd.get_local_type(x) for x in xs] == [{spmd.MeshAxis.of(tp): R}] * 2
    xs = [typed(torch.ones(4), tp, P), typed(torch.ones(2), tp, R)]
    with pytest.raises(spmd.SpmdTypeError, match="all_reduce_coalesced: expected input type P "
                       "on axis mesh_tp, got R"):
        dist.all_reduce_coalesced(xs, group=tp)
    assert spmd.get_local_type(xs[0]) == {spmd.MeshAxis.of(tp): P}  # nothing changed


@pytest.mark.filterwarnings("ignore::FutureWarning")  # 2.15's new names are not in 2.10
def test_coalesced_functional_gather_and_scatter(tp_checked):
    import torch.distributed._functional_collectives as funcol
    tp = tp_checked
    ys = funcol.all_gather_into_tensor_coalesced([typed(torch.ones(2), tp, V)] * 2, tp)
    assert [spmd.get_local_type(y) for y in ys] == [{spmd.MeshAxis.of(tp): R}] * 2
    zs = funcol.reduce_scatter_tensor_coalesced([typed(torch.ones(8), tp, P)] * 2, "sum",
                                                [0, 0], tp)
    assert [spmd.get_local_type(z) for z in zs] == [{spmd.MeshAxis.of(tp): V}] * 2
    with pytest.raises(spmd.SpmdTypeError, match="all_gather_into_tensor_coalesced: expected "
                       "input type V"):
        funcol.all_gather_into_tensor_coalesced([typed(torch.ones(2), tp, P)], tp)


@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_functional_autograd_collectives_are_typed(tp_checked):
    import torch.distributed._functional_collectives as funcol
    tp = tp_checked
    y = funcol.all_gather_tensor_autograd(typed(torch.ones(2), tp, V), 0, tp)
    assert spmd.get_local_type(y) == {spmd.MeshAxis.of(tp): R}
    with pytest.raises(spmd.SpmdTypeError, match="all_gather_into_tensor: expected input"):
        funcol.all_gather_tensor_autograd(typed(torch.ones(2), tp, P), 0, tp)


def test_functional_broadcast_is_refused_not_typed(tp_checked):
    # It was typed like an op on values before: a broadcast of V would
    # have come out V.
    tp = tp_checked
    f = torch.ops._c10d_functional
    with pytest.raises(spmd.SpmdTypeError, match="raw torch.distributed.broadcast is not yet"):
        f.broadcast(typed(torch.ones(2), tp, V), 0, tp.group_name)


def test_unknown_reduce_op_is_an_error(tp_checked):
    tp = tp_checked
    f = torch.ops._c10d_functional
    with pytest.raises(spmd.SpmdTypeError, match="all_reduce: cspmd has no rule for the reduce "
                       "op 'median'"):
        f.all_reduce(typed(torch.ones(2), tp, P), "median", tp.group_name)


def test_value_reductions_compared_with_the_reference(mesh, tp):
    """Deliberate difference (docs/differences.md): the reference types
    every raw all_reduce as a sum of P, whatever its op, and refuses V."""
    import reference
    ref = reference.load()
    reference.load("spmd_types.checker")
    outcomes = {}
    for lib in (spmd, ref):
        for op, lt in [(RO.SUM, "P"), (RO.SUM, "V"), (RO.MAX, "V"), (RO.MAX, "P"),
                       (RO.AVG, "V")]:
            x = lib.assert_type(torch.ones(2), {tp: getattr(lib, lt)})
            with lib.checker.typecheck():
                try:
                    dist.all_reduce(x, op=op, group=tp)
                    got = lib.get_local_type(x)[lib.MeshAxis.of(tp)]
                    outcomes[lib.__name__, str(op), lt] = repr(got)
                except Exception as e:  # noqa: BLE001
                    assert type(e).__name__ == "SpmdTypeError"
                    outcomes[lib.__name__, str(op), lt] = "refused"
    ours = {k[1:]: v for k, v in outcomes.items() if k[0] == "cspmd"}
    theirs = {k[1:]: v for k, v in outcomes.items() if k[0] != "cspmd"}
    assert ours[str(RO.SUM), "P"] == theirs[str(RO.SUM), "P"] == "R"
    assert ours[str(RO.SUM), "V"] == "R" and theirs[str(RO.SUM), "V"] == "refused"
    assert ours[str(RO.MAX), "V"] == "R" and theirs[str(RO.MAX), "V"] == "refused"
    assert ours[str(RO.MAX), "P"] == "refused" and theirs[str(RO.MAX), "P"] == "R"
    assert ours[str(RO.AVG), "V"] == "R" and theirs[str(RO.AVG), "V"] == "refused"


@pytest.mark.parametrize("strict_mode", ["strict", "permissive"])
def test_a_group_with_a_long_name_is_checked(mesh, strict_mode):
    # Group names are read whole, however long: a cut name would be a group
    # cspmd does not know, refused in strict mode and unchecked in permissive.
    pg = dist.new_group([0, 1, 2, 3])
    name = "a-long-group-name-" * 20 + strict_mode
    pg._set_group_name(name)
    torch._C._distributed_c10d._register_process_group(name, pg)
    x = spmd.assert_type(torch.ones(4), {pg: V})
    r = spmd.assert_type(torch.ones(4), {pg: R})
    with spmd.checker.typecheck(strict_mode=strict_mode):
        y = torch.ops._c10d_functional.wait_tensor(
            torch.ops._c10d_functional.all_reduce(x, "sum", pg.group_name))
        assert spmd.get_local_type(y) == {spmd.MeshAxis.of(pg): R}
        with pytest.raises(spmd.SpmdTypeError, match="all_reduce: expected input type P"):
            torch.ops._c10d_functional.all_reduce(r, "sum", pg.group_name)
