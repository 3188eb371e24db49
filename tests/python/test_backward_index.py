"""Gradients scattered into fresh zero buffers (the backward of indexing,
index_select and gather builds them with zeros + index_add_/scatter_add_/
index_put_) take the gradient's type: zeros are every type at once.  A
buffer that is not all zeros is not exempt."""

import pytest
import torch

import cspmd as spmd
import cspmd.checker
from cspmd import P, R, S, V


@pytest.fixture
def pg(mesh, tp):
    return tp


def _loss_through_tp(y, pg):
    # convert R -> S(0) has backward convert(S(0) -> P): y's gradient is P.
    z = spmd.convert(y, pg, src=R, dst=S(0))
    return spmd.reinterpret(z.sum(), pg, src=V, dst=P)


@pytest.mark.parametrize("index", ["index_select", "getitem", "gather"])
def test_partial_gradient_through_indexing(pg, index):
    x = spmd.assert_type(torch.randn(8, 4, requires_grad=True), {pg: R})
    idx = spmd.assert_type(torch.tensor([0, 2, 4, 6]), {pg: R})
    with spmd.checker.typecheck():
        if index == "index_select":
            y = x.index_select(0, idx)
        elif index == "getitem":
            y = x[idx]
        else:
            y = torch.gather(x, 0, idx.view(4, 1).expand(4, 4))
        _loss_through_tp(y, pg).backward()
    assert spmd.get_local_type(x.grad) == {spmd.MeshAxis.of(pg): P}
    assert x.grad.abs().sum() > 0


def test_nonzero_buffer_is_not_exempt(pg):
    idx = spmd.assert_type(torch.tensor([0, 1, 2, 3]), {pg: R})

    class ScatterIntoOnes(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x[:4].clone()

        @staticmethod
        def backward(ctx, g):  # a bug: accumulates into ones, not zeros
            buf = spmd.assert_type(torch.ones(8, 4), {pg: R})
            return buf.index_add_(0, idx, g)

    x = spmd.assert_type(torch.randn(8, 4, requires_grad=True), {pg: R})
    with spmd.checker.typecheck():
        y = ScatterIntoOnes.apply(x)
        loss = _loss_through_tp(y, pg)
        with pytest.raises(spmd.SpmdTypeError, match="during backward, in ScatterIntoOnesBackward"):
            loss.backward()


@pytest.mark.parametrize("fn", ["rfft", "rfft2", "rfftn"])
def test_rfft_backward_copies_into_a_zero_buffer(mesh, dp, tp, fn):
    # rfft's backward makes zeros of the full size and copy_s the gradient
    # into a slice of it: the buffer takes the gradient's type.
    w = spmd.assert_type(torch.randn(4, 8, requires_grad=True), {dp: spmd.I, tp: spmd.I})
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck():
        getattr(torch.fft, fn)(w).abs().sum().backward()
    assert spmd.get_local_type(w.grad) == {spmd.MeshAxis.of(dp): spmd.I,
                                           spmd.MeshAxis.of(tp): spmd.I}
    assert w.grad.abs().sum() > 0


def test_copy_into_a_nonzero_buffer_in_backward_is_not_exempt(pg):
    class CopyIntoOnes(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x[:4].clone()

        @staticmethod
        def backward(ctx, g):  # a bug: the rest of the gradient is ones, not zeros
            buf = spmd.assert_type(torch.ones(8, 4), {pg: R})
            buf[:4].copy_(g)
            return buf

    x = spmd.assert_type(torch.randn(8, 4, requires_grad=True), {pg: R})
    with spmd.checker.typecheck():
        loss = _loss_through_tp(CopyIntoOnes.apply(x), pg)
        with pytest.raises(spmd.SpmdTypeError, match="during backward, in CopyIntoOnesBackward"):
            loss.backward()
