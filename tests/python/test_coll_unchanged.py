"""Conversions whose src and dst agree still check their input and axis.

`convert(x, axis, src=R, dst=R)` or `reinterpret(x, axis, src=V, dst=V)`
changes nothing and returns x itself, but x must be src on the axis and the
axis must be one cspmd knows: a wrong input type raises the same error a real
collective would, an unknown axis or an unknown type the same ValueError or
TypeError.  Outside typecheck() only the arguments are validated.
"""

import pytest
import torch

import cspmd as spmd
from cspmd import I, P, R, V, S, SpmdTypeError
from conftest import ltype

UNCHANGED = [("reinterpret", V, V), ("reinterpret", R, R), ("reinterpret", P, P),
             ("convert", R, R), ("convert", V, S(0)), ("convert", S(1), V),
             ("redistribute", I, I), ("redistribute", S(0), V), ("redistribute", P, P)]


def make(tp_type, requires_grad=False, *, dp, tp):
    x = torch.randn(4, 4, requires_grad=requires_grad)
    spmd.assert_type(x, {dp: R, tp: tp_type})
    return x


def base(t):
    return V if isinstance(t, spmd.Shard) else t


@pytest.mark.parametrize("name,src,dst", UNCHANGED)
def test_wrong_input_type_is_rejected(name, src, dst, dp, tp, checked):
    wrong = R if base(src) is not R else I
    x = make(wrong, True, dp=dp, tp=tp)  # R/I pass for an input taking no gradient
    with pytest.raises(SpmdTypeError, match=f"{name}: expected input type"):
        getattr(spmd, name)(x, tp, src=src, dst=dst)
    assert ltype(x) == {"mesh_dp": "R", "mesh_tp": wrong.name}


@pytest.mark.parametrize("name,src,dst", UNCHANGED)
def test_right_input_type_is_returned_unchanged(name, src, dst, dp, tp, checked):
    x = make(base(src), dp=dp, tp=tp)
    assert getattr(spmd, name)(x, tp, src=src, dst=dst) is x
    assert ltype(x) == {"mesh_dp": "R", "mesh_tp": base(src).name}


def test_untyped_on_axis_is_rejected_in_strict_mode(dp, tp, checked):
    x = torch.randn(4)
    spmd.assert_type(x, {dp: R})
    with pytest.raises(SpmdTypeError, match="no type for axis"):
        spmd.convert(x, tp, src=R, dst=R)


@pytest.mark.parametrize("axis", [5, "no_such_axis", object()])
@pytest.mark.parametrize("name", ["reinterpret", "convert", "redistribute"])
def test_unknown_axis_is_rejected(name, axis, dp, tp, checked):
    # the same error, with the same message, as a collective that communicates
    x = make(R, dp=dp, tp=tp)
    with pytest.raises(Exception) as real:
        spmd.all_gather(x, axis, src=V, dst=R)
    with pytest.raises(type(real.value)) as unchanged:
        getattr(spmd, name)(x, axis, src=R, dst=R)
    assert str(unchanged.value) == str(real.value)


@pytest.mark.parametrize("name", ["reinterpret", "convert", "redistribute"])
def test_unknown_type_is_rejected(name, tp):
    x = torch.randn(4)
    with pytest.raises(ValueError, match="must be one of"):
        getattr(spmd, name)(x, tp, src="R", dst="R")


def test_outside_typecheck_only_arguments_are_checked(dp, tp):
    x = make(R, dp=dp, tp=tp)
    assert spmd.reinterpret(x, tp, src=V, dst=V) is x      # no type check
    with pytest.raises(TypeError):
        spmd.reinterpret(x, 5, src=V, dst=V)
