"""torch.func.vmap under checking: the batch dim is orthogonal to
the mesh axes, so types pass through the mapped function unchanged.  cspmd
needs no vmap patch: the ops vmap runs on the unbatched tensors reach the
kernel like any other."""

import pytest
import torch

import cspmd as spmd
import cspmd.checker
from cspmd import P, R, V


@pytest.fixture
def ax():
    return spmd.MeshAxis.of(4, 1)


def lt(t, ax):
    return spmd.get_local_type(t).get(ax)


def test_mapped_types_pass_through(ax):
    x = spmd.assert_type(torch.randn(3, 4), {ax: R})
    bias = spmd.assert_type(torch.randn(4), {ax: V})
    with spmd.set_current_mesh({"tp": ax}), spmd.checker.typecheck():
        assert lt(torch.func.vmap(lambda r: r * 2)(x), ax) is R
        assert lt(torch.func.vmap(lambda r: r + bias)(x), ax) is V  # captured V
        both = torch.func.vmap(lambda a, b: a * b)(x, x)
        assert lt(both, ax) is R
        d = torch.func.vmap(lambda inp: inp["a"] + inp["b"])({"a": x, "b": x})
        assert lt(d, ax) is R


def test_errors_inside_vmap(ax):
    p = spmd.assert_type(torch.randn(3, 4), {ax: P})
    with spmd.set_current_mesh({"tp": ax}), spmd.checker.typecheck():
        with pytest.raises(spmd.SpmdTypeError, match="cannot propagate through non-linear"):
            torch.func.vmap(torch.relu)(p)


def test_autograd_function_with_vmap_rule(ax):
    class Double(torch.autograd.Function):
        generate_vmap_rule = True

        @staticmethod
        def forward(x):
            return x * 2

        @staticmethod
        def setup_context(ctx, inputs, output):
            pass

        @staticmethod
        def backward(ctx, g):
            return g * 2

    x = spmd.assert_type(torch.randn(3, 4), {ax: V})
    with spmd.set_current_mesh({"tp": ax}), spmd.checker.typecheck():
        y = torch.func.vmap(Double.apply)(x)
    assert lt(y, ax) is V
    assert torch.equal(y, x * 2)
