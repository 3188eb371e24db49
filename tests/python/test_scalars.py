"""Python numbers and the Scalar wrapper as operands."""

import pytest
import torch

import cspmd as spmd
from cspmd import I, P, R, V, Scalar, SpmdTypeError
from conftest import ltype

MSG_LINEAR = "Partial type on axis mesh_dp in a linear op requires all operands to be Partial"


def both(letter):
    return {"mesh_dp": letter, "mesh_tp": letter}


@pytest.mark.parametrize("t", [R, I, V])
def test_plain_scalar_adopts_type(checked, typed, t):
    x = typed(t)
    for out in (x + 1.0, 1.0 + x, x - 2, 3 - x, x * 2, 2.5 * x, x / 2):
        assert ltype(out) == both(t.name)


def test_partial_times_or_over_number_is_partial(checked, typed):
    p = typed(P)
    assert ltype(p * 2) == both("P")
    assert ltype(2.0 * p) == both("P")
    assert ltype(p / 2) == both("P")
    assert ltype(torch.mul(p, 3.0)) == both("P")


@pytest.mark.parametrize("expr", [
    lambda p: p + 1,
    lambda p: p - 1.0,
    lambda p: 1 - p,
    lambda p: 1.0 + p,
    lambda p: torch.add(p, 2),
], ids=["p+1", "p-1.0", "1-p", "1.0+p", "torch.add(p,2)"])
def test_partial_plus_number_is_affine(checked, typed, expr):
    with pytest.raises(SpmdTypeError) as ei:
        expr(typed(P))
    assert MSG_LINEAR in str(ei.value)


def test_number_only_result_values(checked, typed):
    # The real op ran with the right number.
    x = spmd.assert_type(torch.ones(3), R)
    out = x + 1.0
    with spmd.no_typecheck():
        assert torch.equal(out, torch.full((3,), 2.0))


def test_scalar_wrapper_types(checked, typed, dp_axis, tp_axis):
    def sc(value, t):
        return Scalar(value, {dp_axis: t, tp_axis: t})

    assert ltype(typed(R) + sc(1.0, V)) == both("V")
    assert ltype(torch.add(typed(R), sc(1.0, V))) == both("V")
    assert ltype(typed(P) * sc(2.0, R)) == both("P")
    assert ltype(typed(P) + sc(2.0, P)) == both("P")
    with pytest.raises(SpmdTypeError, match="Partial type on axis mesh_dp in a linear op"):
        typed(R) + sc(2.0, P)
    with pytest.raises(SpmdTypeError, match="Invariant type on axis mesh_dp cannot mix"):
        typed(I, requires_grad=True) + sc(2.0, V)
    assert ltype(typed(I) + sc(2.0, V)) == both("V")  # I takes no gradient: reads as R
    assert ltype(typed(P) * sc(2.0, I)) == both("P")
    with pytest.raises(SpmdTypeError):
        typed(P) * sc(2.0, V)


def test_scalar_wrapper_value_used(checked, dp_axis, tp_axis):
    x = spmd.assert_type(torch.zeros(2), R)
    out = x + Scalar(3.0, {dp_axis: V, tp_axis: V})
    with spmd.no_typecheck():
        assert torch.equal(out, torch.full((2,), 3.0))


def test_scalar_wrapper_per_axis(checked, typed, dp_axis, tp_axis):
    out = typed(R) * Scalar(2, {dp_axis: V, tp_axis: R})
    assert ltype(out) == {"mesh_dp": "V", "mesh_tp": "R"}


def test_get_local_type_of_scalar(dp_axis, tp_axis):
    s = Scalar(1.5, {dp_axis: V, tp_axis: R})
    assert spmd.get_local_type(s) == {dp_axis: V, tp_axis: R}
    assert float(s) == 1.5 and int(Scalar(3, {})) == 3


def test_scalar_drops_trivial_axes(tp_axis):
    s = Scalar(1, {tp_axis: V, spmd.MeshAxis.of(1, 1): R})
    assert spmd.get_local_type(s) == {tp_axis: V}


@pytest.mark.parametrize("bad", [True, False, "1", None, torch.tensor(1.0)])
def test_scalar_rejects_non_numbers(bad, tp_axis):
    with pytest.raises(TypeError):
        Scalar(bad, {tp_axis: R})


def test_scalar_unwrapped_outside_checking(tp_axis):
    x = torch.ones(2)
    out = x + Scalar(2.0, {tp_axis: P})    # no checking: plain number, no error
    assert torch.equal(out, torch.full((2,), 3.0))
    assert not spmd.has_local_type(out)


def test_scalar_at_plain_number_positions(checked, typed):
    # a Scalar anywhere is an operand, also where torch takes an int.
    ax = {"dp": R, "tp": V}
    x = typed({"dp": R, "tp": R}, 8)
    y = x.narrow(0, spmd.Scalar(1, ax), spmd.Scalar(2, ax))
    assert ltype(y) == {"mesh_dp": "R", "mesh_tp": "V"}
    z = torch.arange(spmd.Scalar(0, ax), spmd.Scalar(5, ax))
    assert ltype(z) == {"mesh_dp": "R", "mesh_tp": "V"}
    p = typed({"dp": R, "tp": P}, 8)
    with pytest.raises(spmd.SpmdTypeError):
        p.narrow(0, spmd.Scalar(1, ax), 2)
    # The parked types are used once: the next op sees none of them.
    assert ltype(x + 1) == {"mesh_dp": "R", "mesh_tp": "R"}
