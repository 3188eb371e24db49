"""The API that spmd_types 0.3.1 added, used as its callers use it; results
compared with the installed reference where the call needs no process group."""

import copy
import pickle

import pytest
import torch

import cspmd as spmd
import reference
from cspmd import I, P, PartitionSpec, R, S, SpmdType, V
from cspmd.checker import SpmdTypeMode, typecheck

TP = spmd.MeshAxis.of(4, 1)
DP = spmd.MeshAxis.of(2, 4)


def _as_text(st):
    return ({str(a): repr(t).split(".")[-1] for a, t in st.local_type.items()},
            None if st.partition_spec is None else tuple(st.partition_spec))


@pytest.mark.parametrize("args", [
    ({"tp": R}, None),
    ({"tp": V}, {"dp": R}, PartitionSpec("tp", None)),
    (SpmdType({"tp": S(0)}), {"dp": P}),
    (PartitionSpec(("dp", "tp")), {"tp": V}),
])
def test_merge_types_as_reference(args):
    ref = reference.load()

    def to_ref(a):
        if isinstance(a, SpmdType):
            return ref.SpmdType({k: getattr(ref, repr(t)) if not isinstance(t, S) else
                                 ref.S(t.dim) for k, t in a.local_type.items()})
        if isinstance(a, PartitionSpec):
            return ref.PartitionSpec(*a)
        if isinstance(a, dict):
            return {k: getattr(ref, repr(t)) for k, t in a.items()}
        return a

    mine = spmd.merge_types(*args)
    theirs = ref.merge_types(*(to_ref(a) for a in args))
    assert _as_text(mine) == _as_text(theirs)


def test_merge_types_errors():
    with pytest.raises(spmd.SpmdTypeError, match="Conflicting types on axis 'tp'"):
        spmd.merge_types({"tp": R}, {"tp": V})
    with pytest.raises(spmd.SpmdTypeError, match="Conflicting PartitionSpecs"):
        spmd.merge_types(PartitionSpec(TP), PartitionSpec(DP))
    with pytest.raises(TypeError, match="at most one bare type"):
        spmd.merge_types(R, I)
    with pytest.raises(spmd.SpmdTypeError, match="requires an active mesh"):
        spmd.merge_types(R)


def test_conflicts_and_spec_axes_are_decided_by_the_core(mesh):
    # merge_types and SpmdType pass the axes as written to the core
    # (cspmd_annotation_merge_check, cspmd_annotation_check_spec).
    with pytest.raises(spmd.SpmdTypeError,
                       match=r"Conflicting types on axis .*: S\(0\) and S\(1\)"):
        spmd.merge_types({TP: S(0)}, {TP: S(1)})
    assert spmd.merge_types({"tp": R}, {TP: V}).local_type == {"tp": R, TP: V}  # as written
    with pytest.raises(spmd.SpmdTypeError, match="axis 'tp' appears in the partition_spec but "
                       "its local type is R, not V"):
        SpmdType({"tp": R}, PartitionSpec("tp"))  # no mesh needed: the same name
    SpmdType({"tp": R}, PartitionSpec(TP))  # a name no mesh resolves is another axis
    with spmd.set_current_mesh(mesh):
        with pytest.raises(spmd.SpmdTypeError, match="axis 'tp' appears in the partition_spec"):
            SpmdType({spmd.normalize_axis("tp"): I}, PartitionSpec("tp"))  # resolved here
    with pytest.raises(spmd.SpmdTypeError, match="cannot be combined with an explicit"):
        SpmdType({TP: S(0)}, PartitionSpec(None))


def test_partition_specs_agree_as_the_core_compares_them(mesh):
    # cspmd_annotation_specs_check: written alike, or the same axes once
    # the mesh resolves names (trivial axes left out).
    one = spmd.MeshAxis.of(1, 1)
    assert spmd.merge_types(PartitionSpec("tp"), PartitionSpec("tp")).partition_spec == (
        PartitionSpec("tp"))  # no mesh needed
    with spmd.set_current_mesh(mesh):
        tp = spmd.normalize_axis("tp")
        merged = spmd.merge_types(PartitionSpec("tp", None), PartitionSpec((tp, one), None))
        assert merged.partition_spec == PartitionSpec("tp", None)  # the first, as written
        with pytest.raises(spmd.SpmdTypeError, match=r"Conflicting PartitionSpecs: "
                           r"PartitionSpec\(tp\) and PartitionSpec\(None, tp\)"):
            spmd.merge_types(PartitionSpec("tp"), PartitionSpec(None, "tp"))
    with pytest.raises(spmd.SpmdTypeError, match="cannot be compared"):
        spmd.merge_types(PartitionSpec("tp"), PartitionSpec(TP))  # no mesh resolves 'tp'


def test_process_group_keys_are_their_axis(mesh):
    tp_group = mesh.get_group("tp")
    tp = spmd.MeshAxis.of(tp_group)
    with pytest.raises(spmd.SpmdTypeError, match=f"Conflicting types on axis {tp!r}: R and V"):
        spmd.merge_types({tp_group: R}, {tp: V})
    assert spmd.merge_types({tp_group: R}, {tp_group: R}).local_type == {tp_group: R}


def test_bare_type_fills_unnamed_axes(mesh):
    with spmd.set_current_mesh(mesh):
        merged = spmd.merge_types(R, {TP: V})
        assert merged.local_type == {TP: V, DP: R}
        x = spmd.assert_type(torch.randn(4), R, {TP: V})
        assert spmd.get_local_type(x) == {TP: V, DP: R}
        y = spmd.assert_type(torch.randn(4, 2), I, PartitionSpec(TP, None))
        assert spmd.get_local_type(y) == {TP: V, DP: I}
        assert spmd.get_partition_spec(y) == PartitionSpec(TP, None)


def test_assert_type_several_types_and_sequences():
    a, b = torch.randn(4), torch.randn(4)
    out = spmd.assert_type([a, b], {TP: V}, None, {DP: R})
    assert isinstance(out, list) and out[0] is a
    assert spmd.get_local_type(b) == {TP: V, DP: R}
    c = spmd.assert_type(torch.randn(4, 3), {DP: R}, partition_spec=PartitionSpec(TP, None))
    assert spmd.get_local_type(c) == {TP: V, DP: R}
    with pytest.raises(spmd.SpmdTypeError, match="Conflicting types"):
        spmd.assert_type(torch.randn(2), {TP: R}, {TP: V})
    with pytest.raises(TypeError, match="at least one type"):
        spmd.assert_type(torch.randn(2))
    with pytest.raises(TypeError, match="at least one type"):
        spmd.assert_type(torch.randn(2), None, PartitionSpec(None))


def test_reinterpret_no_grad():
    x = spmd.assert_type(torch.randn(3), {TP: R, DP: V})
    assert spmd.reinterpret_no_grad(x, TP, dst=I) is x
    assert spmd.get_local_type(x) == {TP: I, DP: V}
    spmd.reinterpret_no_grad(x, TP, dst=R)
    assert spmd.get_local_type(x) == {TP: R, DP: V}
    with pytest.raises(spmd.SpmdTypeError, match="current type to be R or I; got V"):
        spmd.reinterpret_no_grad(x, DP, dst=R)
    with pytest.raises(ValueError, match="dst=R or dst=I"):
        spmd.reinterpret_no_grad(x, TP, dst=P)
    w = spmd.assert_type(torch.randn(3, requires_grad=True), {TP: R})
    with pytest.raises(ValueError, match="requires_grad=False"):
        spmd.reinterpret_no_grad(w, TP, dst=I)
    assert spmd.get_local_type(w) == {TP: R}


@pytest.mark.parametrize("start, axis, dst, grad", [
    ("R", "tp", "I", False), ("I", "tp", "R", False), ("R", "tp", "R", False),
    ("V", "tp", "R", False), ("R", "tp", "P", False), ("R", "tp", "I", True),
    ("R", "dp", "I", False),  # the tensor has no type on dp
])
def test_reinterpret_no_grad_as_reference(mesh, start, axis, dst, grad):
    """Same outcome as spmd_types 0.3.1: the new type, or the same error class."""
    ref = reference.load()

    def run(lib):
        x = torch.randn(3, requires_grad=grad)
        with lib.set_current_mesh(mesh):
            lib.assert_type(x, {"tp": getattr(lib, start)})
            try:
                out = lib.reinterpret_no_grad(x, axis, dst=getattr(lib, dst))
            except (ValueError, lib.SpmdTypeError) as e:
                return type(e).__name__
            assert out is x
            return {str(a): repr(t).split(".")[-1] for a, t in lib.get_local_type(x).items()}

    assert run(spmd) == run(ref)


def test_no_typecheck_every_form():
    def probe():
        return spmd.is_type_checking()

    @spmd.no_typecheck
    def bare():
        return probe()

    @spmd.no_typecheck()
    def called(depth=0):
        return probe() if depth == 0 else called(depth - 1) and probe()

    wrapped = spmd.no_typecheck(probe)
    with typecheck():
        assert probe()
        assert not bare() and not called() and not called(2) and not wrapped()
        assert probe()  # restored after each call, nested calls included
        with spmd.no_typecheck():
            assert not probe()
        assert probe()
    with pytest.raises(TypeError, match="requires a callable"):
        spmd.no_typecheck(3)


def test_spmd_type_mode_is_typecheck():
    with SpmdTypeMode() as mode:
        assert spmd.is_type_checking() and mode.strict
    assert not spmd.is_type_checking()
    with SpmdTypeMode(strict_mode="permissive") as mode:
        assert not mode.strict
    with typecheck() as handle:
        assert isinstance(handle, SpmdTypeMode) and handle.local


@pytest.mark.parametrize("fn,src,dst,kw", [
    (spmd.all_reduce, P, R, {}),
    (spmd.all_gather, V, R, {}),
    (spmd.reduce_scatter, P, S(0), {}),
    (spmd.all_to_all, S(0), S(0), {}),
    (spmd.convert, R, S(0), {}),
    (spmd.redistribute, P, R, {}),
])
def test_async_op_same_values_and_types(fn, src, dst, kw, mesh, tp):
    x = spmd.assert_type(torch.arange(8.0), {TP: src, DP: R})
    with spmd.set_current_mesh(mesh), typecheck():
        sync = fn(x, tp, src=src, dst=dst, **kw)
        late = fn(x, tp, src=src, dst=dst, async_op=True,
                  backward_options={"async_op": True}, **kw)
    # (the fake process group computes no values: shapes and types compared)
    assert sync.shape == late.shape and sync.dtype == late.dtype
    assert spmd.get_local_type(sync) == spmd.get_local_type(late)


def test_backward_options_keys(mesh, tp):
    x = spmd.assert_type(torch.randn(8), {TP: P, DP: R})
    valid = r"Valid keys are: \['async_op', 'backward_options', 'op_dtype', 'out_dtype'\]"
    with spmd.set_current_mesh(mesh), typecheck(), pytest.raises(ValueError, match=valid):
        spmd.all_reduce(x, tp, src=P, dst=R, backward_options={"nope": 1})


def test_scalar_local_type():
    s = spmd.Scalar(2.0, {TP: V})
    assert s.local_type == {TP: V}
    assert spmd.get_local_type(s) == {TP: V}
    assert spmd.get_axis_local_type(s, TP) is V
    assert spmd.maybe_get_axis_local_type(s, DP) is None


def test_error_context_set_later():
    e = spmd.SpmdTypeError("bad")
    assert str(e) == "bad"
    e.context = "In add(...)"
    assert str(e) == "bad\n\nIn add(...)"
    with pytest.raises(TypeError):
        spmd.SpmdTypeError()  # noqa  (msg is required, as in the reference)


def test_partition_spec_empty_and_empty_entries():
    assert PartitionSpec() == () and repr(PartitionSpec()) == "PartitionSpec()"
    spec = PartitionSpec(TP, ())  # kept as written; rejected where used
    assert spec[1] == ()
    with pytest.raises(ValueError, match="entry at dim 1 is an empty tuple"):
        spmd.normalize_partition_spec(spec)
    with pytest.raises(ValueError, match="entry at dim 1 is an empty tuple"):
        spmd.assert_type(torch.randn(2, 2), {}, partition_spec=PartitionSpec(TP, ()))


@pytest.mark.parametrize("value", [
    PartitionSpec(), PartitionSpec("tp", None, ("dp", "tp")), S(1), S(-1), R, I, V, P,
    SpmdType({"tp": S(0), "dp": R}), SpmdType({"tp": V}, PartitionSpec("tp", None)),
])
def test_types_pickle_and_copy(value):
    for clone in (pickle.loads(pickle.dumps(value)), copy.copy(value), copy.deepcopy(value)):
        assert clone == value and type(clone) is type(value)


@pytest.mark.parametrize("types,ndim,order", [
    ({"tp": S(0), "dp": S(1), "cp": R}, 2, None),
    ({"tp": S(0), "dp": S(0)}, 2, ["dp", "tp"]),
    ({"tp": S(0), "dp": S(0), "cp": S(1), "ep": S(0)}, 3, ["ep", "tp", "dp"]),
    ({"tp": S(0), "dp": S(0), "cp": S(0)}, 2, ["cp"]),   # unresolved: dp after cp
    ({"tp": S(1), "dp": S(0), "cp": S(0)}, 2, None),     # unresolved on dim 0
    ({"tp": S(0), "dp": S(1)}, 2, ["cp", "tp"]),         # cp names no S(d) entry
])
def test_shard_types_to_partition_spec_as_reference(types, ndim, order):
    # The core places the entries (cspmd_shards_layout); axes stay as written.
    ref = reference.load()
    ref_fn = reference.load("spmd_types.types").shard_types_to_partition_spec
    ref_types = {k: ref.S(t.dim) if isinstance(t, S) else getattr(ref, repr(t))
                 for k, t in types.items()}

    def run(fn, ts):
        try:
            return tuple(fn(ts, ndim, axis_order=order))
        except Exception as e:  # noqa: BLE001 -- the two must raise alike
            return type(e).__name__, str(e)

    assert run(spmd.shard_types_to_partition_spec, types) == run(
        ref_fn, ref_types)


def test_repeated_axis_order_entry_counts_once():
    # docs/differences.md: the reference places a repeated axis twice.
    types = {"tp": S(0), "dp": S(0)}
    spec = spmd.shard_types_to_partition_spec(types, 2, axis_order=["tp", "tp", "dp"])
    assert tuple(spec) == (("tp", "dp"), None)
    ref = reference.load()
    ref_fn = reference.load("spmd_types.types").shard_types_to_partition_spec
    ref_spec = ref_fn({"tp": ref.S(0), "dp": ref.S(0)}, 2, axis_order=["tp", "tp", "dp"])
    assert tuple(ref_spec) == (("tp", "tp", "dp"), None)
    with pytest.raises(spmd.SpmdTypeError, match=r"multiple axes \('dp', 'tp'\)"):
        spmd.shard_types_to_partition_spec(types, 2, axis_order=["dp", "dp"])
