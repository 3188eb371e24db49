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
