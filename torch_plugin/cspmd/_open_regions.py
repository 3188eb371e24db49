"""A thread's open regions, in the order they were entered: the one
bookkeeping behind ``typecheck()`` / ``no_typecheck()`` (checker.py) and
``set_current_mesh()`` (mesh.py).

A region may close out of order (a generator or coroutine suspended inside
it and closed later) or on another thread.  Whatever the order, the thread
that opened them ends with the state of its innermost region still open --
or the state it had before the first.  Every step is safe to interrupt: an
exception (or KeyboardInterrupt) raised anywhere in entry or exit still
leaves the regions and the library consistent.
"""

import threading

from ._lib import ops


class OpenRegions:
    """One thread's open regions.  A subclass says what the innermost one
    means by ``_apply(frame)`` (``frame`` None: no region is open), called
    under the lock; it must be safe to call twice in a row."""

    __slots__ = ("frames", "owner", "mailbox", "lock")

    def __init__(self):
        self.frames = []                       # open regions, in entry order
        self.owner = threading.get_ident()
        self.mailbox = ops.checker_mailbox()   # where other threads post for it
        self.lock = threading.Lock()

    def on_owner(self):
        """True on the thread that opened these regions; elsewhere the new
        state goes to the owner's mailbox, applied at its next op."""
        return threading.get_ident() == self.owner

    def enter(self, frame):
        self.frames.append(frame)
        self.sync()

    def leave(self, frame):
        """Close frame wherever it is among the open ones (no-op if it is not)."""
        try:
            for i in range(len(self.frames) - 1, -1, -1):
                if self.frames[i] is frame:
                    del self.frames[i]
                    break
        finally:
            self.sync()

    def sync(self):
        # Under the lock: a thread closing another thread's region and the
        # owner changing its own apply them in one order.
        with self.lock:
            frame = self.frames[-1] if self.frames else None
            try:
                self._apply(frame)
            except BaseException:  # interrupted mid-switch: finish it, then report
                self._apply(frame)
                raise

    def _apply(self, frame):
        raise NotImplementedError


def run_every_step(steps):
    """Run each of ``steps`` (idempotent callables) even when one before it
    raises; a step that raises runs once more (an interrupt lands once).
    The first error is raised at the end."""
    error = None
    for step in steps:
        try:
            step()
        except BaseException as e:  # noqa: B036 -- re-raised below
            error = error or e
            try:
                step()
            except BaseException:  # noqa: B036 -- the first error is raised
                pass
    if error is not None:
        raise error
