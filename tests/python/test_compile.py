"""torch.compile with cspmd.

Checking off: a function that calls cspmd's annotations and collectives
compiles with fullgraph=True on every backend and computes what it computes
uncompiled (a model annotated for checking is compiled for production).
Checking on: compiled functions run eagerly, so every op is checked, errors
name the user's line and outputs carry their types; the stance the user had
is back when the region ends.
"""

import pytest
import torch
import torch._dynamo

import cspmd as spmd
from conftest import ltype

R, V, P = spmd.R, spmd.V, spmd.P

BACKENDS = ["eager", "aot_eager", "inductor"]


@pytest.fixture(autouse=True)
def on_mesh(mesh):
    """Axis names resolve in the 2x4 mesh; compiled code is forgotten after."""
    with spmd.set_current_mesh(mesh):
        yield
    torch._dynamo.reset()


def _annotated_step(x, w):
    """What an annotated tensor-parallel layer does: annotate, compute a
    partial product, all-reduce it, shard the result."""
    spmd.assert_type(w, {"dp": R, "tp": V})
    y = spmd.reinterpret(x @ w, "tp", src=V, dst=P)
    y = spmd.all_reduce(y, "tp", src=P, dst=R)
    return spmd.convert(torch.relu(y), "tp", src=R, dst=spmd.S(0)) * 2


def _inputs():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(8, 6, generator=gen)
    w = torch.randn(6, 5, generator=gen)
    spmd.assert_type(x, {"dp": R, "tp": V})
    return x, w


@pytest.mark.parametrize("backend", BACKENDS)
def test_annotated_code_compiles_fullgraph_with_checking_off(mesh, backend):
    x, w = _inputs()
    want = _annotated_step(x, w.clone())
    got = torch.compile(_annotated_step, backend=backend, fullgraph=True)(x, w.clone())
    assert got.shape == (2, 5)
    torch.testing.assert_close(got, want)


def test_compiled_function_is_checked_under_typecheck(mesh):

    def partial_through_relu(a):
        return torch.relu(a) + 1  # the bug: a partial sum through a non-linear op

    compiled = torch.compile(partial_through_relu, backend="inductor", fullgraph=True)
    x = spmd.assert_type(torch.randn(4, 4), {"dp": R, "tp": P})
    with spmd.checker.typecheck():
        with pytest.raises(spmd.SpmdTypeError) as e:
            compiled(x)
    assert "relu" in str(e.value) and "test_compile.py" in str(e.value)


def test_compiled_outputs_are_typed_and_backward_checked(mesh):

    def layer(a, w):
        return torch.tanh(a @ w)

    compiled = torch.compile(layer, backend="inductor")
    x = spmd.assert_type(torch.randn(4, 6), {"dp": V, "tp": R})
    w = spmd.assert_type(torch.randn(6, 3, requires_grad=True), {"dp": R, "tp": R})
    with spmd.checker.typecheck():
        y = compiled(x, w)
        assert ltype(y) == {"mesh_dp": "V", "mesh_tp": "R"}
        with pytest.raises(spmd.SpmdTypeError):
            # w is R on dp but its gradient would be V: a missing all-reduce
            y.sum().backward()


def test_stance_is_restored_after_the_region(mesh):
    from torch._dynamo import eval_frame

    assert eval_frame._stance.stance == "default"
    with spmd.checker.typecheck():
        assert eval_frame._stance.stance == "force_eager"
        with spmd.checker.typecheck():  # nested: still eager, still restored once
            pass
        assert eval_frame._stance.stance == "force_eager"
    assert eval_frame._stance.stance == "default"
    with torch.compiler.set_stance("eager_on_recompile"):
        with spmd.checker.typecheck():
            assert eval_frame._stance.stance == "force_eager"
        assert eval_frame._stance.stance == "eager_on_recompile"
    assert eval_frame._stance.stance == "default"
