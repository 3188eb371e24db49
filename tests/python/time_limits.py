"""Time limits for tests that start processes, counted in idle-machine
seconds so that a loaded machine does not fail a test that is only slow.

A ``Deadline(seconds)`` spends its seconds at the pace of this machine's
load: each wall-clock second counts as 1 / ``load_factor()`` of a second,
where the factor is the 1-minute load average per CPU (at least 1, at most
``MAX_SLOWDOWN``), read again at each check.  On an idle machine (CI) a
limit is what it says; on a machine with load 10 on 2 CPUs it stretches
about five-fold; a test that hangs still ends, after ``MAX_SLOWDOWN``
times the limit at the most.

``run(cmd, seconds, **kw)`` is ``subprocess.run(cmd, timeout=...)`` with
such a deadline.
"""

import os
import subprocess
import time

MAX_SLOWDOWN = 6.0
_POLL = 1.0  # seconds between checks


def _cpus():
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def load_factor():
    """How many times slower than idle this machine runs now: the 1-minute
    load average per CPU, between 1 and MAX_SLOWDOWN (1 where the system
    has no load average)."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return 1.0
    return min(MAX_SLOWDOWN, max(1.0, load / _cpus()))


class Deadline:
    """``seconds`` of an idle machine, spent at the pace of the load."""

    def __init__(self, seconds):
        self.seconds = float(seconds)
        self._spent = 0.0
        self._last = time.monotonic()

    def left(self):
        """Idle-machine seconds left (<= 0: expired)."""
        now = time.monotonic()
        self._spent += (now - self._last) / load_factor()
        self._last = now
        return self.seconds - self._spent

    def expired(self):
        return self.left() <= 0

    def wait_time(self):
        """How long to block before the next check (wall-clock seconds)."""
        return max(0.0, min(_POLL, self.left()))


def run(cmd, seconds, **kwargs):
    """``subprocess.run(cmd, capture_output=True, **kwargs)`` (the output is
    always captured) bounded by a
    Deadline of ``seconds``; on expiry the child is killed and
    ``subprocess.TimeoutExpired`` raised (with the output so far), as
    ``subprocess.run`` does."""
    deadline = Deadline(seconds)
    kwargs.pop("capture_output", None)
    kwargs.setdefault("stdout", subprocess.PIPE)
    kwargs.setdefault("stderr", subprocess.PIPE)
    with subprocess.Popen(cmd, **kwargs) as proc:
        while True:
            try:
                out, err = proc.communicate(timeout=max(0.01, deadline.wait_time()))
                break
            except subprocess.TimeoutExpired:
                if deadline.expired():
                    proc.kill()
                    out, err = proc.communicate()
                    raise subprocess.TimeoutExpired(cmd, seconds, output=out, stderr=err)
        return subprocess.CompletedProcess(cmd, proc.returncode, out, err)
