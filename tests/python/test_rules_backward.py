"""A Function typed by an spmd_typecheck hook trains under cspmd's backward
checking: its backward runs with checking paused (the hook is the
declaration the checker cannot derive) and each gradient it returns is
typed as the dual of its input's type; what the gradients meet around the
Function is checked as usual."""

import pytest
import torch
import torch.distributed as dist

import cspmd as spmd
from cspmd import I, P, R, V, rules
from cspmd.checker import typecheck

from conftest import ltype


@torch.library.custom_op("cspmd_test::opaque_square", mutates_args=())
def opaque_square(x: torch.Tensor) -> torch.Tensor:
    return x * x


@torch.library.custom_op("cspmd_test::opaque_square_bwd", mutates_args=())
def opaque_square_bwd(g: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return 2 * g * x


class _Square(torch.autograd.Function):
    """An opaque kernel: cspmd has no rule for either custom op, so op by op
    the backward kernel is non-linear in a Partial gradient."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return opaque_square(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return opaque_square_bwd(g, x)


class Square(_Square):
    @staticmethod
    def spmd_typecheck(*, x):
        return rules.einsum("...->...", x)


def _train(mesh, dp, tp, fn, steps=2):
    w = spmd.assert_type(torch.randn(8, requires_grad=True), {dp: R, tp: R})
    opt = torch.optim.SGD([w], lr=0.1)
    seen = []
    for _ in range(steps):
        with spmd.set_current_mesh(mesh), typecheck():
            y = fn.apply(w)
            loss = spmd.convert(spmd.convert(y.sum(), dp, src=R, dst=P), tp, src=R, dst=P)
            loss.backward()
            seen.append(ltype(w.grad))
            with torch.no_grad():
                w.grad = spmd.all_reduce(spmd.all_reduce(w.grad, dp, src=P, dst=R), tp,
                                         src=P, dst=R)
            opt.step()
            opt.zero_grad()
    return seen


def test_opaque_kernel_trains(mesh, dp, tp):
    assert _train(mesh, dp, tp, Square) == [{"mesh_dp": "P", "mesh_tp": "P"}] * 2


def test_without_a_hook_the_opaque_backward_is_rejected(mesh, dp, tp):
    # Why the hook's declaration covers the backward too.
    with pytest.raises(spmd.SpmdTypeError, match="cannot propagate through non-linear ops"):
        _train(mesh, dp, tp, _Square, steps=1)


def test_row_parallel_with_raw_collective_trains(mesh, dp, tp):
    class Row(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w):
            ctx.save_for_backward(x, w)
            y = x @ w.t()
            dist.all_reduce(y, group=tp)  # V into a raw all_reduce: rejected op by op
            return y

        @staticmethod
        def backward(ctx, g):
            x, w = ctx.saved_tensors
            return g @ w, g.t() @ x

        @staticmethod
        def spmd_typecheck(*, x, w):
            return rules.all_reduce(rules.einsum("mk,nk->mn", x, w), tp, src=V, dst=I)

    w = spmd.assert_type(torch.randn(3, 8, requires_grad=True), {dp: R, tp: V})
    opt = torch.optim.SGD([w], lr=0.1)
    for _ in range(2):
        x = spmd.assert_type(torch.randn(4, 8, requires_grad=True), {dp: V, tp: V})
        with spmd.set_current_mesh(mesh), typecheck():
            y = Row.apply(x, w)
            assert ltype(y) == {"mesh_dp": "V", "mesh_tp": "I"}
            spmd.reinterpret(y.pow(2).sum(), dp, src=V, dst=P).backward()
            assert ltype(w.grad) == {"mesh_dp": "P", "mesh_tp": "V"}
            assert ltype(x.grad) == {"mesh_dp": "V", "mesh_tp": "V"}
            with torch.no_grad():
                w.grad = spmd.all_reduce(w.grad, dp, src=P, dst=R)
            opt.step()
            opt.zero_grad()


def test_incoming_gradient_passed_through_is_typed_on_an_alias(mesh, dp, tp):
    class Relabel(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            return g  # the V gradient, due as P for the R input

        @staticmethod
        def spmd_typecheck(*, x):
            return rules.reinterpret(x, tp, src=R, dst=V)

    w = spmd.assert_type(torch.randn(4, requires_grad=True), {dp: R, tp: R})
    grads = []
    with spmd.set_current_mesh(mesh), typecheck():
        y = Relabel.apply(w)
        assert ltype(y) == {"mesh_dp": "R", "mesh_tp": "V"}
        y.register_hook(lambda g: grads.append(g))
        loss = spmd.reinterpret(spmd.convert(y.sum(), dp, src=R, dst=P), tp, src=V, dst=P)
        loss.backward()
    assert ltype(w.grad) == {"mesh_dp": "P", "mesh_tp": "P"}
    assert ltype(grads[0]) == {"mesh_dp": "P", "mesh_tp": "V"}  # the incoming one kept its type


def test_backward_outside_checking_runs_plainly(mesh, dp, tp):
    w = spmd.assert_type(torch.randn(8, requires_grad=True), {dp: R, tp: R})
    with spmd.set_current_mesh(mesh), typecheck():
        y = Square.apply(w)
    y.sum().backward()  # unchecked: the same backward, no error
    assert torch.allclose(w.grad, 2 * w.detach())
    z = Square.apply(w)  # not checked at all: no hook runs
    z.sum().backward()


def test_gradient_arriving_at_a_declared_output_is_checked(mesh, dp, tp):
    def wrong(g):
        with spmd.no_typecheck():
            bad = torch.ones_like(g)
        return spmd.assert_type(bad, {dp: P, tp: R})  # the output is R on tp: P is due

    w = spmd.assert_type(torch.randn(8, requires_grad=True), {dp: R, tp: R})
    with spmd.set_current_mesh(mesh), typecheck():
        y = Square.apply(w)
        y.register_hook(wrong)
        loss = spmd.convert(spmd.convert(y.sum(), dp, src=R, dst=P), tp, src=R, dst=P)
        with pytest.raises(spmd.SpmdTypeError, match="mesh_tp"):
            loss.backward()
