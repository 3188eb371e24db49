"""trace(), traceback_filtering() and set_printoptions() set a process-wide
value for their block.  However the blocks are left -- out of order
(generators), on another thread, with a KeyboardInterrupt at any step of
entry or exit, with an exception in the body -- the value in force is that
of the innermost block still open, and with none open, the one there was
before the first."""

import importlib

import pytest

import cspmd as spmd
import cspmd._traceback as tb
import cspmd.mesh as mesh_mod
from cspmd._lib import ops

import exits

trace_mod = importlib.import_module("cspmd.trace")  # cspmd.trace is the function


def printoptions(debug):
    return spmd.set_printoptions(debug=debug)


def debug_shown():
    """Python's flag and the core's (which formats messages) agree."""
    core = bool(ops.axis_print_debug())
    assert core == mesh_mod._debug[0]
    return core


# name: (the block for a value, the value in force, the ScopedSetting, two values)
SETTINGS = {
    "trace": (spmd.trace, ops.trace_enabled, trace_mod._tracing, (True, False)),
    "traceback_filtering": (spmd.traceback_filtering, lambda: tb._mode[0], tb._filtering,
                            ("off", "remove_frames")),
    "set_printoptions": (printoptions, debug_shown, mesh_mod._printoptions, (True, False)),
}


@pytest.fixture(params=list(SETTINGS))
def setting(request):
    block, value, scoped, (a, b) = SETTINGS[request.param]
    before = value()

    def assert_clean():
        assert value() == before and scoped.depth() == 0

    yield block, value, scoped, a, b, assert_clean
    assert_clean()


def test_generators_closed_out_of_order(setting):
    block, value, _, a, b, assert_clean = setting
    first, second = exits.region(block(a), value), exits.region(block(b), value)
    assert next(first) == a and next(second) == b
    first.close()  # the outer block closes first: the inner one's value stays
    assert value() == b
    second.close()
    assert_clean()
    first, second = exits.region(block(a), value), exits.region(block(b), value)
    next(first), next(second)
    second.close()  # in order: the outer one's value again
    assert value() == a
    first.close()
    assert_clean()


def test_block_closed_on_another_thread(setting):
    block, value, _, a, b, assert_clean = setting
    outer = exits.region(block(b), value)
    next(outer)
    inner = exits.region(block(a), value)
    assert next(inner) == a
    exits.on_thread(outer.close)  # not the innermost: nothing visible changes
    assert value() == a
    exits.on_thread(inner.close)
    assert_clean()


def test_exception_in_the_body(setting):
    block, value, _, a, _b, assert_clean = setting
    with pytest.raises(ValueError):
        with block(a):
            assert value() == a
            raise ValueError("body")
    assert_clean()


def test_interrupt_at_every_step_of_entry_and_exit(monkeypatch, setting):
    block, value, scoped, a, b, assert_clean = setting

    def wrap_steps(m, inject):
        m.setattr(scoped, "_read", inject.wrap(scoped._read))
        m.setattr(scoped, "_write", inject.wrap(scoped._write))

    def run():
        with block(a):
            with block(b):
                pass

    exits.interrupt_every_step(monkeypatch, wrap_steps, run, assert_clean, min_steps=4)


def test_printoptions_statement_sets_the_innermost_block():
    before = debug_shown()
    with spmd.set_printoptions(debug=not before):
        assert debug_shown() is (not before)
        spmd.set_printoptions(debug=before)  # statement: until this block closes
        assert debug_shown() is before
        spmd.set_printoptions(debug=not before)
    assert debug_shown() is before
    with spmd.set_printoptions():  # no option: the block restores what it found
        spmd.set_printoptions(debug=not before)
    assert debug_shown() is before and mesh_mod._printoptions.depth() == 0
    spmd.set_printoptions(debug=not before)  # with no block open: for good
    try:
        assert debug_shown() is (not before)
    finally:
        spmd.set_printoptions(debug=before)
    assert debug_shown() is before


def test_out_of_order_against_the_reference():
    """The same out-of-order program in both: the reference restores what
    each block saw on entry, so the first block's value is left in force
    after both closed; cspmd leaves the value there was before them
    (docs/differences.md)."""
    from reference import load

    ref_tb = load("spmd_types._traceback")

    def program(filtering, mode_now):
        before = mode_now()
        first, second = exits.region(filtering("off")), exits.region(filtering("remove_frames"))
        next(first), next(second)
        first.close()
        second.close()
        return before, mode_now()

    ref_before, ref_after = program(ref_tb.traceback_filtering, lambda: ref_tb._FILTERING)
    try:
        assert ref_after == "off" != ref_before
    finally:
        ref_tb._FILTERING = ref_before
    before, after = program(spmd.traceback_filtering, lambda: tb._mode[0])
    assert after == before != "off"
