"""typecheck()/no_typecheck() leave the process as they found it, however
they are left: out of order (generators, coroutines), with an exception or a
KeyboardInterrupt at any step of entry or exit, with another library's
autograd patch installed inside the region, on several threads at once."""

import threading

import pytest
import torch
from torch._dynamo import convert_frame

import cspmd as spmd
import cspmd.checker as checker
from cspmd import I, P, R
from cspmd.checker import is_type_checking, no_typecheck, typecheck

import exits

ORIGINAL_BACKWARD = torch.autograd.backward
ORIGINAL_GRAD = torch.autograd.grad
ORIGINAL_APPLY = torch.autograd.Function.__dict__["apply"]


def partial_relu_raises(dp, tp):
    """Does the core check ops on this thread? (a P through relu)"""
    with no_typecheck():
        x = spmd.assert_type(torch.ones(2), {dp: R, tp: P})
    try:
        torch.relu(x)
    except spmd.SpmdTypeError:
        return True
    return False


def assert_clean(dp, tp):
    assert not is_type_checking()
    assert not partial_relu_raises(dp, tp)  # the core's flag, not only Python's
    assert not checker._state().frames and not checker._patch_holders
    assert torch.autograd.backward is ORIGINAL_BACKWARD
    assert torch.autograd.grad is ORIGINAL_GRAD
    assert torch.autograd.Function.__dict__["apply"] is ORIGINAL_APPLY
    assert not hasattr(convert_frame._compile, "_cspmd_original")  # cspmd.compiled's hooks


def region(cm):
    return exits.region(cm, is_type_checking)


def test_generators_closed_out_of_order(mesh, dp, tp):
    with spmd.set_current_mesh(mesh):
        a, b = region(typecheck()), region(typecheck(strict_mode="permissive"))
        assert next(a) and next(b)
        assert not checker._state().strict
        a.close()  # the outer region closes first: the inner one still checks
        assert is_type_checking() and not checker._state().strict
        assert partial_relu_raises(dp, tp)
        b.close()
        assert_clean(dp, tp)


def test_no_typecheck_in_a_generator_outliving_its_typecheck(mesh, dp, tp):
    with spmd.set_current_mesh(mesh):
        with typecheck():
            paused = region(no_typecheck())
            assert next(paused) is False
        assert not is_type_checking()
        paused.close()  # exits after the typecheck() it paused: checking stays off
        assert_clean(dp, tp)


def test_typecheck_in_a_generator_left_inside_no_typecheck(mesh, dp, tp):
    with spmd.set_current_mesh(mesh):
        g = region(typecheck())
        with no_typecheck():
            assert next(g) is True  # entered inside the pause: checks
        assert is_type_checking()  # the pause ended; g's region is still open
        g.close()
        assert_clean(dp, tp)


def test_coroutines_interleaved(mesh, dp, tp):
    import asyncio

    async def task(cm, started, release):
        with cm:
            started.set()
            await release.wait()

    async def main():
        e1, e2, r1, r2 = (asyncio.Event() for _ in range(4))
        t1 = asyncio.ensure_future(task(typecheck(), e1, r1))
        await e1.wait()
        t2 = asyncio.ensure_future(task(no_typecheck(), e2, r2))
        await e2.wait()
        r1.set()  # the typecheck() region ends first
        await t1
        r2.set()
        await t2

    with spmd.set_current_mesh(mesh):
        asyncio.run(main())
        assert_clean(dp, tp)


def wrap_steps(monkeypatch, inject):
    monkeypatch.setattr(checker._State, "_apply", inject.wrap(checker._State._apply))
    monkeypatch.setattr(checker, "_bind_groups", inject.wrap(checker._bind_groups))
    monkeypatch.setattr(checker, "_autograd_patch", inject.wrap(checker._autograd_patch))
    monkeypatch.setattr(checker, "_patch_hooks", [(inject.wrap(on), inject.wrap(off))
                                                  for on, off in checker._patch_hooks])


@pytest.mark.parametrize("body", ["plain", "nested", "paused"])
def test_interrupt_at_every_step_of_entry_and_exit(monkeypatch, mesh, dp, tp, body):
    def run():
        with spmd.set_current_mesh(mesh):
            with typecheck():
                if body == "nested":
                    with typecheck(strict_mode="permissive"):
                        pass
                elif body == "paused":
                    with no_typecheck():
                        pass

    exits.interrupt_every_step(monkeypatch, wrap_steps, run, lambda: assert_clean(dp, tp),
                               min_steps=8)


def test_exception_in_the_body(mesh, dp, tp):
    with spmd.set_current_mesh(mesh):
        with pytest.raises(ValueError):
            with typecheck():
                raise ValueError("body")
        assert_clean(dp, tp)


def test_another_librarys_backward_patch_survives_exit(mesh, dp, tp):
    calls = []

    def theirs(*args, **kwargs):
        calls.append(1)
        return previous(*args, **kwargs)

    with spmd.set_current_mesh(mesh):
        with typecheck():
            previous = torch.autograd.backward
            torch.autograd.backward = theirs  # installed inside the region
        try:
            assert torch.autograd.backward is theirs  # not overwritten by the exit
            x = torch.ones(2, requires_grad=True)
            torch.autograd.backward(x.sum())
            assert calls == [1] and torch.equal(x.grad, torch.ones(2))
            w = spmd.assert_type(torch.ones(2, requires_grad=True), {dp: I, tp: I})
            with typecheck():  # a new region neither drops theirs nor loops
                assert torch.autograd.backward is theirs
                (w * 2).sum().backward()
            assert calls == [1, 1] and torch.equal(w.grad, torch.full((2,), 2.0))
        finally:
            torch.autograd.backward = ORIGINAL_BACKWARD


def test_a_patch_installed_before_entry_keeps_running_inside(mesh, dp, tp):
    calls = []

    def theirs(*args, **kwargs):
        calls.append(1)
        return ORIGINAL_BACKWARD(*args, **kwargs)

    torch.autograd.backward = theirs
    try:
        w = spmd.assert_type(torch.ones(2, requires_grad=True), {dp: I, tp: I})
        with spmd.set_current_mesh(mesh), typecheck():
            torch.autograd.backward((w * 3).sum())
        assert calls == [1] and torch.equal(w.grad, torch.full((2,), 3.0))
        assert torch.autograd.backward is theirs  # restored to what was there
    finally:
        torch.autograd.backward = ORIGINAL_BACKWARD


def test_threads_have_independent_checking_state(mesh, dp, tp):
    inside, release = threading.Event(), threading.Event()
    seen = {}

    def checked_thread():
        with spmd.set_current_mesh(mesh), typecheck():
            seen["checked"] = partial_relu_raises(dp, tp)
            inside.set()
            release.wait(30)

    t = threading.Thread(target=checked_thread)
    t.start()
    assert inside.wait(30)
    seen["main"] = is_type_checking() or partial_relu_raises(dp, tp)
    with spmd.set_current_mesh(mesh), typecheck():  # closes while the thread's is open
        seen["main_inside"] = partial_relu_raises(dp, tp)
    seen["main_after"] = is_type_checking() or partial_relu_raises(dp, tp)
    assert torch.autograd.backward is not ORIGINAL_BACKWARD  # the thread's region holds it
    release.set()
    t.join(30)
    assert seen == {"checked": True, "main": False, "main_inside": True, "main_after": False}
    assert_clean(dp, tp)


class Double(torch.autograd.Function):
    """A Function whose cspmd hook records that the checked apply ran."""

    hooked = []

    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2

    @staticmethod
    def spmd_typecheck(out, x):
        Double.hooked.append(1)
        spmd.rules.ignore(x)
        spmd.assert_type_like(out, x)


def test_another_librarys_apply_patch_survives_exit(mesh, dp, tp):
    calls = []
    Double.hooked = []
    x = spmd.assert_type(torch.ones(2), {dp: R, tp: R})
    with spmd.set_current_mesh(mesh):
        with typecheck():
            previous = torch.autograd.Function.__dict__["apply"]

            def theirs(cls, *args, **kwargs):
                calls.append(cls.__name__)
                return previous.__get__(None, cls)(*args, **kwargs)

            torch.autograd.Function.apply = classmethod(theirs)  # installed inside the region
            patched = torch.autograd.Function.__dict__["apply"]
        try:
            assert torch.autograd.Function.__dict__["apply"] is patched  # not undone by the exit
            assert torch.equal(Double.apply(torch.ones(2)), torch.full((2,), 2.0))
            assert calls == ["Double"] and Double.hooked == []  # ours is off outside
            with typecheck():  # a new region keeps theirs on top, ours still checks below it
                assert torch.autograd.Function.__dict__["apply"] is patched
                Double.apply(x)
            assert calls == ["Double", "Double"] and Double.hooked == [1]
            assert torch.autograd.Function.__dict__["apply"] is patched
        finally:
            torch.autograd.Function.apply = ORIGINAL_APPLY


def test_an_apply_patch_installed_before_entry_runs_inside_and_is_restored(mesh, dp, tp):
    calls = []
    Double.hooked = []

    def theirs(cls, *args, **kwargs):
        calls.append(cls.__name__)
        return ORIGINAL_APPLY.__get__(None, cls)(*args, **kwargs)

    torch.autograd.Function.apply = classmethod(theirs)
    patched = torch.autograd.Function.__dict__["apply"]
    try:
        x = spmd.assert_type(torch.ones(2), {dp: R, tp: R})
        with spmd.set_current_mesh(mesh), typecheck():
            Double.apply(x)
        assert calls == ["Double"] and Double.hooked == [1]  # theirs and ours both ran
        assert torch.autograd.Function.__dict__["apply"] is patched  # restored to theirs
    finally:
        torch.autograd.Function.apply = ORIGINAL_APPLY


def checks_here(dp, tp):
    return is_type_checking() or partial_relu_raises(dp, tp)


def test_region_closed_on_another_thread(mesh, dp, tp):
    with spmd.set_current_mesh(mesh):
        g = region(typecheck())
        assert next(g) is True and partial_relu_raises(dp, tp)

        def close_there():
            before = checks_here(dp, tp)
            g.close()  # a generator finalized on another thread
            return before, checks_here(dp, tp)

        assert exits.on_thread(close_there) == (False, False)  # the closer's flags stay off
        assert not is_type_checking()
        assert not partial_relu_raises(dp, tp)  # the opener stops checking at its next op
        assert_clean(dp, tp)


def test_region_closed_on_a_checking_thread(mesh, dp, tp):
    with spmd.set_current_mesh(mesh):
        g = region(typecheck())
        assert next(g) is True

        def close_there():
            with spmd.set_current_mesh(mesh), typecheck(strict_mode="permissive"):
                g.close()
                return checker._state().strict, partial_relu_raises(dp, tp)

        assert exits.on_thread(close_there) == (False, True)  # the closer's own region stays
        assert not checks_here(dp, tp)
        assert_clean(dp, tp)


def test_pause_closed_on_another_thread_resumes_the_opener(mesh, dp, tp):
    with spmd.set_current_mesh(mesh), typecheck():
        g = region(no_typecheck())
        assert next(g) is False and not partial_relu_raises(dp, tp)
        exits.on_thread(g.close)
        assert is_type_checking() and partial_relu_raises(dp, tp)  # the pause ended
    assert_clean(dp, tp)


def test_opener_changes_after_a_post_win(mesh, dp, tp):
    # a post from another thread, then the opener's own newer change: the
    # opener's next op must not apply the stale post
    with spmd.set_current_mesh(mesh):
        g = region(typecheck())
        next(g)
        exits.on_thread(g.close)  # posts "off" to this thread
        with typecheck():  # this thread turns checking on itself
            assert partial_relu_raises(dp, tp)
        assert_clean(dp, tp)
