"""Writes through views retype the tensor they view (and its other views).

`buf[:4] = v` changes part of `buf`: after it, `buf` is the per-axis join
of its old type and the written one (V into part of an R buffer makes it V),
or the write is an error when no type describes the mix (P into part of an
R buffer).  Every view op torch has is covered, and `out=` into a view.
"""

import pytest
import torch

import cspmd as spmd
from cspmd import I, P, R, V, SpmdTypeError
from conftest import ltype


@pytest.fixture
def mk(dp, tp):
    def make(lt, *shape, requires_grad=False):
        x = torch.randn(*(shape or (4, 4)))
        if requires_grad:
            x.requires_grad_()
        spmd.assert_type(x, {dp: R, tp: lt})
        return x
    return make


def tp_of(x):
    return ltype(x)["mesh_tp"]


# (name, make the view of a 4x4 buffer, shape of that view)
VIEWS = {
    "slice": (lambda b: b[:2], (2, 4)),
    "select": (lambda b: b[1], (4,)),
    "narrow": (lambda b: b.narrow(1, 1, 2), (4, 2)),
    "view": (lambda b: b.view(16), (16,)),
    "transpose": (lambda b: b.transpose(0, 1), (4, 4)),
    "as_strided": (lambda b: b.as_strided((2, 2), (4, 1)), (2, 2)),
    "diagonal": (lambda b: b.diagonal(), (4,)),
    "unbind": (lambda b: b.unbind()[2], (4,)),
    "split": (lambda b: b.split(1)[3], (1, 4)),
    "unsqueeze": (lambda b: b.unsqueeze(0), (1, 4, 4)),
    "nested": (lambda b: b[1:3].t()[0], (2,)),
}


@pytest.mark.parametrize("name", VIEWS)
def test_varying_write_makes_the_base_varying(mk, checked, name):
    view_of, shape = VIEWS[name]
    buf = mk(R)
    other = buf[3:]                     # a second live view
    view_of(buf).copy_(mk(V, *shape))
    assert tp_of(buf) == "V"
    assert tp_of(other) == "V"          # the other view reads as its base
    y = other + mk(R, 1, 4)             # ... and ops see it so
    assert tp_of(y) == "V"


@pytest.mark.parametrize("name", VIEWS)
def test_partial_into_part_of_replicate_is_rejected(mk, checked, name):
    view_of, shape = VIEWS[name]
    buf = mk(R)
    before = buf.clone()
    with pytest.raises(SpmdTypeError):
        view_of(buf).copy_(mk(P, *shape))
    assert torch.equal(buf, before)     # nothing was written
    assert tp_of(buf) == "R"


def test_setitem_and_in_place_ops(mk, checked):
    buf = mk(R, 8)
    buf[:4] = mk(V, 4)
    assert tp_of(buf) == "V"
    buf = mk(R, 4, 4)
    buf.diagonal().add_(mk(V, 4))
    assert tp_of(buf) == "V"
    buf = mk(R, 4, 4)
    buf[0].mul_(2.0)                    # R stays R
    assert tp_of(buf) == "R"


def test_out_into_a_view(mk, checked):
    buf = mk(R, 8)
    torch.add(mk(V, 4), mk(V, 4), out=buf[:4])
    assert tp_of(buf) == "V"
    buf = mk(R, 8)
    with pytest.raises(SpmdTypeError):
        torch.add(mk(P, 4), mk(P, 4), out=buf[4:])


def test_joins(mk, checked):
    # P into part of P stays P; V into part of I makes it V
    buf = mk(P, 8)
    buf[:4] = mk(P, 4)
    assert tp_of(buf) == "P"
    buf = mk(I, 8)
    buf[:4] = mk(V, 4)
    assert tp_of(buf) == "V"
    buf = mk(V, 8)
    with pytest.raises(SpmdTypeError):
        buf[:4] = mk(P, 4)


def test_base_that_requires_grad_may_not_change(mk, checked):
    w = mk(R, 8, requires_grad=True)
    with torch.no_grad(), pytest.raises(SpmdTypeError, match="cannot change"):
        w[:4].copy_(mk(V, 4))
    assert tp_of(w) == "R"
    with torch.no_grad():
        w[:4].copy_(mk(R, 4))           # same type: fine
    assert tp_of(w) == "R"


def test_foreach_write_through_views(mk, checked):
    bufs = [mk(R, 8), mk(R, 8)]
    torch._foreach_copy_([b[:4] for b in bufs], [mk(R, 4), mk(V, 4)])
    assert [tp_of(b) for b in bufs] == ["R", "V"]


# ---- writes into a buffer with no type (never annotated, or typed on
# other axes only): V makes it V on those axes, P is refused, R and I
# leave it untyped there.

def untyped_buffer(*shape):
    with spmd.checker.no_typecheck():
        return torch.zeros(*(shape or (4, 4)))


@pytest.mark.parametrize("name", VIEWS)
def test_varying_write_into_an_untyped_buffer_makes_it_varying(mk, checked, name):
    view_of, shape = VIEWS[name]
    buf = untyped_buffer()
    other = buf[3:]                     # a second live view, untyped too
    view_of(buf).copy_(mk(V, *shape))
    # V on tp, where the written data is V; nothing claimed on dp, where
    # the old elements' type is unknown
    assert ltype(buf) == {"mesh_tp": "V"}
    assert ltype(other) == {"mesh_tp": "V"}


@pytest.mark.parametrize("name", VIEWS)
def test_partial_into_an_untyped_buffer_is_rejected(mk, checked, name):
    view_of, shape = VIEWS[name]
    buf = untyped_buffer()
    with pytest.raises(SpmdTypeError, match="no type on axis mesh_tp"):
        view_of(buf).copy_(mk(P, *shape))
    assert not spmd.has_local_type(buf)
    with spmd.checker.no_typecheck():
        assert not buf.any()            # nothing was written


@pytest.mark.parametrize("lt", [R, I])
def test_replicate_or_invariant_write_leaves_an_untyped_buffer_untyped(mk, checked, lt):
    buf = untyped_buffer(8)
    buf[:4] = mk(lt, 4)
    assert not spmd.has_local_type(buf)


def test_write_into_a_buffer_typed_on_other_axes(mesh, dp, tp, mk):
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck("permissive"):
        buf = spmd.assert_type(untyped_buffer(8), {dp: R})
        buf[:4] = mk(V, 4)
        assert ltype(buf) == {"mesh_dp": "R", "mesh_tp": "V"}
        buf = spmd.assert_type(untyped_buffer(8), {dp: R})
        with pytest.raises(SpmdTypeError, match="no type on axis mesh_tp"):
            buf[4:] = mk(P, 4)
        assert ltype(buf) == {"mesh_dp": "R"}


def test_untyped_buffer_writes_against_the_reference(mesh, dp, tp):
    """The same permissive program in both: V written into part of an
    untyped buffer, then the buffer used with an R tensor.  The reference
    leaves the buffer untyped, so the sum reads R on tp although half of it
    differs across ranks; cspmd types the buffer V there, so the sum is V.
    P written into it is refused by both (docs/differences.md)."""
    from reference import load

    def program(lib, checker):
        out = {}
        with lib.set_current_mesh(mesh), checker.typecheck(strict_mode="permissive"):
            with checker.no_typecheck():
                buf = torch.zeros(8)
            buf[:4] = lib.assert_type(torch.randn(4), {dp: lib.R, tp: lib.V})
            out["buf_typed"] = lib.has_local_type(buf)
            y = buf + lib.assert_type(torch.randn(8), {dp: lib.R, tp: lib.R})
            out["sum"] = {repr(a): t.name for a, t in lib.get_local_type(y).items()}
            with checker.no_typecheck():
                buf2 = torch.zeros(8)
            with pytest.raises(lib.SpmdTypeError):
                buf2[4:] = lib.assert_type(torch.randn(4), {dp: lib.R, tp: lib.P})
        return out

    ref = load()
    got_ref = program(ref, load("spmd_types.checker"))
    got = program(spmd, spmd.checker)
    assert got_ref == {"buf_typed": False, "sum": {"mesh_dp": "R", "mesh_tp": "R"}}
    assert got == {"buf_typed": True, "sum": {"mesh_dp": "R", "mesh_tp": "V"}}
