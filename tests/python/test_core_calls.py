"""The core functions Python calls directly are listed once, as rows of
CSPMD_PY_CALL_LIST in include/cspmd.h, and bound by one marshaller
(csrc/torch/core_calls.cpp): every row is bound, and arguments are read by
the C parameter types."""

import os
import re

import pytest

import cspmd as spmd
from cspmd._codes import LT
from cspmd._lib import ops

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HEADER = os.path.join(ROOT, "include", "cspmd.h")


def rows():
    with open(HEADER) as f:
        text = f.read()
    body = re.search(r"#define CSPMD_PY_CALL_LIST\(X\)(.*?)\n\n", text, re.S).group(1)
    return re.findall(r"X\((\w+)\)", body)


def test_every_row_is_a_declared_function_and_bound():
    with open(HEADER) as f:
        text = f.read()
    names = rows()
    assert len(names) == len(set(names)) > 20
    for name in names:
        assert re.search(rf"CSPMD_API [^;(]*\bcspmd_{name}\(", text), name
        assert callable(getattr(ops, name)), name


def test_outputs_are_returned_and_statuses_raised():
    tp = spmd.MeshAxis.of(4, 1)
    assert ops.ltype_dual(LT.R) == LT.P  # a plain result
    key = ops.axis_key_of_name("tp")     # an output parameter
    assert key < 0 and ops.axis_key_of_name("tp") == key
    assert ops.axes_flatten([tp.id]) == tp.id
    assert ops.annotation_merge_check([key, tp.id], [LT.R, LT.V], [-1, -1]) is None
    with pytest.raises(spmd.SpmdTypeError, match="Conflicting types on axis 'tp': R and V"):
        ops.annotation_merge_check([key, key], [LT.R, LT.V], [-1, -1])
    with pytest.raises(ValueError, match="an axis name must not be empty"):
        ops.axis_key_of_name("")


def test_bad_arguments_are_refused_before_the_call():
    key = ops.axis_key_of_name("tp")
    with pytest.raises(TypeError, match="annotation_merge_check takes 3 arguments, got 2"):
        ops.annotation_merge_check([key], [LT.R])
    with pytest.raises(ValueError, match="argument 3 differs in length"):
        ops.annotation_merge_check([key], [LT.R], [])  # one run of lists, one length
    with pytest.raises(TypeError, match="argument 1 must be a str"):
        ops.axis_key_of_name(3)
    with pytest.raises(TypeError, match="argument 1 must be a list of ints"):
        ops.axes_check_orthogonal("tp")
    with pytest.raises(TypeError, match="argument 1 must be an int"):
        ops.ltype_dual("R")
    with pytest.raises(RuntimeError, match="argument 1 out of range"):
        ops.type_dual(-1)  # a type id is a uint32_t
    with pytest.raises(RuntimeError, match="argument 1 out of range"):
        ops.type_dual(2**32)
