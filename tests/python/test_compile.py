"""torch.compile with cspmd.

Checking off: a function that calls cspmd's annotations and collectives
compiles with fullgraph=True on every backend and computes what it computes
uncompiled (a model annotated for checking is compiled for production).
Checking on: the graph Dynamo captures is checked by the C kernel on meta
copies of the inputs (once per tuple of input types), errors name the
user's line, the code then runs compiled and its outputs carry their types.
"""

import inspect

import pytest
import torch
import torch._dynamo
import torch.nn.functional as F

import cspmd as spmd
import cspmd.compiled
from conftest import CopyToTP, CopyToTPNoReduce, ltype

R, I, V, P = spmd.R, spmd.I, spmd.V, spmd.P

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


def _line_of(fn, text):
    """The file line of the first source line of fn containing text."""
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


class CountingBackend:
    """A backend that runs the compiled graph and counts compiles and runs:
    proof that the compiled code ran, not an eager fallback."""

    def __init__(self, inner="aot_eager"):
        self.inner = torch._dynamo.lookup_backend(inner)
        self.compiles = 0
        self.runs = 0

    def __call__(self, gm, example_inputs):
        self.compiles += 1
        compiled = self.inner(gm, example_inputs)

        def run(*args):
            self.runs += 1
            return compiled(*args)

        return run


def _partial_through_relu(a):
    b = a * 2
    return torch.relu(b) + 1  # the bug when a is P: a partial sum through a non-linear op


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_bug_is_caught_in_the_graph_at_the_users_line(mesh, backend):
    compiled = torch.compile(_partial_through_relu, backend=backend, fullgraph=True)
    x = spmd.assert_type(torch.randn(4, 4), {"dp": R, "tp": P})
    with spmd.checker.typecheck():
        with pytest.raises(spmd.SpmdTypeError) as e:
            compiled(x)
    line = _line_of(_partial_through_relu, "torch.relu")
    assert "aten::relu" in str(e.value)
    assert f"test_compile.py:{line}" in str(e.value)
    assert "torch.compile'd function" in str(e.value)


def test_the_graph_is_checked_before_the_compiled_code_runs(mesh):
    backend = CountingBackend()
    compiled = torch.compile(_partial_through_relu, backend=backend, fullgraph=True)
    with spmd.checker.typecheck():
        with pytest.raises(spmd.SpmdTypeError):
            compiled(spmd.assert_type(torch.randn(4, 4), {"dp": R, "tp": P}))
        assert (backend.compiles, backend.runs) == (1, 0)


def _row_parallel(x, w):
    y = spmd.reinterpret(x @ w, "tp", src=V, dst=P)
    return torch.relu(spmd.all_reduce(y, "tp", src=P, dst=R))


def test_a_correct_program_runs_compiled_with_typed_outputs(mesh):
    backend = CountingBackend()
    compiled = torch.compile(_row_parallel, backend=backend, fullgraph=True)
    x = spmd.assert_type(torch.randn(8, 6), {"dp": V, "tp": V})
    w = spmd.assert_type(torch.randn(6, 5), {"dp": R, "tp": V})
    want = _row_parallel(x, w)
    with spmd.checker.typecheck():
        got = compiled(x, w)
        assert ltype(got) == {"mesh_dp": "V", "mesh_tp": "R"}
        torch.relu(got)  # typed: the next checked op accepts it
        again = compiled(x, w)
    assert (backend.compiles, backend.runs) == (1, 2)
    torch.testing.assert_close(got, want)
    assert ltype(again) == {"mesh_dp": "V", "mesh_tp": "R"}


def test_the_check_is_cached_by_input_types(mesh, monkeypatch):
    checks = []
    original = spmd.compiled.CheckedGraph._check

    def counting(self, args, *rest):
        checks.append(ltype(args[0])["mesh_tp"])
        return original(self, args, *rest)

    monkeypatch.setattr(spmd.compiled.CheckedGraph, "_check", counting)
    compiled = torch.compile(_partial_through_relu, backend="eager", fullgraph=True)
    with spmd.checker.typecheck():
        for _ in range(3):
            y = compiled(spmd.assert_type(torch.randn(4, 4), {"dp": R, "tp": V}))
            assert ltype(y) == {"mesh_dp": "R", "mesh_tp": "V"}
        assert checks == ["V"]
        with pytest.raises(spmd.SpmdTypeError):  # new types: checked again
            compiled(spmd.assert_type(torch.randn(4, 4), {"dp": R, "tp": P}))
        assert checks == ["V", "P"]


def _annotating(x, w):
    spmd.assert_type(w, {"dp": R, "tp": V})  # types w, an untyped input
    return x @ w


def test_annotations_in_a_fullgraph_region_are_part_of_the_check(mesh):
    compiled = torch.compile(_annotating, backend="aot_eager", fullgraph=True)
    with spmd.checker.typecheck():
        x = spmd.assert_type(torch.randn(8, 6), {"dp": R, "tp": V})
        w = torch.randn(6, 5)
        y = compiled(x, w)
        assert ltype(y) == {"mesh_dp": "R", "mesh_tp": "V"}
        assert ltype(w) == {"mesh_dp": "R", "mesh_tp": "V"}  # the annotation reached w
        with pytest.raises(spmd.SpmdTypeError) as e:  # an annotation that contradicts
            compiled(x, spmd.assert_type(torch.randn(6, 5), {"dp": R, "tp": R}))
    assert f"test_compile.py:{_line_of(_annotating, 'assert_type')}" in str(e.value)


def _two_graphs(a, b):
    c = a + b
    torch._dynamo.graph_break()
    return torch.tanh(c)  # the bug when c is P


def test_each_graph_of_a_graph_break_is_checked(mesh):
    compiled = torch.compile(_two_graphs, backend="aot_eager")
    with spmd.checker.typecheck():
        y = compiled(spmd.assert_type(torch.randn(4), {"dp": R, "tp": V}),
                     spmd.assert_type(torch.randn(4), {"dp": R, "tp": R}))
        assert ltype(y) == {"mesh_dp": "R", "mesh_tp": "V"}
        p = spmd.assert_type(torch.randn(4), {"dp": R, "tp": P})
        with pytest.raises(spmd.SpmdTypeError) as e:
            compiled(p, p)
    assert f"test_compile.py:{_line_of(_two_graphs, 'torch.tanh')}" in str(e.value)


def test_code_compiled_unchecked_is_recompiled_for_checked_calls(mesh):
    backend = CountingBackend()
    compiled = torch.compile(_partial_through_relu, backend=backend)
    p = spmd.assert_type(torch.randn(4, 4), {"dp": R, "tp": P})
    compiled(p)  # checking off: no check
    with spmd.checker.typecheck():
        with pytest.raises(spmd.SpmdTypeError):
            compiled(p)
        with spmd.checker.no_typecheck():
            compiled(p)  # paused: the unchecked code again
    compiled(p)
    assert backend.compiles == 2


def test_dynamic_shapes_are_checked_per_shape(mesh):
    compiled = torch.compile(_partial_through_relu, backend="aot_eager", dynamic=True)
    with spmd.checker.typecheck():
        for n in (3, 5):
            y = compiled(spmd.assert_type(torch.randn(n, 2), {"dp": V, "tp": R}))
            assert y.shape == (n, 2) and ltype(y) == {"mesh_dp": "V", "mesh_tp": "R"}
        with pytest.raises(spmd.SpmdTypeError):
            compiled(spmd.assert_type(torch.randn(7, 2), {"dp": V, "tp": P}))


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


def _aot_counting_backward():
    """aot_eager whose compiled backward counts its runs."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    runs = []

    def forward(gm, example_inputs):
        return make_boxed_func(gm.forward)

    def backward(gm, example_inputs):
        def run(*args):
            runs.append(1)
            return gm(*args)

        return make_boxed_func(run)

    return aot_autograd(fw_compiler=forward, bw_compiler=backward), runs


def _norm(x, w):
    return F.layer_norm(x, (x.shape[-1],), weight=w)  # I on tp: its backward needs an I gradient


def _tp_block(norm, f, tp):
    """A norm (compiled or not) on I data, f, a column-parallel matmul; the
    output's gradient, typed."""
    x = spmd.assert_type(torch.randn(4, 8, requires_grad=True), {"dp": V, "tp": I})
    w = spmd.assert_type(torch.randn(8, requires_grad=True), {"dp": R, "tp": I})
    h = norm(x, w)
    y = f.apply(h, tp) @ spmd.assert_type(torch.randn(8, 3), {"dp": R, "tp": V})
    return x, w, h, y, spmd.assert_type(torch.ones_like(y), {"dp": V, "tp": V})


def test_the_backward_is_checked_and_runs_compiled(mesh, tp):
    backend, backward_runs = _aot_counting_backward()
    compiled = torch.compile(_norm, backend=backend)
    with spmd.checker.typecheck():
        x, w, h, y, g = _tp_block(compiled, CopyToTP, tp)
        assert ltype(h) == {"mesh_dp": "V", "mesh_tp": "I"}
        y.backward(g)
        x2, w2, _, y2, g2 = _tp_block(_norm, CopyToTP, tp)  # the same, uncompiled
        y2.backward(g2)
    assert backward_runs == [1]
    assert ltype(w.grad) == ltype(w2.grad) == {"mesh_dp": "P", "mesh_tp": "I"}
    assert ltype(x.grad) == ltype(x2.grad)


def test_a_backward_bug_names_the_forward_line(mesh, tp):
    backend, backward_runs = _aot_counting_backward()
    compiled = torch.compile(_norm, backend=backend)
    with spmd.checker.typecheck():
        *_, y, g = _tp_block(compiled, CopyToTPNoReduce, tp)
        with pytest.raises(spmd.SpmdTypeError) as e:
            y.backward(g)
    msg = str(e.value)
    assert "Invariant type on axis mesh_tp cannot mix" in msg
    assert "aten::native_layer_norm_backward(" in msg
    assert f"forward op at {__file__}:{_line_of(_norm, 'layer_norm')}" in msg
    assert "backward of a torch.compile'd function" in msg
    assert backward_runs == []  # found before the compiled backward ran


def _scale_in_place(a):
    a.mul_(2)
    return a + 1


def test_in_place_writes_to_an_input_with_gradients_run_eagerly(mesh):
    compiled = torch.compile(_scale_in_place, backend="aot_eager")
    w = spmd.assert_type(torch.randn(4, requires_grad=True), {"dp": R, "tp": V})
    g = spmd.assert_type(torch.ones(4), {"dp": P, "tp": V})
    with spmd.checker.typecheck():
        a = w * 1
        y = compiled(a)
        assert ltype(y) == {"mesh_dp": "R", "mesh_tp": "V"}
        y.backward(g)
    assert ltype(w.grad) == {"mesh_dp": "P", "mesh_tp": "V"}
    torch.testing.assert_close(w.grad, torch.full((4,), 2.0))


def _tanh3(a):
    return torch.tanh(a) * 3


def test_double_backward_through_a_checked_region_says_what_to_do(mesh):
    compiled = torch.compile(_tanh3, backend="aot_eager")
    w = spmd.assert_type(torch.randn(4, requires_grad=True), {"dp": R, "tp": R})
    g = spmd.assert_type(torch.ones(4), {"dp": P, "tp": P})
    with spmd.checker.typecheck():
        y = compiled(w)
        with pytest.raises(RuntimeError, match="create_graph=True.*force_eager"):
            torch.autograd.grad(y, w, g, create_graph=True)
        (gw,) = torch.autograd.grad(compiled(w), w, g)  # a plain backward is checked
    assert ltype(gw) == {"mesh_dp": "P", "mesh_tp": "P"}


def test_the_hooks_are_installed_only_inside_a_region(mesh):
    from torch._dynamo import convert_frame, eval_frame, output_graph

    compile_frame = convert_frame._compile
    call_user_compiler = output_graph.OutputGraph.call_user_compiler
    with spmd.checker.typecheck():
        assert convert_frame._compile is not compile_frame
        with spmd.checker.typecheck():  # nested: installed once
            pass
        assert convert_frame._compile._cspmd_original is compile_frame
        assert eval_frame._stance.stance == "default"  # compiled code runs compiled
    assert convert_frame._compile is compile_frame
    assert output_graph.OutputGraph.call_user_compiler is call_user_compiler
