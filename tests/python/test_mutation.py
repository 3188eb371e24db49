"""In-place ops and out=."""

import pytest
import torch

import cspmd as spmd
from cspmd import I, P, R, V, SpmdTypeError
from cspmd.checker import no_typecheck
from conftest import ltype

CHANGE = "in-place/out operation would change SPMD type on axis mesh_dp"
CANNOT = "In-place and out= operations cannot change a tensor's SPMD type."


def both(letter):
    return {"mesh_dp": letter, "mesh_tp": letter}


def test_inplace_r_add_v_becomes_v(checked, typed):
    r = typed(R)
    out = r.add_(typed(V))
    assert out is r
    assert ltype(r) == both("V")


def test_iadd_r_plus_v_becomes_v(checked, typed):
    r = typed(R)
    r += typed(V)
    assert ltype(r) == both("V")


def test_inplace_i_add_v_rejected_and_unchanged(checked, typed):
    i = typed(I, requires_grad=True).clone()  # takes a gradient: its I is fixed
    with pytest.raises(SpmdTypeError, match="Invariant type on axis mesh_dp cannot mix"):
        i.add_(typed(V))  # I does not mix with V at all
    assert ltype(i) == both("I")


def test_inplace_i_to_v_allowed_without_grad(checked, typed):
    i = typed(I)
    i.copy_(typed(V))
    assert ltype(i) == both("V")


def test_inplace_p_add_p(checked, typed):
    p = typed(P)
    p.add_(typed(P))
    assert ltype(p) == both("P")


def test_inplace_mul_scalar_keeps_type(checked, typed):
    p = typed(P)
    p.mul_(2.0)
    assert ltype(p) == both("P")
    v = typed(V)
    v.relu_()
    assert ltype(v) == both("V")


def test_out_cannot_change_type(checked, typed):
    o = typed(V)
    with pytest.raises(SpmdTypeError) as ei:
        torch.add(typed(R), typed(R), out=o)
    msg = str(ei.value)
    assert CHANGE in msg
    assert "from V to R" in msg
    assert CANNOT in msg
    assert ltype(o) == both("V")


def test_out_r_with_v_result_becomes_v(checked, typed):
    o = typed(R)
    res = torch.add(typed(R), typed(V), out=o)
    assert res is o
    assert ltype(o) == both("V")


def test_out_untyped_takes_result_type(checked, typed):
    with no_typecheck():
        o = torch.empty(4, 4)
    torch.add(typed(R), typed(R), out=o)
    assert ltype(o) == both("R")


def test_out_is_not_an_operand(checked, typed):
    # a P out= tensor does not make P + P fail or pass: P+P -> P matches it
    o = typed(P)
    torch.add(typed(P), typed(P), out=o)
    assert ltype(o) == both("P")


def test_out_values_written(checked):
    a = spmd.assert_type(torch.ones(2), R)
    o = spmd.assert_type(torch.zeros(2), R)
    torch.mul(a, 3.0, out=o)
    with no_typecheck():
        assert torch.equal(o, torch.full((2,), 3.0))


def test_requires_grad_nonleaf_cannot_change_r_to_v(checked, typed):
    w = typed(R, requires_grad=True)
    h = w * 1.0               # non-leaf R that requires grad
    with pytest.raises(SpmdTypeError) as ei:
        h.add_(typed(V))
    msg = str(ei.value)
    assert "from R to V" in msg
    assert CANNOT in msg
    assert ltype(h) == both("R")


def test_requires_grad_leaf_under_no_grad_cannot_change_r_to_v(checked, typed):
    w = typed(R, requires_grad=True)
    with torch.no_grad():
        with pytest.raises(SpmdTypeError, match="in-place/out operation would change SPMD type"):
            w.add_(typed(V))
    assert ltype(w) == both("R")


def test_requires_grad_same_type_inplace_ok(checked, typed):
    w = typed(V, requires_grad=True)
    with torch.no_grad():
        w.add_(typed(R))
    assert ltype(w) == both("V")


def test_copy_takes_type_from_src(checked, typed):
    # cspmd: copy_'s new type is src's alone (rules.c, a documented deviation);
    # the change of self is then validated like any in-place op.
    dst = typed(R)
    dst.copy_(typed(V))          # R -> V allowed (no grad)
    assert ltype(dst) == both("V")
    dst2 = typed(V)
    with pytest.raises(SpmdTypeError, match="in-place/out operation would change"):
        dst2.copy_(typed(R))     # V -> R is not
    assert ltype(dst2) == both("V")
    dst3 = typed(P)
    dst3.copy_(typed(P))
    assert ltype(dst3) == both("P")
