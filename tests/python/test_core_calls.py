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
    # Outputs inside a run of lists (before its n) come back as lists of n.
    dims, places = ops.shards_layout([key, tp.id], [0, -1], [1], 2, True)
    assert (dims, places) == ([0, 1], [0, 0])
    assert ops.shards_layout([], [], [], 2, True) == ([], [])
    assert ops.coll_src_as(spmd._codes.COLL.ALL_REDUCE, LT.V) == LT.P


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


def test_collective_types_travel_as_pairs():
    from cspmd._codes import COLL
    # cspmd_ctype_t <- (local type, shard dim); an int result comes first,
    # then the outputs: cspmd_coll_split's (splits?, middle type).
    assert ops.coll_noop(COLL.CONVERT, (LT.V, 0), (LT.V, 0)) == 1
    assert ops.coll_noop(COLL.CONVERT, (LT.V, 0), (LT.V, 1)) == 0
    assert ops.coll_split(COLL.REINTERPRET, (LT.I, -1), (LT.P, -1)) == (1, (LT.R, -1))
    assert ops.coll_split(COLL.ALL_REDUCE, (LT.P, -1), (LT.R, -1))[0] == 0
    with pytest.raises(ValueError, match="all_reduce src must be P"):
        ops.coll_validate(COLL.ALL_REDUCE, (LT.R, -1), (LT.R, -1), False)
    with pytest.raises(TypeError, match="argument 2 must be a pair"):
        ops.coll_noop(COLL.CONVERT, LT.V, (LT.V, 0))
    with pytest.raises(TypeError, match="argument 3 must be a pair"):
        ops.coll_noop(COLL.CONVERT, (LT.V, 0), (LT.V, 0, 1))
    with pytest.raises(RuntimeError, match="argument 2 out of range"):
        ops.coll_noop(COLL.CONVERT, (LT.V, 2**31), (LT.V, 0))  # an int32_t shard dim


def test_two_runs_of_lists_each_have_their_count():
    tp, dp = spmd.MeshAxis.of(4, 1), spmd.MeshAxis.of(2, 4)
    mesh = ops.mesh_intern([dp.id, tp.id], [dp.id])  # (axes, n, local, nlocal, *id)
    assert mesh > 0 and ops.mesh_intern([tp.id, dp.id], [dp.id]) == mesh
    assert ops.mesh_intern([dp.id, tp.id], []) != mesh
