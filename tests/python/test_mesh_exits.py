"""set_current_mesh() leaves the thread as it found it, however it is left:
out of order (generators, coroutines), with a KeyboardInterrupt at any step
of entry or exit, closed on another thread than its opener's; threads keep
independent meshes.  The checker reads the core's mesh, so each test also
checks what the core has (a strict op missing an axis), not only Python's
list of open regions."""

import threading

import pytest
import torch

import cspmd as spmd
import cspmd.mesh as mesh_mod
from cspmd import R
from cspmd._lib import ops
from cspmd.checker import typecheck

import exits


def core_mesh():
    """The core's current mesh as a set of axis ids (None: no mesh)."""
    ids = ops.mesh_current()
    return None if ids == [-1] else set(ids)


def ids(axes):
    return None if axes is None else {a.id for a in axes}


def assert_clean():
    assert spmd.current_mesh() is None
    assert not mesh_mod._stack()
    assert core_mesh() is None


def region(*args, **kwargs):
    return exits.region(spmd.set_current_mesh(*args, **kwargs), spmd.current_mesh)


def test_generators_closed_out_of_order(mesh, dp_axis, tp_axis):
    a, b = region(mesh), region({"tp": tp_axis})
    assert next(a) == {dp_axis, tp_axis}
    assert next(b) == {tp_axis}
    a.close()  # the outer region closes first: the inner one stays current
    assert spmd.current_mesh() == {tp_axis} and core_mesh() == {tp_axis.id}
    assert spmd.current_mesh_names() == {"tp": tp_axis}
    b.close()
    assert_clean()


def test_inner_generator_outlives_the_with_block(mesh, dp_axis, tp_axis):
    with spmd.set_current_mesh(mesh):
        g = region({"tp": tp_axis})
        assert next(g) == {tp_axis}
    # the with block closed under g's region: g's mesh is current
    assert spmd.current_mesh() == {tp_axis} and core_mesh() == {tp_axis.id}
    g.close()
    assert_clean()


def test_checker_reads_the_innermost_open_region(mesh, dp, tp, tp_axis):
    # strict checking on the 2-D mesh refuses an operand typed on tp only;
    # once only the tp region is open, the same op passes
    x = spmd.assert_type(torch.ones(2), {tp: R})
    outer, inner = region(mesh), region({"tp": tp_axis})
    next(inner)
    next(outer)  # entered last: the 2-D mesh is current
    with typecheck():
        with pytest.raises(spmd.SpmdTypeError):
            torch.relu(x)
        outer.close()
        assert spmd.get_local_type(torch.relu(x)) == {tp_axis: R}
    inner.close()
    assert_clean()


def test_coroutines_interleaved(mesh, tp_axis):
    import asyncio

    async def task(arg, started, release):
        with spmd.set_current_mesh(arg):
            started.set()
            await release.wait()

    async def main():
        e1, e2, r1, r2 = (asyncio.Event() for _ in range(4))
        t1 = asyncio.ensure_future(task(mesh, e1, r1))
        await e1.wait()
        t2 = asyncio.ensure_future(task({"tp": tp_axis}, e2, r2))
        await e2.wait()
        r1.set()  # the first region ends first
        await t1
        assert core_mesh() == {tp_axis.id}
        r2.set()
        await t2

    asyncio.run(main())
    assert_clean()


def wrap_steps(monkeypatch, inject):
    for name in ("_entry_of", "_resolve_local_axes"):
        monkeypatch.setattr(mesh_mod, name, inject.wrap(getattr(mesh_mod, name)))
    monkeypatch.setattr(mesh_mod._MeshState, "_apply", inject.wrap(mesh_mod._MeshState._apply))
    monkeypatch.setattr(mesh_mod._Entry, "with_local_axes",
                        inject.wrap(mesh_mod._Entry.with_local_axes))


@pytest.mark.parametrize("body", ["plain", "nested", "local_axes", "repush"])
def test_interrupt_at_every_step_of_entry_and_exit(monkeypatch, mesh, tp_axis, body):
    def run():
        if body == "local_axes":
            with spmd.set_current_mesh(mesh, local_axes=("dp",)):
                pass
            return
        with spmd.set_current_mesh(mesh):
            if body == "nested":
                with spmd.set_current_mesh({"tp": tp_axis}):
                    pass
            elif body == "repush":
                with spmd.set_current_mesh(None, local_axes=("dp",)):
                    pass

    exits.interrupt_every_step(monkeypatch, wrap_steps, run, assert_clean, min_steps=5)


def test_interrupt_inside_an_outer_region_restores_the_outer_mesh(monkeypatch, mesh, dp_axis,
                                                                   tp_axis):
    with spmd.set_current_mesh(mesh):
        for n in (1, 2, 3, 4):
            with monkeypatch.context() as m:
                wrap_steps(m, exits.Inject(n))
                with pytest.raises(KeyboardInterrupt):
                    with spmd.set_current_mesh({"tp": tp_axis}):
                        pass
            assert spmd.current_mesh() == {dp_axis, tp_axis}
            assert core_mesh() == {dp_axis.id, tp_axis.id}
    assert_clean()


def test_bad_arguments_change_nothing(mesh, dp_axis, tp_axis):
    with spmd.set_current_mesh(mesh):
        for bad in (lambda: spmd.set_current_mesh(5),
                    lambda: spmd.set_current_mesh(mesh, local_axes=("nope",)),
                    lambda: spmd.set_current_mesh(mesh, local_axes=("tp",))):
            with pytest.raises((TypeError, ValueError)):
                with bad():
                    pass
            assert core_mesh() == {dp_axis.id, tp_axis.id} and len(mesh_mod._stack()) == 1
    assert_clean()


def test_exception_in_the_body(mesh):
    with pytest.raises(ValueError):
        with spmd.set_current_mesh(mesh):
            raise ValueError("body")
    assert_clean()


def test_threads_have_independent_meshes(mesh, dp_axis, tp_axis):
    inside, release = threading.Event(), threading.Event()
    seen = {}

    def other():
        with spmd.set_current_mesh({"tp": tp_axis}):
            inside.set()
            release.wait(30)
            seen["other"] = (ids(spmd.current_mesh()), core_mesh())

    t = threading.Thread(target=other)
    t.start()
    assert inside.wait(30)
    assert_clean()  # the other thread's region is not this thread's
    with spmd.set_current_mesh(mesh):
        release.set()
        t.join(30)
        assert core_mesh() == {dp_axis.id, tp_axis.id}
    assert seen["other"] == ({tp_axis.id}, {tp_axis.id})
    assert_clean()


def test_region_closed_on_another_thread(mesh, dp_axis, tp_axis):
    g = region(mesh)
    assert next(g) == {dp_axis, tp_axis}

    def close_there():
        with spmd.set_current_mesh({"tp": tp_axis}):
            g.close()  # a generator finalized on another thread
            return ids(spmd.current_mesh()), core_mesh()

    # the closer keeps its own mesh ...
    assert exits.on_thread(close_there) == ({tp_axis.id}, {tp_axis.id})
    # ... and the opener's is gone: Python's list at once, the core's at its
    # next call into cspmd
    assert_clean()


def test_region_closed_on_another_thread_reaches_the_checker(mesh, dp, tp, tp_axis):
    x = spmd.assert_type(torch.ones(2), {tp: R})
    with spmd.set_current_mesh({"tp": tp_axis}):
        g = region(mesh)
        next(g)
        with typecheck():
            with pytest.raises(spmd.SpmdTypeError):
                torch.relu(x)  # strict on the 2-D mesh
            exits.on_thread(g.close)
            assert spmd.get_local_type(torch.relu(x)) == {tp_axis: R}  # tp only again
    assert_clean()


def test_opener_changes_after_a_post_win(mesh, dp_axis, tp_axis):
    g = region(mesh)
    next(g)
    with spmd.set_current_mesh({"tp": tp_axis}):
        exits.on_thread(g.close)  # posts "the tp mesh" to this thread
        with spmd.set_current_mesh(mesh):  # this thread's own newer change
            assert core_mesh() == {dp_axis.id, tp_axis.id}
        assert core_mesh() == {tp_axis.id}
    assert_clean()


def test_deep_nesting_has_no_depth_limit(tp_axis):
    # the core keeps one entry per thread; Python keeps the open regions
    import contextlib
    with contextlib.ExitStack() as stack:
        for _ in range(200):
            stack.enter_context(spmd.set_current_mesh({"tp": tp_axis}))
        assert core_mesh() == {tp_axis.id} and len(mesh_mod._stack()) == 200
    assert_clean()
