"""Process-wide settings that ``with`` blocks change for their extent
(``trace()``, ``traceback_filtering()``, ``set_printoptions()``).

The value in force is that of the innermost block still open (the one
entered last), or, with no block open, the value there was before the
first one opened.  Blocks may close in any order -- generators and
coroutines left out of order, a generator finalized on another thread --
and closing one that is not innermost changes nothing visible.  Every step
is safe to interrupt: an exception (a KeyboardInterrupt) anywhere in entry
or exit leaves the open blocks and the value in force consistent.
"""

import contextlib
import threading
from typing import Any, Callable, Iterator, List, Optional

__all__ = ["ScopedSetting"]


class ScopedSetting:
    """One process-wide value: ``read()`` gives it, ``write(v)`` puts it in
    force (both may be called again after an interrupt)."""

    def __init__(self, read: Callable[[], Any], write: Callable[[Any], None]):
        self._read, self._write = read, write
        self._lock = threading.Lock()
        self._open: List[list] = []  # one [value] cell per open block, oldest first
        self._base: Any = None       # the value before the first open block

    def set(self, value: Any) -> Optional[tuple]:
        """Statement form: ``value`` in force now, until the innermost open
        block closes (or for good with none open).  Returns what it replaced
        as ``(cell or None, old value)``, for :meth:`open` to take back."""
        with self._lock:
            if self._open:
                cell = self._open[-1]
                replaced = (cell, cell[0])
            else:
                replaced = (None, self._read())
            try:
                if self._open:
                    cell[0] = value
                self._sync(value)
            except BaseException:  # interrupted: the statement did not happen
                self._put_back(replaced)
                raise
        return replaced

    def revert(self, replaced: tuple) -> None:
        """Take back the statement :meth:`set` that returned ``replaced``
        (its ``with`` block failed to open)."""
        with self._lock:
            self._put_back(replaced)

    def _put_back(self, replaced):
        holder, old = replaced
        if holder is None:
            if not self._open:
                self._sync(old)
        elif any(c is holder for c in self._open):
            holder[0] = old
            self._sync(self._open[-1][0])

    def open(self, cell: list, undo: Optional[tuple] = None) -> None:
        """Open a block whose value is ``cell[0]``.  ``undo``: what a
        statement :meth:`set` replaced just before (``set_printoptions``
        applies its value when called, then becomes a block): the level
        below the new block gets its old value back.  The value in force
        does not change in that case.  Interrupted, the block is closed."""
        try:
            with self._lock:
                if not self._open:
                    self._base = self._read()
                if undo is not None:
                    holder, old = undo
                    if holder is None and not self._open:
                        self._base = old
                    elif holder is not None and any(c is holder for c in self._open):
                        holder[0] = old
                self._open.append(cell)
                self._sync(cell[0])
        except BaseException:
            self.close(cell)
            raise

    def close(self, cell: list) -> None:
        """Close the block of ``cell`` wherever it is among the open ones
        (a no-op if it is not open)."""
        with self._lock:
            at = next((i for i in range(len(self._open)) if self._open[i] is cell), None)
            if at is None:
                return
            try:
                del self._open[at]
            finally:
                self._sync(self._open[-1][0] if self._open else self._base)

    def _sync(self, value: Any) -> None:
        try:
            self._write(value)
        except BaseException:  # interrupted mid-write: finish it, then report
            self._write(value)
            raise

    @contextlib.contextmanager
    def scoped(self, value: Any) -> Iterator[None]:
        """``value`` in force for the ``with`` block."""
        cell = [value]
        try:
            self.open(cell)
            yield
        finally:
            self.close(cell)

    def depth(self) -> int:
        """How many blocks are open (for tests)."""
        return len(self._open)
