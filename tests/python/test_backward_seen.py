"""The kernel sees backward ops: gradients are typed, and checked."""

import pytest
import torch

import cspmd as spmd
from cspmd import I, P, R, V, SpmdTypeError
from cspmd.checker import typecheck
from conftest import ltype


def both(letter):
    return {"mesh_dp": letter, "mesh_tp": letter}


def test_weight_grad_is_typed(checked, typed):
    W = typed(R, requires_grad=True)
    x = typed(V)
    loss = (x @ W).sum()
    assert ltype(loss) == both("V")
    # a per-rank (V) loss is made a partial sum before backward() (SPEC 6.2)
    spmd.mutate_type(loss, src=V, dst=P)
    loss.backward()
    assert W.grad is not None
    assert spmd.has_local_type(W.grad)   # typed by the kernel, not by Python
    assert ltype(W.grad) == both("V")


def test_grad_of_partial_loss(checked, typed):
    W = typed(R, requires_grad=True)
    x = typed(P)
    loss = (x @ W).sum()
    assert ltype(loss) == both("P")
    loss.backward()
    # seed R (dual of P); grad of W = x^T @ R-grad -> P
    assert ltype(W.grad) == both("P")


def test_grad_mixed_axes(checked, typed, dp_axis, tp_axis):
    W = typed({dp_axis: R, tp_axis: I}, requires_grad=True)
    x = typed({dp_axis: V, tp_axis: I})
    loss = (x @ W).sum()
    assert ltype(loss) == {"mesh_dp": "V", "mesh_tp": "I"}
    spmd.mutate_type(loss, dp_axis, src=V, dst=P)
    loss.backward()
    # seed = dual of {dp: P, tp: I} = {dp: R, tp: I}; grad W = x^T @ seed
    assert ltype(W.grad) == {"mesh_dp": "V", "mesh_tp": "I"}


def test_grad_of_replicate_weight_is_partial(checked, typed):
    W = typed(R, requires_grad=True)
    x = typed(R)
    out = x @ W
    out.backward(typed(P))               # explicit P gradient of an R output
    assert ltype(W.grad) == both("P")


def test_implicit_seed_of_partial_loss_is_replicate(checked, typed):
    # A P loss whose graph goes through relu of R data: backward works only if
    # the implicit seed is typed R (the dual of P); a P-typed gradient could
    # not pass threshold_backward.
    r = typed(R, requires_grad=True)
    loss = torch.relu(r).sum()
    assert ltype(loss) == both("R")
    spmd.mutate_type(loss, src=R, dst=P)
    loss.retain_grad()
    loss.backward()
    assert ltype(loss.grad) == both("R")
    assert ltype(r.grad) == both("R")
    with spmd.no_typecheck():
        assert torch.equal(r.grad, (r > 0).float())


def test_implicit_seed_of_invariant_loss(checked, typed):
    r = typed(I, requires_grad=True)
    loss = torch.exp(r).sum()
    loss.retain_grad()
    loss.backward()
    assert ltype(loss.grad) == both("I")
    assert ltype(r.grad) == both("I")


def test_explicit_grad_type_flows(checked, typed):
    r = typed(R, requires_grad=True)
    out = r * 2.0
    g = typed(V)
    out.backward(g)
    assert ltype(r.grad) == both("V")


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
    a = typed(R, requires_grad=True)
    p = typed(P)
    out = _AddPartialInBackward.apply(a, p)        # forward is fine
    assert ltype(out) == both("R")
    g = typed(R)
    with pytest.raises(SpmdTypeError) as ei:
        out.backward(g)                             # R grad + P: affine
    msg = str(ei.value)
    assert "Partial type on axis mesh_dp in a linear op requires all operands to be Partial" in msg
    assert "In aten::add.Tensor(" in msg
    assert a.grad is None


def test_same_backward_unchecked_outside_typecheck(mesh, typed):
    with spmd.set_current_mesh(mesh):
        a = typed(R, requires_grad=True)
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
    w = typed(R, requires_grad=True)
    x = typed(V)
    (gw,) = torch.autograd.grad((x * w).sum(), w, )
    assert spmd.has_local_type(gw)
    assert ltype(gw) == both("V")
