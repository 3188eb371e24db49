"""trace() op and assert_type lines, and traceback_filtering."""

import logging
import os
import sys
import textwrap

import pytest
import torch

import cspmd as spmd
from cspmd import P, R, V
import time_limits

HERE = os.path.abspath(__file__)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))

NOTE = "Set SPMD_TYPES_TRACEBACK_FILTERING=off to see the full, unfiltered traceback."


def test_trace_op_and_assert_type_lines(checked, typed, caplog):
    x, y = typed({"dp": R, "tp": R}), typed({"dp": R, "tp": V})
    with caplog.at_level(logging.INFO, logger="cspmd.runtime.trace"), spmd.trace():
        z = x + y
        spmd.assert_type(z, {"tp": V})
        with spmd.no_typecheck():
            x + x  # unchecked ops are not traced
    lines = [r.getMessage() for r in caplog.records if r.name == "cspmd.runtime.trace"]
    assert len(lines) == 2, lines
    assert lines[0].startswith(f"{HERE}:")
    assert lines[0].endswith("  aten::add.Tensor({mesh_dp: R, mesh_tp: R}, {mesh_dp: R, "
                             "mesh_tp: V}) -> {mesh_dp: R, mesh_tp: V}")
    assert lines[1].endswith("  assert_type({mesh_dp: R, mesh_tp: V}) -> {mesh_dp: R, "
                             "mesh_tp: V}")


def test_trace_off_by_default_and_restored(checked, typed, caplog):
    x = typed({"dp": R, "tp": R})
    with caplog.at_level(logging.INFO, logger="cspmd.runtime.trace"):
        with spmd.trace():
            with spmd.trace(enabled=False):
                x + x
        x + x
    assert not [r for r in caplog.records if r.name == "cspmd.runtime.trace"]


def test_assert_type_traced_outside_checking(caplog):
    tp = spmd.MeshAxis.of(4, 1)
    with caplog.at_level(logging.INFO, logger="cspmd.runtime.trace"), spmd.trace():
        spmd.assert_type(torch.zeros(2), {tp: R})
    (msg,) = [r.getMessage() for r in caplog.records if r.name == "cspmd.runtime.trace"]
    line = test_assert_type_traced_outside_checking.__code__.co_firstlineno + 3
    assert msg == f"{HERE}:{line}  assert_type({{}}) -> {{{tp!r}: R}}"


def test_traceback_filtering_modes_validated():
    with pytest.raises(ValueError, match="Invalid traceback filtering mode: 'bogus'"):
        with spmd.traceback_filtering("bogus"):
            pass
    with pytest.raises(ValueError):
        with spmd.traceback_filtering(None):
            pass
    for mode in ("off", "auto", "tracebackhide", "quiet_remove_frames", "remove_frames"):
        with spmd.traceback_filtering(mode):
            pass


def _frames(tb):
    out = []
    while tb is not None:
        out.append(tb.tb_frame.f_code.co_filename)
        tb = tb.tb_next
    return out


def _raise_mismatch():
    x = torch.zeros(2)
    tp = spmd.MeshAxis.of(4, 1)
    spmd.assert_type(x, {tp: R})
    spmd.assert_type(x, {tp: V})


def test_remove_frames_drops_internal_frames():
    with spmd.traceback_filtering("remove_frames"):
        with pytest.raises(spmd.SpmdTypeError) as e:
            _raise_mismatch()
    files = _frames(e.value.__traceback__)
    assert not [f for f in files if "/cspmd/" in f], files
    # the note is part of the message, as in the reference
    assert str(e.value).count(NOTE) == 1 and e.value.args[0].endswith("\n\n" + NOTE)
    assert type(e.value.__cause__).__name__ == "UnfilteredStackTrace"
    assert [f for f in _frames(e.value.__cause__.__traceback__) if "/cspmd/" in f]


def test_quiet_and_off_and_tracebackhide():
    with spmd.traceback_filtering("quiet_remove_frames"):
        with pytest.raises(spmd.SpmdTypeError) as e:
            _raise_mismatch()
    assert e.value.__cause__ is None and str(e.value).count(NOTE) == 1
    with spmd.traceback_filtering("off"):
        with pytest.raises(spmd.SpmdTypeError) as e:
            _raise_mismatch()
    assert [f for f in _frames(e.value.__traceback__) if "/cspmd/" in f]
    assert NOTE not in str(e.value)
    with spmd.traceback_filtering("tracebackhide"):
        with pytest.raises(spmd.SpmdTypeError) as e:
            _raise_mismatch()
    tb, hidden = e.value.__traceback__, []
    while tb is not None:
        if "/cspmd/" in tb.tb_frame.f_code.co_filename:
            hidden.append(tb.tb_frame.f_locals.get("__tracebackhide__"))
        tb = tb.tb_next
    assert hidden and all(hidden)


def test_collectives_filtered_once(checked):
    with spmd.traceback_filtering("remove_frames"):
        x = torch.zeros(4)
        spmd.assert_type(x, {"dp": R, "tp": R})
        with pytest.raises(spmd.SpmdTypeError) as e:
            spmd.redistribute(x, "tp", src=P, dst=R)  # nested API calls: one note
    assert str(e.value).count(NOTE) == 1
    assert not [f for f in _frames(e.value.__traceback__) if "/cspmd/" in f]


def test_env_variable_and_auto_mode():
    code = textwrap.dedent("""
        import torch, cspmd as spmd
        tp = spmd.MeshAxis.of(4, 1)
        x = torch.zeros(2)
        spmd.assert_type(x, {tp: spmd.R})
        try:
            spmd.assert_type(x, {tp: spmd.V})
        except spmd.SpmdTypeError as e:
            tb, files = e.__traceback__, []
            while tb is not None:
                files.append(tb.tb_frame.f_code.co_filename); tb = tb.tb_next
            print(any('/cspmd/' in f for f in files), 'TRACEBACK_FILTERING=off' in str(e))
    """)
    for env, want in ((None, "False True"), ("off", "True False")):
        e = dict(os.environ)
        e.pop("SPMD_TYPES_TRACEBACK_FILTERING", None)
        if env:
            e["SPMD_TYPES_TRACEBACK_FILTERING"] = env
        out = time_limits.run([sys.executable, "-c", code], 120, text=True, env=e, cwd=ROOT)
        assert out.stdout.strip() == want, out.stdout + out.stderr
