"""Misuse of the collectives' arguments is an argument error, not a type error.

A bad dim, an axis that is not an axis, a nested tensor (ops over nested
tensors are typed; the collectives take strided ones): ValueError or
TypeError saying what was wrong, and nothing changes (the operand keeps its
type, no collective runs).  Dims in range are wrapped once, like torch does.
"""

import pytest
import torch

import cspmd as spmd
from cspmd import P, R, S, V, MeshAxis
from conftest import ltype


@pytest.fixture
def xv(checked, dp, tp):
    x = torch.randn(4, 4)
    spmd.assert_type(x, {dp: R, tp: V})
    return x


@pytest.fixture
def xp(checked, dp, tp):
    x = torch.randn(4, 4)
    spmd.assert_type(x, {dp: R, tp: P})
    return x


def unchanged(x, letter):
    assert ltype(x) == {"mesh_dp": "R", "mesh_tp": letter}


BAD_DIMS = [
    ("all_gather", "gather_dim", 3, "expected -3..2"),     # V stacks: 3 dims
    ("all_gather", "gather_dim", -4, "expected -3..2"),
    ("all_gather", "gather_dim", -9, "expected -3..2"),    # was wrapped to "no dim"
    ("reduce_scatter", "scatter_dim", 2, "expected -2..1"),
    ("reduce_scatter", "scatter_dim", -5, "expected -2..1"),
    ("all_to_all", "split_dim", 5, "expected -2..1"),
    ("all_to_all", "concat_dim", -7, "expected -2..1"),
]


@pytest.mark.parametrize("fn,name,dim,expected", BAD_DIMS)
def test_out_of_range_dim_is_a_value_error(xv, xp, tp, fn, name, dim, expected):
    x, letter = (xp, "P") if fn == "reduce_scatter" else (xv, "V")
    dst = {"all_gather": R, "reduce_scatter": V, "all_to_all": V}[fn]
    src = P if fn == "reduce_scatter" else V
    with pytest.raises(ValueError, match=rf"{fn}: {name}={dim} is out of range .*{expected}"):
        getattr(spmd, fn)(x, tp, src=src, dst=dst, **{name: dim})
    unchanged(x, letter)


@pytest.mark.parametrize("dim", [1.0, True, "0"])
def test_non_int_dim_is_a_value_error(xv, tp, dim):
    with pytest.raises(ValueError, match="all_gather: gather_dim must be an int"):
        spmd.all_gather(xv, tp, src=V, dst=R, gather_dim=dim)
    unchanged(xv, "V")


def test_negative_dim_in_range_is_wrapped_once(xv, tp):
    a = spmd.all_gather(xv, tp, src=V, dst=R, gather_dim=-1)
    b = spmd.all_gather(xv, tp, src=V, dst=R, gather_dim=2)
    assert a.shape == b.shape == (4, 4, 4)
    assert torch.equal(a, b)


@pytest.mark.parametrize("axis", [5, 2.0, [4, 1]], ids=["int", "float", "list"])
def test_axis_that_is_not_an_axis(xp, axis):
    with pytest.raises(TypeError, match="expected a ProcessGroup, MeshAxis or axis name as "
                                        "the axis"):
        spmd.all_reduce(xp, axis, src=P, dst=R)
    unchanged(xp, "P")


@pytest.mark.parametrize("bad,err,what", [(None, TypeError, "NoneType None"),
                                          ("tp", TypeError, "str 'tp'"),
                                          (True, TypeError, "bool True"),
                                          (10**9, ValueError, "no axis has this id")])
def test_mesh_axis_from_a_bad_id(bad, err, what):
    with pytest.raises(err, match=what):
        MeshAxis(bad)


def test_mesh_axis_from_a_good_id_is_the_same_object(tp_axis):
    assert MeshAxis(tp_axis.id) is tp_axis


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")
@pytest.mark.parametrize("fn", ["all_reduce", "all_gather", "reduce_scatter", "reinterpret"])
def test_nested_tensor_to_a_collective(checked, tp, fn):
    with spmd.checker.no_typecheck():
        nt = torch.nested.nested_tensor([torch.randn(2), torch.randn(3)])
    kw = {"all_reduce": dict(src=P, dst=R), "all_gather": dict(src=V, dst=R),
          "reduce_scatter": dict(src=P, dst=V), "reinterpret": dict(src=R, dst=V)}[fn]
    with pytest.raises(TypeError, match=f"{fn}: got a nested tensor"):
        getattr(spmd, fn)(nt, tp, **kw)


@pytest.mark.parametrize("call", [
    lambda x, tp: spmd.all_gather(x, tp, src=S(1), dst=R),
    lambda x, tp: spmd.all_gather(x, tp, src=V, dst=R, gather_dim=1),
    lambda x, tp: spmd.all_gather(x, tp, src=V, dst=R, gather_dim=2),
    lambda x, tp: spmd.all_to_all(x, tp, src=V, dst=V, split_dim=1, concat_dim=1),
    lambda x, tp: spmd.all_to_all(x, tp, src=S(0), dst=S(1)),
], ids=["gather_S1", "gather_V_dim1", "gather_V_dim2", "a2a_V_dim1", "a2a_S0_S1"])
def test_gathers_along_a_later_dim_are_contiguous(xv, tp, call):
    y = call(xv, tp)
    assert y.is_contiguous()


@pytest.mark.parametrize("dst,kw", [(S(1), {}), (V, {"scatter_dim": 1}),
                                    (S(1), {"split_sizes": [1, 1, 1, 1]})])
def test_reduce_scatter_along_a_later_dim_is_contiguous(xp, tp, dst, kw):
    y = spmd.reduce_scatter(xp, tp, src=P, dst=dst, **kw)
    assert y.is_contiguous()
