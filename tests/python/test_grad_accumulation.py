"""Gradient duality at leaves, whatever the annotation order, and gradient
accumulation into ``.grad`` over micro-batches.

Every checked ``backward()`` puts a check on the gradient accumulators of
the graph (csrc/torch/grad_accumulate.cpp): it runs after the leaf's tensor
hooks, right before the engine adds the gradient to ``.grad``, and checks
(a) the incoming gradient is the dual of the leaf's type and (b) the
gradient ``.grad`` already holds is one too -- a reduced ``.grad`` must not
receive a pending gradient (``cspmd_grad_accum_check``).
"""

import pytest
import torch

import cspmd as spmd
from cspmd import I, P, R, V, SpmdTypeError
from conftest import ltype

DP, TP = "mesh_dp", "mesh_tp"


def reducing_hook(dp):
    """A gradient hook that all-reduces each contribution (the classic
    double reduction when the optimizer's all-reduce also runs)."""
    return lambda g: spmd.all_reduce(g, dp, src=P, dst=R)


def loss_of(x, w, dp):
    return spmd.reinterpret((x @ w).pow(2).sum(), dp, src=V, dst=P)


def data(dp, tp):
    return spmd.assert_type(torch.randn(2, 4), {dp: V, tp: I})


# ---- annotation order -------------------------------------------------------


def leaf_annotated_before_requires_grad(dp, tp):
    w = spmd.assert_type(torch.randn(4, 3), {dp: R, tp: I})
    return w.requires_grad_()


def leaf_annotated_after_requires_grad(dp, tp):
    return spmd.assert_type(torch.randn(4, 3, requires_grad=True), {dp: R, tp: I})


def parameter_of_a_typed_tensor(dp, tp):
    return torch.nn.Parameter(spmd.assert_type(torch.randn(4, 3), {dp: R, tp: I}))


def parameter_annotated(dp, tp):
    return spmd.assert_type(torch.nn.Parameter(torch.randn(4, 3)), {dp: R, tp: I})


ORDERS = [leaf_annotated_before_requires_grad, leaf_annotated_after_requires_grad,
          parameter_of_a_typed_tensor, parameter_annotated]


@pytest.mark.parametrize("make", ORDERS, ids=lambda f: f.__name__)
def test_duality_is_checked_whatever_the_annotation_order(make, mesh, dp, tp):
    w = make(dp, tp)
    w.register_hook(reducing_hook(dp))
    x = data(dp, tp)
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck():
        loss = loss_of(x, w, dp)
        with pytest.raises(SpmdTypeError) as ei:
            loss.backward()
    msg = str(ei.value)
    kind = "parameter" if isinstance(w, torch.nn.Parameter) else "tensor"
    assert msg.startswith(f"Gradient type mismatch for {kind} float32[4, 3] on axis mesh_dp: the "
                          "tensor is R, so its gradient must be P (or V), but the gradient is R.")
    assert w.grad is None


@pytest.mark.parametrize("make", ORDERS, ids=lambda f: f.__name__)
def test_correct_gradient_whatever_the_annotation_order(make, mesh, dp, tp):
    w = make(dp, tp)
    x = data(dp, tp)
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck():
        loss_of(x, w, dp).backward()
    assert ltype(w.grad) == {DP: "P", TP: "I"}


def test_autograd_grad_checks_leaf_gradients(mesh, dp, tp):
    """autograd.grad returns a leaf's gradient instead of accumulating it:
    it is checked (and a V piece typed P) all the same."""
    w = leaf_annotated_before_requires_grad(dp, tp)
    x = data(dp, tp)
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck():
        (g,) = torch.autograd.grad(loss_of(x, w, dp), w)
        assert ltype(g) == {DP: "P", TP: "I"}
        reduced = spmd.all_reduce(g, dp, src=P, dst=R)
        with pytest.raises(SpmdTypeError, match="Gradient type mismatch for tensor"):
            _grad_through_hook(x, w, dp, reduced)


def _grad_through_hook(x, w, dp, reduced):
    h = w.register_hook(lambda _: reduced)
    try:
        return torch.autograd.grad(loss_of(x, w, dp), w)
    finally:
        h.remove()


# ---- accumulation over micro-batches -------------------------------------


def micro_batches(n, dp, tp):
    torch.manual_seed(0)
    return [spmd.assert_type(torch.randn(2, 4), {dp: V, tp: I}) for _ in range(n)]


def test_pending_gradients_accumulate_and_equal_the_unchecked_sum(mesh, dp, tp):
    w = leaf_annotated_after_requires_grad(dp, tp)
    ref = w.detach().clone().requires_grad_()
    xs = micro_batches(3, dp, tp)
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck():
        for x in xs:
            loss_of(x, w, dp).backward()                      # P + P + P
    for x in xs:
        (x @ ref).pow(2).sum().backward()
    assert ltype(w.grad) == {DP: "P", TP: "I"}
    assert torch.equal(w.grad, ref.grad)


def test_reduced_gradients_accumulate(mesh, dp, tp):
    """A Partial leaf's gradient is R: R + R accumulates."""
    a = spmd.assert_type(torch.randn(2, 4, requires_grad=True), {dp: P, tp: I})
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck():
        for _ in range(2):
            loss = spmd.all_reduce(a.sum(), dp, src=P, dst=I)     # {dp: I, tp: I}
            loss.backward()
    assert ltype(a.grad) == {DP: "R", TP: "I"}
    assert torch.equal(a.grad, torch.full((2, 4), 2.0))


def test_pending_into_reduced_grad_raises(mesh, dp, tp):
    """The hard case: the first micro-batch's .grad was all-reduced (R), the
    second backward adds a pending gradient to it."""
    w = leaf_annotated_after_requires_grad(dp, tp)
    xs = micro_batches(2, dp, tp)
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck():
        loss_of(xs[0], w, dp).backward()
        w.grad = spmd.all_reduce(w.grad, dp, src=P, dst=R)
        before = w.grad.clone()
        with pytest.raises(SpmdTypeError) as ei:
            loss_of(xs[1], w, dp).backward()
    msg = str(ei.value)
    assert msg.startswith("Gradient accumulation type mismatch for tensor float32[4, 3] on axis "
                          "mesh_dp: the tensor is R, so its .grad must be P (or V), but the .grad "
                          "this backward accumulates into is R.")
    assert "already reduced" in msg
    assert torch.equal(w.grad, before)                  # nothing accumulated


def test_pending_into_grad_reduced_in_place_by_raw_all_reduce_raises(mesh, dp, tp):
    import torch.distributed as dist
    w = leaf_annotated_after_requires_grad(dp, tp)
    xs = micro_batches(2, dp, tp)
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck():
        loss_of(xs[0], w, dp).backward()
        dist.all_reduce(w.grad, group=dp)               # in place: .grad is R now
        assert ltype(w.grad) == {DP: "R", TP: "I"}
        with pytest.raises(SpmdTypeError, match="Gradient accumulation type mismatch"):
            loss_of(xs[1], w, dp).backward()


def test_reduced_into_pending_grad_raises(mesh, dp, tp):
    """Vice versa: .grad holds a pending sum and a hook hands a reduced
    gradient to the accumulation."""
    w = leaf_annotated_after_requires_grad(dp, tp)
    xs = micro_batches(2, dp, tp)
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck():
        loss_of(xs[0], w, dp).backward()
        w.register_hook(reducing_hook(dp))
        with pytest.raises(SpmdTypeError, match="Gradient type mismatch for tensor float32"):
            loss_of(xs[1], w, dp).backward()
    assert ltype(w.grad) == {DP: "P", TP: "I"}


@pytest.mark.parametrize("zero_where", ["inside", "outside"])
def test_reduced_grad_zeroed_in_place_accepts_new_gradients(zero_where, mesh, dp, tp):
    """zero_grad(set_to_none=False) keeps the (reduced, R) buffer: zeros are
    every type, so the next pending gradient accumulates into it."""
    w = torch.nn.Parameter(torch.randn(4, 3))
    spmd.assert_type(w, {dp: R, tp: I})
    opt = torch.optim.SGD([w], lr=0.1)
    xs = micro_batches(2, dp, tp)
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck():
        loss_of(xs[0], w, dp).backward()
        w.grad = spmd.all_reduce(w.grad, dp, src=P, dst=R)
    if zero_where == "outside":
        opt.zero_grad(set_to_none=False)
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck():
        if zero_where == "inside":
            opt.zero_grad(set_to_none=False)
        loss_of(xs[1], w, dp).backward()
    assert ltype(w.grad) == {DP: "P", TP: "I"}


def test_zero_grad_set_to_none(mesh, dp, tp):
    w = torch.nn.Parameter(torch.randn(4, 3))
    spmd.assert_type(w, {dp: R, tp: I})
    opt = torch.optim.SGD([w], lr=0.1)
    xs = micro_batches(2, dp, tp)
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck():
        loss_of(xs[0], w, dp).backward()
        w.grad = spmd.all_reduce(w.grad, dp, src=P, dst=R)
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss_of(xs[1], w, dp).backward()
    assert ltype(w.grad) == {DP: "P", TP: "I"}


def test_post_accumulate_hook_may_reduce_the_grad(mesh, dp, tp):
    """A DDP-style post-accumulate hook reducing .grad in place is correct:
    the accumulated gradient is complete when it runs."""
    import torch.distributed as dist
    w = leaf_annotated_after_requires_grad(dp, tp)
    w.register_post_accumulate_grad_hook(lambda p: dist.all_reduce(p.grad, group=dp))
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck():
        loss_of(data(dp, tp), w, dp).backward()
    assert ltype(w.grad) == {DP: "R", TP: "I"}


def test_unchecked_backward_adds_no_check(mesh, dp, tp):
    w = leaf_annotated_after_requires_grad(dp, tp)
    w.register_hook(reducing_hook(dp))
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck(backward=False):
        loss_of(data(dp, tp), w, dp).backward()
    assert not spmd.has_local_type(w.grad)
