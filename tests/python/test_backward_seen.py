"""The kernel sees backward ops: gradients are typed, and checked.

Gradient types follow duality (R <-> P, I -> I, V -> V); a
leaf's gradient is the dual of its type, a V contribution to an R leaf being a
per-rank part of the pending sum (P).
"""

import pytest
import torch

import cspmd as spmd
from cspmd import I, P, R, V, SpmdTypeError
from conftest import ltype


def both(letter):
    return {"mesh_dp": letter, "mesh_tp": letter}


def local_loss_to_partial(loss, *groups):
    """Declare a per-rank (V) loss a partial sum, as the reference advises."""
    for g in groups:
        loss = spmd.reinterpret(loss, g, src=V, dst=P)
    return loss


def test_weight_grad_is_typed(checked, typed, dp, tp):
    W = typed(R, requires_grad=True)
    x = typed(V)
    loss = (x @ W).sum()
    assert ltype(loss) == both("V")
    loss = local_loss_to_partial(loss, dp, tp)
    loss.backward()
    assert W.grad is not None
    assert spmd.has_local_type(W.grad)   # typed by the kernel, not by Python
    assert ltype(W.grad) == both("P")    # the gradient of an R weight is P


def test_varying_leaf_grad_is_varying(checked, typed, dp, tp):
    x = typed(V, requires_grad=True)
    W = typed(R)
    loss = local_loss_to_partial((x @ W).sum(), dp, tp)
    loss.backward()
    assert ltype(x.grad) == both("V")


def test_grad_of_partial_loss(checked, typed):
    W = typed(R, requires_grad=True)
    x = typed(P)
    loss = (x @ W).sum()
    assert ltype(loss) == both("P")
    loss.backward()
    # seed R (dual of P); grad of W = x^T @ R-grad -> P
    assert ltype(W.grad) == both("P")


def test_grad_mixed_axes(checked, typed, dp, dp_axis, tp_axis):
    W = typed({dp_axis: R, tp_axis: I}, requires_grad=True)
    x = typed({dp_axis: V, tp_axis: I})
    loss = (x @ W).sum()
    assert ltype(loss) == {"mesh_dp": "V", "mesh_tp": "I"}
    loss = local_loss_to_partial(loss, dp)
    loss.backward()
    # seed = dual of {dp: P, tp: I} = {dp: R, tp: I}; grad W = x^T @ seed
    assert ltype(W.grad) == {"mesh_dp": "P", "mesh_tp": "I"}


def test_grad_of_replicate_weight_is_partial(checked, typed):
    W = typed(R, requires_grad=True)
    x = typed(R)
    out = x @ W
    out.backward(typed(P))               # explicit P gradient of an R output
    assert ltype(W.grad) == both("P")


def test_implicit_seed_of_partial_loss_is_replicate(checked, typed):
    # A P loss whose graph goes through relu of R data.  The implicit seed must
    # be typed R (the dual of P): a P seed would meet P again in mul's
    # backward (P * P), an untyped one would fail the strict mesh check.
    r = typed(R, requires_grad=True)
    p = typed(P)
    loss = (torch.relu(r) * p).sum()
    assert ltype(loss) == both("P")
    loss.retain_grad()
    loss.backward()
    assert ltype(loss.grad) == both("R")
    assert ltype(r.grad) == both("P")
    with spmd.no_typecheck():
        assert torch.allclose(r.grad, (r > 0).float() * p)


def test_implicit_seed_of_invariant_loss(checked, typed):
    r = typed(I, requires_grad=True)
    loss = torch.exp(r).sum()
    loss.retain_grad()
    loss.backward()
    assert ltype(loss.grad) == both("I")
    assert ltype(r.grad) == both("I")


def test_explicit_grad_type_flows(checked, typed):
    v = typed(V, requires_grad=True)
    (v * 2.0).backward(typed(V))
    assert ltype(v.grad) == both("V")
    i = typed(I, requires_grad=True)
    (i * 2.0).backward(typed(I))
    assert ltype(i.grad) == both("I")


class _AddPartialInBackward(torch.autograd.Function):
    """Forward is the identity; backward adds a saved P tensor to the grad."""

    @staticmethod
    def forward(ctx, a, p):
        ctx.save_for_backward(p)
        return a.clone()

    @staticmethod
    def backward(ctx, g):
        (p,) = ctx.saved_tensors
        return g + p, None


def test_backward_op_is_type_checked(checked, typed):
    a = typed(P, requires_grad=True)
    p = typed(P)
    out = _AddPartialInBackward.apply(a, p)        # forward is fine
    assert ltype(out) == both("P")
    g = typed(R)                                    # the gradient of a P output is R
    with pytest.raises(SpmdTypeError) as ei:
        out.backward(g)                             # backward runs R grad + P: affine
    msg = str(ei.value)
    assert "Partial type on axis mesh_dp in a linear op requires all operands to be Partial" in msg
    assert "In aten::add.Tensor(" in msg
    assert a.grad is None


def test_same_backward_unchecked_outside_typecheck(mesh, typed):
    with spmd.set_current_mesh(mesh):
        a = typed(P, requires_grad=True)
        p = typed(P)
        g = typed(R)
    out = _AddPartialInBackward.apply(a, p)
    out.backward(g)
    assert a.grad is not None


def test_backward_of_varying_grad_into_partial_rejected(checked, typed):
    class MulPartial(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a, p):
            ctx.save_for_backward(p)
            return a.clone()

        @staticmethod
        def backward(ctx, g):
            (p,) = ctx.saved_tensors
            return g * p, None

    a = typed(V, requires_grad=True)
    out = MulPartial.apply(a, typed(P))
    assert ltype(out) == both("V")
    with pytest.raises(SpmdTypeError, match="Partial type on axis mesh_dp cannot combine with Varying"):
        out.backward(typed(V))


def test_autograd_grad_types(checked, typed):
    w = typed(I, requires_grad=True)
    x = typed(I)
    (gw,) = torch.autograd.grad((x * w).sum(), w)
    assert spmd.has_local_type(gw)
    assert ltype(gw) == both("I")


@pytest.mark.parametrize("t,name", [(V, "Varying"), (R, "Replicate")])
def test_loss_check_rejects_varying_and_replicate_losses(checked, typed, t, name):
    w = typed(t, requires_grad=True)
    loss = (w * 2.0).sum()
    with pytest.raises(SpmdTypeError) as ei:
        loss.backward()
    assert str(ei.value).startswith(
        f"backward() on a {name} loss on axis mesh_dp would produce incorrect gradients.")
    assert w.grad is None


def test_loss_check_skipped_with_explicit_gradient(checked, typed):
    w = typed(V, requires_grad=True)
    (w * 2.0).sum().backward(typed(V, ()))
    assert ltype(w.grad) == both("V")
