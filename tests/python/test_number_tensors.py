"""0-d tensors that stand for a number: torch.where(c, x, 0) and friends.

torch's Scalar overloads of where build their number with aten::scalar_tensor
before cspmd's key sees the op, so the checker gets a fresh 0-d tensor in
place of the Python number.  cspmd marks that tensor as the number it was
made from (the core's cspmd_rule_result_number), and later ops read it as a
plain number: it adopts the other operands' type, a zero keeps P where a
zero fill is linear, any other number next to P is affine.
"""

import pytest
import torch

import cspmd as spmd
from cspmd import P, R, V, SpmdTypeError
from cspmd.checker import typecheck
from conftest import ltype

MSG_LINEAR = "Partial type on axis mesh_tp in a linear op requires all operands to be Partial"


def tp_only(tp_axis, t):
    return {tp_axis: t}


@pytest.mark.parametrize("form", [
    lambda c, x: torch.where(c, x, 0),
    lambda c, x: torch.where(c, 0.0, x),
    lambda c, x: torch.where(c, x, -1.5),
    lambda c, x: x.where(c, 2),
], ids=["where(c,x,0)", "where(c,0.,x)", "where(c,x,-1.5)", "x.where(c,2)"])
@pytest.mark.parametrize("t", [R, V])
def test_where_with_a_number_in_strict_mode_without_a_mesh(typed, tp_axis, form, t):
    # torchtitan's loss: strict mode, types on one axis, no current mesh.
    x = typed(tp_only(tp_axis, t), 8)
    c = spmd.assert_type(torch.rand(8) > 0.5, tp_only(tp_axis, t))
    with typecheck():
        out = form(c, x)
    assert ltype(out) == {"mesh_tp": t.name}
    with spmd.no_typecheck():
        assert torch.equal(out, form(c, x))


def test_where_zero_keeps_partial_and_other_numbers_are_affine(typed, tp_axis):
    p = typed(tp_only(tp_axis, P), 8)
    c = spmd.assert_type(torch.rand(8) > 0.5, tp_only(tp_axis, R))
    with typecheck():
        assert ltype(torch.where(c, p, 0)) == {"mesh_tp": "P"}
        assert ltype(torch.where(c, 0.0, p)) == {"mesh_tp": "P"}
        for bad in (lambda: torch.where(c, p, 5.0), lambda: torch.where(c, 1, p)):
            with pytest.raises(SpmdTypeError) as ei:
                bad()
            assert MSG_LINEAR in str(ei.value)
            assert "aten::where" in str(ei.value)


def test_where_of_two_numbers_takes_the_condition(typed, tp_axis):
    c = spmd.assert_type(torch.rand(8) > 0.5, tp_only(tp_axis, V))
    with typecheck():
        out = torch.where(c, 1.0, 0.0)
    assert ltype(out) == {"mesh_tp": "V"}


def test_explicit_scalar_tensor_is_a_number(typed, tp_axis):
    # Deliberate difference (docs/differences.md): the reference refuses it
    # in strict mode as an unannotated tensor; it is a constant like 1.0.
    x = typed(tp_only(tp_axis, V), 4)
    with typecheck():
        assert ltype(x + torch.scalar_tensor(1.0)) == {"mesh_tp": "V"}
        p = spmd.assert_type(x.clone(), tp_only(tp_axis, P))
        assert ltype(p * torch.scalar_tensor(3.0)) == {"mesh_tp": "P"}
        with pytest.raises(SpmdTypeError) as ei:
            p + torch.scalar_tensor(1.0)
        assert MSG_LINEAR in str(ei.value)


def test_other_constants_stay_tensors(typed, tp_axis):
    # torch.tensor(1.0) and torch.ones(()) are data the user made: strict
    # mode still asks for their type.
    x = typed(tp_only(tp_axis, V), 4)
    with typecheck():
        for make in (lambda: torch.tensor(1.0), lambda: torch.ones(()),
                     lambda: torch.zeros(())):
            with pytest.raises(SpmdTypeError, match=r"args\[1\] missing axis mesh_tp"):
                x + make()


def test_a_number_that_takes_a_gradient_is_a_tensor(typed, tp_axis):
    x = typed(tp_only(tp_axis, V), 4)
    with typecheck():
        s = torch.scalar_tensor(2.0, requires_grad=True)
        with pytest.raises(SpmdTypeError, match=r"args\[1\] missing axis mesh_tp"):
            x * s


def test_a_number_written_over_is_data(typed, tp_axis):
    # An in-place write gives the tensor the written value's type; it no
    # longer stands for its number.
    x = typed(tp_only(tp_axis, V), 4)
    with typecheck():
        s = torch.scalar_tensor(0.0)
        s.copy_(x[0])
        assert ltype(s) == {"mesh_tp": "V"}
        p = spmd.assert_type(torch.randn(4), tp_only(tp_axis, P))
        c = spmd.assert_type(torch.rand(4) > 0.5, tp_only(tp_axis, R))
        with pytest.raises(SpmdTypeError):
            torch.where(c, p, s)


def test_where_with_a_number_backward_is_checked(typed, tp_axis, tp):
    # w is R; each rank masks its own copy with its own V condition, so the
    # gradient of w is V (a rank's contribution).
    w = typed(tp_only(tp_axis, R), 8, requires_grad=True)
    c = spmd.assert_type(torch.rand(8) > 0.5, tp_only(tp_axis, V))
    with typecheck():
        loss = torch.where(c, w, 0).sum()
        assert ltype(loss) == {"mesh_tp": "V"}
        spmd.reinterpret(loss, tp, src=V, dst=P).backward()
    assert ltype(w.grad) == {"mesh_tp": "P"}
    assert torch.equal(w.grad, c.float())


def test_where_with_a_number_matches_the_reference(tp):
    import reference
    ref = reference.load()
    reference.load("spmd_types.checker")
    for lib in (spmd, ref):
        x = lib.assert_type(torch.randn(8), {tp: lib.V})
        c = lib.assert_type(torch.rand(8) > 0.5, {tp: lib.V})
        with lib.checker.typecheck(strict_mode="strict"):
            out = torch.where(c, x, 0)
            assert list(lib.get_local_type(out).values()) == [lib.V]
