"""Scaffolding for the tests that leave cspmd's context managers abnormally
(test_region_exits.py, test_mesh_exits.py, test_setting_exits.py): an
exception injected at every step of entry and exit, regions held open in
generators so that they close out of order, and closing on another thread.
"""

import threading


class Inject:
    """Raise KeyboardInterrupt at the n-th call of any wrapped step (n = 0:
    never; ``calls`` then counts the steps)."""

    def __init__(self, n):
        self.n, self.calls = n, 0

    def wrap(self, fn):
        def step(*args, **kwargs):
            self.calls += 1
            if self.calls == self.n:
                raise KeyboardInterrupt(f"injected at step {self.n}")
            return fn(*args, **kwargs)
        return step


def interrupt_every_step(monkeypatch, wrap_steps, run, assert_clean, min_steps):
    """Count the steps ``run()`` takes (``wrap_steps(monkeypatch, inject)``
    wraps each one), then run it once per step with a KeyboardInterrupt
    injected at that step, and ``assert_clean()`` after each; at least
    ``min_steps`` steps, so that a test whose wrapping misses the steps
    fails.  Then ``run()`` works once more, uninterrupted."""
    import pytest

    with monkeypatch.context() as m:
        probe = Inject(0)
        wrap_steps(m, probe)
        run()
    assert probe.calls >= min_steps, f"only {probe.calls} steps wrapped"
    for n in range(1, probe.calls + 1):
        with monkeypatch.context() as m:
            wrap_steps(m, Inject(n))
            with pytest.raises(KeyboardInterrupt, match=f"injected at step {n}"):
                run()
        assert_clean()
    run()
    assert_clean()
    return probe.calls


def region(cm, probe=lambda: None):
    """A generator holding ``cm`` open: ``next()`` enters it (and gives
    ``probe()``), ``close()`` leaves it, in whatever order the test picks."""
    with cm:
        yield probe()
        yield probe()


def on_thread(fn):
    """``fn()`` on a new thread; its result, or its exception re-raised here."""
    out = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as e:  # reported on the calling thread
            out["error"] = e

    t = threading.Thread(target=run)
    t.start()
    t.join(30)
    if "error" in out:
        raise out["error"]
    return out["value"]
