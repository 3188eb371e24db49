"""time_limits.py: the tests' limits in idle-machine seconds, stretched by
the load and still ending a hang; and the Gloo harness's timeout through it."""

import subprocess
import sys
import time

import pytest

import gloo_harness
import time_limits


def test_load_factor_is_between_one_and_the_cap():
    assert 1.0 <= time_limits.load_factor() <= time_limits.MAX_SLOWDOWN


@pytest.mark.parametrize("factor", [1.0, 3.0])
def test_a_deadline_stretches_with_the_load(monkeypatch, factor):
    monkeypatch.setattr(time_limits, "load_factor", lambda: factor)
    deadline = time_limits.Deadline(0.2)
    start = time.monotonic()
    while not deadline.expired():
        time.sleep(0.01)
    took = time.monotonic() - start
    assert 0.2 * factor <= took < 0.2 * factor + 2.0


def test_run_returns_the_output():
    proc = time_limits.run([sys.executable, "-c", "print(42)"], 60, text=True)
    assert (proc.returncode, proc.stdout) == (0, "42\n")


def test_run_kills_a_child_past_its_limit(monkeypatch):
    monkeypatch.setattr(time_limits, "load_factor", lambda: 1.0)
    code = "import time; print('started', flush=True); time.sleep(600)"
    with pytest.raises(subprocess.TimeoutExpired) as ei:
        time_limits.run([sys.executable, "-c", code], 3, text=True)
    assert "started" in ei.value.stdout


def _hang(rank, ws):
    time.sleep(600)  # only the harness's kill ends this


def test_harness_times_out_a_hung_world():
    with pytest.raises(TimeoutError, match=r"ranks \[0, 1\] did not finish within 2 s"):
        gloo_harness.run_world(2, _hang, timeout=2)
