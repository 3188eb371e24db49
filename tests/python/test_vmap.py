"""torch.func.vmap under checking: the batch dim is orthogonal to
the mesh axes, so types pass through the mapped function unchanged.  cspmd
needs no vmap patch: the ops vmap runs on the unbatched tensors reach the
kernel like any other, and the queries and assert_type inside the mapped
function read and write the type of the tensor each BatchedTensor wraps."""

import pytest
import torch

import cspmd as spmd
import cspmd.checker
from cspmd import I, P, R, V


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


def test_func_grad_types_and_values(ax):
    """torch.func.grad/vjp hold TensorWrappers; the queries read (and
    assert_type writes) the type of the tensor each wraps, so a valid loss
    passes the loss check, the gradient has the dual type and torch's value,
    and the ops inside are checked as everywhere."""
    p = spmd.assert_type(torch.randn(3), {ax: P})
    i = spmd.assert_type(torch.randn(3), {ax: I})
    r = spmd.assert_type(torch.randn(3), {ax: R})
    varying = spmd.assert_type(torch.ones(3), {ax: V})
    seen = []

    def loss(w):
        seen.append(spmd.get_local_type(w))
        return (w * 2).sum()

    with spmd.set_current_mesh({"tp": ax}), spmd.checker.typecheck():
        g = torch.func.grad(loss)(p)
        assert lt(g, ax) is R and torch.equal(g, torch.full((3,), 2.0))
        g, value = torch.func.grad_and_value(lambda w: (w * w).sum())(i)
        assert lt(g, ax) is I and lt(value, ax) is I
        assert torch.allclose(g, 2 * i)
        out, vjp_fn = torch.func.vjp(lambda w: w * 3, p)
        (gv,) = vjp_fn(torch.ones(3))  # an untyped cotangent takes the dual of P
        assert lt(out, ax) is P and lt(gv, ax) is R
        assert torch.equal(gv, torch.full((3,), 3.0))
        with pytest.raises(spmd.SpmdTypeError, match="must be R, but it is V"):
            vjp_fn(varying)
        # nested transforms: a second-order gradient, per-sample gradients
        gg = torch.func.grad(lambda x: torch.func.grad(lambda w: (w ** 3).sum())(x).sum())(i)
        assert lt(gg, ax) is I and torch.allclose(gg, 6 * i)
        batch = spmd.assert_type(torch.randn(5, 3), {ax: I})
        per_sample = torch.func.vmap(torch.func.grad(lambda w: (w * w).sum()))(batch)
        assert lt(per_sample, ax) is I and torch.allclose(per_sample, 2 * batch)
        # annotations inside the transform
        with pytest.raises(spmd.SpmdTypeError, match="tensor has I, expected V"):
            torch.func.grad(lambda w: (spmd.assert_type(w, {ax: V}) * 2).sum())(i)
        # what is wrong is still refused: P through relu, an R loss
        with pytest.raises(spmd.SpmdTypeError, match="cannot propagate through non-linear"):
            torch.func.grad(lambda w: torch.relu(w).sum())(p)
        with pytest.raises(spmd.SpmdTypeError, match="cannot propagate through non-linear"):
            torch.func.vjp(torch.relu, p)
        with pytest.raises(spmd.SpmdTypeError, match="backward\\(\\) on a Replicate loss"):
            torch.func.grad(loss)(r)
    assert seen == [{ax: P}, {ax: R}]


def test_func_grad_where_the_reference_refuses(ax):
    """Deliberate difference (docs/differences.md): the reference reads the
    transforms' wrapped tensors as untyped and refuses the program in strict
    mode; cspmd checks it and types the gradient."""
    import reference
    ref = reference.load()
    reference.load("spmd_types.checker")
    ref_ax = ref.MeshAxis.of(4, 1)
    p = ref.assert_type(torch.randn(3), {ref_ax: ref.P})
    with ref.set_current_mesh({"tp": ref_ax}), ref.checker.typecheck():
        with pytest.raises(ref.SpmdTypeError, match="missing axis"):
            torch.func.grad(lambda w: (w * 2).sum())(p)
    p = spmd.assert_type(torch.randn(3), {ax: P})
    with spmd.set_current_mesh({"tp": ax}), spmd.checker.typecheck():
        assert lt(torch.func.grad(lambda w: (w * 2).sum())(p), ax) is R


def test_jacrev_of_any_output_seeds_its_basis_as_untyped(ax):
    """jacrev makes its basis cotangents with factories inside the region:
    the user's data, not computed values, so they seed as untyped gradients
    do (the dual of each output's type) and the Jacobian has the gradient's
    type."""
    for ty, grad in ((P, R), (I, I), (V, V)):
        x = spmd.assert_type(torch.randn(3), {ax: ty})
        with spmd.set_current_mesh({"tp": ax}), spmd.checker.typecheck():
            j = torch.func.jacrev(lambda w: w * 2)(x)
        assert lt(j, ax) is grad and torch.equal(j, 2 * torch.eye(3))


def test_hessian_of_an_invariant_output_is_typed_r(ax):
    """A documented limit (docs/limits.md): R where I would be exact."""
    x = spmd.assert_type(torch.randn(3), {ax: I})
    with spmd.set_current_mesh({"tp": ax}), spmd.checker.typecheck():
        h = torch.func.hessian(lambda w: (w ** 3).sum())(x)
    assert lt(h, ax) is R
    torch.testing.assert_close(h, torch.diag(6 * x.detach()))
