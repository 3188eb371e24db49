"""Traceback filtering for errors raised by cspmd's public API: SpmdTypeError,
and the ValueError / TypeError of bad arguments (the reference filters
SpmdTypeError only).

Python-level only, and only where Python already runs: each public API
function (assert_type, the collectives, local_map, ...) is wrapped once by
``api_boundary``.  Errors that the C kernel raises from inside a torch op
(``x + y``, ``torch.relu(p)``) have no cspmd frame on the stack -- the
kernel is below torch's C++ dispatcher -- so there is nothing to filter;
no per-op Python is added for this feature.

Modes (env ``CSPMD_TRACEBACK_FILTERING`` or ``SPMD_TYPES_TRACEBACK_FILTERING``,
default ``auto``):

- ``off``: the traceback as raised;
- ``tracebackhide``: internal frames get ``__tracebackhide__ = True``
  (honoured by pytest and IPython);
- ``quiet_remove_frames``: internal frames are dropped and a note says how
  to see them;
- ``remove_frames``: the same, plus the full traceback attached as
  ``__cause__`` (an ``UnfilteredStackTrace``);
- ``auto``: ``tracebackhide`` under pytest or IPython, else
  ``quiet_remove_frames``.
"""

import contextlib
import functools
import os
import sys
import threading
import types
from typing import Any, Callable, Iterator, TypeVar

from ._errors import SpmdTypeError
from ._frames import is_library_file
from ._settings import ScopedSetting

__all__ = ["traceback_filtering", "UnfilteredStackTrace", "api_boundary"]

_VALID_MODES = frozenset({"off", "auto", "tracebackhide", "quiet_remove_frames",
                          "remove_frames"})
_NOTE = "Set SPMD_TYPES_TRACEBACK_FILTERING=off to see the full, unfiltered traceback."

def _check_mode(mode, what="traceback filtering mode"):
    if mode not in _VALID_MODES:
        raise ValueError(f"Invalid {what}: {mode!r}. Valid modes: {sorted(_VALID_MODES)}")
    return mode


_mode = [os.environ.get("CSPMD_TRACEBACK_FILTERING",
                        os.environ.get("SPMD_TYPES_TRACEBACK_FILTERING", "auto"))]
_tls = threading.local()


def _resolve(mode):
    _check_mode(mode, "SPMD_TYPES_TRACEBACK_FILTERING mode")
    if mode != "auto":
        return mode
    if "IPython" in sys.modules or "pytest" in sys.modules:
        return "tracebackhide"
    return "quiet_remove_frames"


class UnfilteredStackTrace(Exception):
    """Carries the full traceback (as ``__cause__``) in ``remove_frames`` mode."""


def _filter(e):
    mode = _resolve(_mode[0])
    if mode == "off":
        return
    tb = e.__traceback__
    if mode == "tracebackhide":
        cur = tb
        while cur is not None:
            if is_library_file(cur.tb_frame.f_code.co_filename):
                cur.tb_frame.f_locals["__tracebackhide__"] = True
            cur = cur.tb_next
        return
    entries = []
    cur = tb
    while cur is not None:
        entries.append(cur)
        cur = cur.tb_next
    out = None
    for t in reversed(entries):
        if not is_library_file(t.tb_frame.f_code.co_filename):
            out = types.TracebackType(out, t.tb_frame, t.tb_lasti, t.tb_lineno)
    if mode == "remove_frames":
        wrapper = UnfilteredStackTrace("The above is the original, unfiltered traceback.")
        wrapper.__traceback__ = tb
        e.__cause__ = wrapper
    # part of the message, as the reference has it: str(err) says it too
    if e.args and isinstance(e.args[0], str) and _NOTE not in e.args[0]:
        e.args = (f"{e.args[0]}\n\n{_NOTE}",) + e.args[1:]
    e.__traceback__ = out


_F = TypeVar("_F", bound=Callable[..., Any])


def api_boundary(fn: _F) -> _F:
    """Wrap a public API function: an SpmdTypeError, ValueError or TypeError
    leaving it is filtered once (nested API calls do not filter twice)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        __tracebackhide__ = True  # noqa: F841
        if getattr(_tls, "inside", False) or _mode[0] == "off":
            return fn(*args, **kwargs)
        _tls.inside = True
        try:
            return fn(*args, **kwargs)
        except (SpmdTypeError, ValueError, TypeError) as e:
            _filter(e)
            raise
        finally:
            _tls.inside = False

    wrapper.__wrapped_api__ = fn  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]


@contextlib.contextmanager
def traceback_filtering(mode: str = "auto") -> Iterator[None]:
    """Set the traceback filtering mode for the block: ``off``, ``auto``,
    ``tracebackhide``, ``quiet_remove_frames`` or ``remove_frames``
    (ValueError otherwise).

    >>> with traceback_filtering("off"):
    ...     pass
    """
    if not isinstance(mode, str):
        raise ValueError(f"Invalid traceback filtering mode: {mode!r}. "
                         f"Valid modes: {sorted(_VALID_MODES)}")
    _check_mode(mode)
    with _filtering.scoped(mode):
        yield


def _set_mode(mode):
    _mode[0] = mode


# Blocks may close in any order; the innermost open one decides.
_filtering = ScopedSetting(lambda: _mode[0], _set_mode)
