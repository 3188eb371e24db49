"""register_no_typecheck(fn): every op run while fn's code is on the
thread's Python stack is unchecked, however fn is reached.  Each program
runs under cspmd and under the installed spmd_types 0.3.1 and must agree
on error or not and on the results' types (the reference leaves gradients
untyped; cspmd types them, checked separately)."""

import functools
import threading

import pytest
import torch

import cspmd as spmd
import reference
from cspmd._lib import ops


def _ref():
    ref = reference.load()
    reference.load("spmd_types.checker")
    return ref


@pytest.fixture
def libs():
    """cspmd and the reference; afterwards both forget what the test
    registered, so the rest of the session runs with nothing registered
    (the reference's set compares code objects by value, so a registered
    function could match another test's code)."""
    ref = _ref()
    yield (spmd, ref)
    ops.unchecked_code_clear()
    spmd.checker._registered_codes.clear()
    reference.load("spmd_types._state")._NO_TYPECHECK_CODES.clear()


def _letters(lib, x):
    return {str(a): repr(t).split(".")[-1] for a, t in lib.get_local_type(x).items()}


def _outcome(fn):
    """("ok", result) or the error's class name."""
    try:
        return "ok", fn()
    except (RuntimeError, ValueError, TypeError) as e:
        return type(e).__name__, None


def _typed(lib, letters, requires_grad=False):
    x = torch.randn(4, 4, requires_grad=requires_grad)
    return lib.assert_type(x, {"dp": getattr(lib, letters[0]), "tp": getattr(lib, letters[1])})


def _run(mesh, libs, program):
    """program(lib) under typecheck() in each library; returns the two results."""
    out = []
    for lib in libs:
        with lib.set_current_mesh(mesh), lib.checker.typecheck():
            out.append(program(lib))
    assert out[0] == out[1], f"cspmd {out[0]} != reference {out[1]}"
    return out[0]


def test_ops_inside_are_unchecked_and_untyped(mesh, libs):
    def program(lib):
        seen = []

        def helper(x, w):
            seen.append(lib.is_type_checking())
            return x * w  # V * P: rejected when checked

        assert lib.register_no_typecheck(helper) is helper
        x, w = _typed(lib, "IV"), _typed(lib, "IP")
        status, y = _outcome(lambda: helper(x, w))
        after = lib.is_type_checking()
        outside, _ = _outcome(lambda: x * w)
        return status, _letters(lib, y), seen, after, outside

    assert _run(mesh, libs, program) == ("ok", {}, [False], True, "SpmdTypeError")


def test_nested_calls(mesh, libs):
    """A function a registered one calls runs unchecked (the registered
    frame is below it); a registered callee leaves its caller checked."""
    def program(lib):
        def inner(x, w):
            return x * w

        def outer(x, w):
            return inner(x, w)

        def caller(x, w):
            y = registered_inner(x, w)
            return x * w + y  # back in checked code

        def registered_inner(x, w):
            return x * w

        lib.register_no_typecheck(outer)
        lib.register_no_typecheck(registered_inner)
        x, w = _typed(lib, "IV"), _typed(lib, "IP")
        return _outcome(lambda: outer(x, w))[0], _outcome(lambda: caller(x, w))[0]

    assert _run(mesh, libs, program) == ("ok", "SpmdTypeError")


def test_typecheck_inside_does_not_check_again(mesh, libs):
    def program(lib):
        def helper(x, w):
            with lib.checker.typecheck():
                return lib.is_type_checking(), _outcome(lambda: x * w)[0]

        lib.register_no_typecheck(helper)
        return helper(_typed(lib, "IV"), _typed(lib, "IP"))

    assert _run(mesh, libs, program) == (False, "ok")


def test_a_decorated_function_is_followed_to_its_innermost_code(mesh, libs):
    def program(lib):
        def logged(fn):
            @functools.wraps(fn)
            def wrapper(*args):
                return fn(*args)
            return wrapper

        def plain(fn):
            def wrapper(*args):  # no __wrapped__: the wrapper's own code is registered
                return fn(*args)
            return wrapper

        @logged
        def wrapped(x, w):
            return x * w

        @plain
        def unwrapped(x, w):
            return x * w

        lib.register_no_typecheck(wrapped)  # registers the inner function
        lib.register_no_typecheck(unwrapped)  # registers plain's wrapper code
        x, w = _typed(lib, "IV"), _typed(lib, "IP")
        other = plain(lambda a, b: a * b)  # another function behind the same wrapper code
        return (_outcome(lambda: wrapped(x, w))[0],
                _outcome(lambda: wrapped.__wrapped__(x, w))[0],
                _outcome(lambda: unwrapped(x, w))[0],
                _outcome(lambda: other(x, w))[0])

    assert _run(mesh, libs, program) == ("ok", "ok", "ok", "ok")


def test_methods(mesh, libs):
    """A bound method registers its function: every instance's calls, and
    calls through the class, are unchecked."""
    def program(lib):
        class Layer:
            def forward(self, x, w):
                return x * w

            def other(self, x, w):
                return x * w

        a, b = Layer(), Layer()
        lib.register_no_typecheck(a.forward)
        x, w = _typed(lib, "IV"), _typed(lib, "IP")
        return (_outcome(lambda: a.forward(x, w))[0], _outcome(lambda: b.forward(x, w))[0],
                _outcome(lambda: Layer.forward(b, x, w))[0], _outcome(lambda: a.other(x, w))[0])

    assert _run(mesh, libs, program) == ("ok", "ok", "ok", "SpmdTypeError")


def test_a_generator_is_unchecked_only_while_it_runs(mesh, libs):
    def program(lib):
        def pairs(x, w):
            yield x * w  # unchecked: the generator's frame is running
            yield x * w

        lib.register_no_typecheck(pairs)
        x, w = _typed(lib, "IV"), _typed(lib, "IP")
        got = []
        for y in pairs(x, w):
            got.append(_letters(lib, y))
            got.append(_outcome(lambda: x * w)[0])  # the consumer is checked
        return got

    assert _run(mesh, libs, program) == [{}, "SpmdTypeError", {}, "SpmdTypeError"]


def test_a_thread_checks_on_its_own_stack(mesh, libs):
    """The registered function running on a worker thread is unchecked
    there; a thread it starts runs checked (its stack does not hold it)."""
    def program(lib):
        results = {}

        def checked_thread(key, fn):
            with lib.set_current_mesh(mesh), lib.checker.typecheck():
                results[key] = _outcome(fn)[0]

        def helper(x, w):
            t = threading.Thread(target=checked_thread, args=("child", lambda: x * w))
            t.start()
            t.join()
            return x * w

        lib.register_no_typecheck(helper)
        x, w = _typed(lib, "IV"), _typed(lib, "IP")
        t = threading.Thread(target=checked_thread, args=("worker", lambda: helper(x, w)))
        t.start()
        t.join()
        results["main"] = _outcome(lambda: x * w)[0]
        return results

    # cspmd only: the reference's typecheck() entered on a worker thread
    # leaves its process-wide patches in a state that changes later tests'
    # outcomes (seen with test_rules.py after it).
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck():
        got = program(spmd)
    assert got == {"child": "SpmdTypeError", "worker": "ok", "main": "SpmdTypeError"}


def test_backward_through_ops_made_inside(mesh, libs):
    """The backward of the unchecked ops is unchecked too (the reference
    checks no backward); cspmd types the gradients leaving them as the duals
    of their inputs' types, so the checked graph around them goes on."""
    grads = {}

    def program(lib):
        def helper(x, w):
            return (x * w).relu()

        lib.register_no_typecheck(helper)
        x, w = _typed(lib, "IV", True), _typed(lib, "IP", True)
        h = x.exp()  # checked, before
        y = lib.assert_type(helper(h, w), {"dp": lib.I, "tp": lib.V})
        loss = lib.all_reduce(y.sum(), "tp", src=lib.V, dst=lib.I)
        status, _ = _outcome(loss.backward)
        grads[lib] = (_letters(lib, x.grad), _letters(lib, w.grad))
        return status, _letters(lib, loss)

    assert _run(mesh, libs, program) == ("ok", {"mesh_dp": "I", "mesh_tp": "I"})
    assert grads[spmd] == ({"mesh_dp": "I", "mesh_tp": "V"}, {"mesh_dp": "I", "mesh_tp": "R"})


def test_backward_called_inside_is_unchecked(mesh, libs):
    def program(lib):
        def train_step(x, w):
            loss = (x * w).sum()  # untyped, and V * P
            loss.backward()
            return x.grad is not None

        lib.register_no_typecheck(train_step)
        return _outcome(lambda: train_step(_typed(lib, "IV", True), _typed(lib, "IP", True)))

    assert _run(mesh, libs, program) == ("ok", True)


def test_collectives_inside(mesh, libs):
    """A collective run inside takes any input and gives an untyped result;
    its backward is unchecked too."""
    def program(lib):
        def reduce(x):
            return lib.all_reduce(x, "tp", src=lib.P, dst=lib.R)  # x is R: rejected when checked

        lib.register_no_typecheck(reduce)
        x = _typed(lib, "IR", True)
        status, y = _outcome(lambda: reduce(x))
        outside, _ = _outcome(lambda: lib.all_reduce(x, "tp", src=lib.P, dst=lib.R))
        made = _letters(lib, y)
        z = lib.assert_type(y, {"dp": lib.I, "tp": lib.I})
        loss = (z * z).sum()  # a contiguous gradient reaches the reference's all_reduce
        return status, made, outside, _outcome(loss.backward)[0]

    assert _run(mesh, libs, program) == ("ok", {}, "SpmdTypeError", "ok")


def test_registration_arguments(libs):
    for lib in libs:
        def f(x):
            return x

        assert lib.register_no_typecheck(f) is f
        assert lib.register_no_typecheck(f) is f  # again: no change
        for bad in (len, functools.partial(f), object(), 3):
            with pytest.raises(TypeError, match="register_no_typecheck: .* is not a Python "
                                                "function"):
                lib.register_no_typecheck(bad)
    assert spmd.runtime.register_no_typecheck is spmd.register_no_typecheck
    assert ops.unchecked_code_count() == 1


def test_nothing_registered_asks_nothing(libs, mesh):
    """With nothing registered the kernel reads one flag; checking is as
    before (a registration elsewhere in the session was forgotten)."""
    assert ops.unchecked_code_count() == 0
    assert not spmd.checker._registered_codes
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck():
        x, w = _typed(spmd, "IV"), _typed(spmd, "IP")
        with pytest.raises(spmd.SpmdTypeError):
            x * w


def test_under_torch_compile_the_graph_is_checked_whole(mesh, libs):
    """A limit (docs/limits.md): Dynamo traces a registered function into
    the compiled graph, which is checked whole; torch.compiler.disable
    keeps it a Python call, unchecked."""
    def helper(x, w):
        return x * w

    spmd.register_no_typecheck(helper)
    traced = torch.compile(lambda x, w: helper(x, w) + 1, backend="eager")
    kept = torch.compile(lambda x, w: torch.compiler.disable(helper)(x, w) + 1, backend="eager")
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck():
        x, w = _typed(spmd, "IV"), _typed(spmd, "IP")
        with pytest.raises(spmd.SpmdTypeError, match="Partial type on axis mesh_tp"):
            traced(x, w)
        assert _letters(spmd, kept(x, w)) == {}


def test_the_gradient_arriving_at_an_annotated_result_is_still_checked(mesh, libs):
    """The backward of the unchecked ops runs unchecked, but the gradient
    that checked code sends to a result annotated outside must still be
    the dual of its annotation (cspmd only: the reference checks no
    backward)."""
    def helper(x, w):
        return x * w

    def wrong(g):
        with spmd.no_typecheck():
            bad = torch.ones_like(g)
        return spmd.assert_type(bad, {"dp": spmd.I, "tp": spmd.P})  # V is due

    spmd.register_no_typecheck(helper)
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck():
        x, w = _typed(spmd, "IV", True), _typed(spmd, "IP", True)
        y = spmd.assert_type(helper(x, w), {"dp": spmd.I, "tp": spmd.V})
        y.register_hook(wrong)
        loss = spmd.all_reduce(y.sum(), "tp", src=spmd.V, dst=spmd.I)
        with pytest.raises(spmd.SpmdTypeError, match="mesh_tp"):
            loss.backward()
