"""torch.func.vmap under checking: the batch dim is orthogonal to
the mesh axes, so types pass through the mapped function unchanged.  cspmd
needs no vmap patch: the ops vmap runs on the unbatched tensors reach the
kernel like any other, and the queries and assert_type inside the mapped
function read and write the type of the tensor each BatchedTensor wraps."""

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


def test_get_local_type_inside_vmap(ax):
    """Inside vmap the function holds BatchedTensors; the queries read the
    type of the tensor they wrap (one wrapper per level when nested)."""
    x = spmd.assert_type(torch.randn(2, 3, 4), {ax: V})
    seen = []

    def f(r):
        seen.append((spmd.get_local_type(r), spmd.get_axis_local_type(r, ax),
                     spmd.has_local_type(r)))
        return r.sin()

    with spmd.set_current_mesh({"tp": ax}), spmd.checker.typecheck():
        torch.func.vmap(f)(x)
        torch.func.vmap(torch.func.vmap(f))(x)
    assert seen == [({ax: V}, V, True)] * 2


def test_assert_type_inside_vmap(ax):
    x = spmd.assert_type(torch.randn(3, 4), {ax: R})
    with spmd.set_current_mesh({"tp": ax}), spmd.checker.typecheck():
        # a check that holds passes and returns the tensor it was given
        y = torch.func.vmap(lambda r: spmd.assert_type(r, {ax: R}) * 2)(x)
        assert lt(y, ax) is R
        with pytest.raises(spmd.SpmdTypeError, match="tensor has R, expected V"):
            torch.func.vmap(lambda r: spmd.assert_type(r * 1, {ax: V}))(x)
        # an untyped input annotated inside: the ops after it are typed
        u = torch.randn(3, 4)

        def annotate_then_use(r):
            spmd.assert_type(r, {ax: P})
            return r * 3

        out = torch.func.vmap(annotate_then_use)(u)
        assert lt(out, ax) is P
        with pytest.raises(spmd.SpmdTypeError, match="non-linear"):
            torch.func.vmap(lambda r: torch.relu(spmd.assert_type(r, {ax: P})))(
                torch.randn(3, 4))


def test_func_grad_checks_ops_but_refuses_the_loss(ax):
    """A documented limit (docs/limits.md): inside torch.func.grad/vjp the ops
    are checked, but the wrapped tensors read as untyped, so a valid program's
    loss is refused -- an error, never a silent pass."""
    p = spmd.assert_type(torch.randn(3), {ax: P})
    r = spmd.assert_type(torch.randn(3), {ax: R})
    seen = []

    def loss(w):
        seen.append(spmd.get_local_type(w))
        return (w * 2).sum()

    with spmd.set_current_mesh({"tp": ax}), spmd.checker.typecheck():
        with pytest.raises(spmd.SpmdTypeError, match="cannot propagate through non-linear"):
            torch.func.grad(lambda w: torch.relu(w).sum())(p)
        with pytest.raises(spmd.SpmdTypeError, match="cannot propagate through non-linear"):
            torch.func.vjp(torch.relu, p)
        with pytest.raises(spmd.SpmdTypeError, match="no SPMD type annotation"):
            torch.func.grad(loss)(r)
    assert seen == [{}]
