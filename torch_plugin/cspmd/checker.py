"""Turning the checker on and off: ``typecheck()`` and ``no_typecheck()``.

Checking is per thread.  While it is on, cspmd's dispatch key is in the
thread's included key set, so every op -- forward and backward -- reaches the
C kernel; no Python runs per op.
"""

import contextlib
import functools
import threading

import torch

from ._lib import ops

__all__ = ["typecheck", "no_typecheck", "is_type_checking", "TYPE_CHECKING", "SpmdTypeMode"]

_tls = threading.local()


class _State:
    """This thread's checker flags (mirrors the core's, read without a call)."""

    __slots__ = ("active", "enabled", "strict", "local")

    def __init__(self):
        self.active = False   # a typecheck() region exists on this thread
        self.enabled = False  # ... and is not paused by no_typecheck()
        self.strict = True
        self.local = True


def _state():
    s = getattr(_tls, "state", None)
    if s is None:
        s = _tls.state = _State()
    return s


def _apply(s):
    ops.checker_set(s.enabled, s.strict)


class SpmdTypeMode:
    """Handle of an active ``typecheck()`` region (what the context yields)."""

    def __init__(self, state):
        self._s = state

    @property
    def strict(self):
        return self._s.strict

    @property
    def local(self):
        return self._s.local


_patch_lock = threading.Lock()
_patch_users = [0]
_original_backward = torch.autograd.backward


def _typed_seed(t):
    """The implicit gradient of a loss: ones, typed as the dual of its type."""
    seed = torch.ones_like(t, memory_format=torch.preserve_format)
    ops.set_type(seed, ops.type_dual(ops.get_type(t)))
    return seed


@functools.wraps(_original_backward)
def _checked_backward(tensors, grad_tensors=None, *args, **kwargs):
    # The implicit seed of backward() is Invariant data; typing it as the dual
    # of the loss type lets backward inference start from the right type.
    if grad_tensors is None and is_type_checking():
        single = isinstance(tensors, torch.Tensor)
        ts = (tensors,) if single else tuple(tensors)
        if all(t.numel() == 1 for t in ts):
            with no_typecheck():
                seeds = tuple(_typed_seed(t) for t in ts)
            grad_tensors = seeds[0] if single else seeds
    return _original_backward(tensors, grad_tensors, *args, **kwargs)


def _patch(on):
    with _patch_lock:
        _patch_users[0] += 1 if on else -1
        torch.autograd.backward = _checked_backward if _patch_users[0] > 0 else _original_backward


@contextlib.contextmanager
def typecheck(strict_mode=None, local=None):
    """Check SPMD types of every op run on this thread inside the block.

    ``strict_mode``: "strict" (default) requires every operand to carry every
    axis of the current mesh; "permissive" skips missing axes.  Re-entering
    inside another ``typecheck()`` or ``no_typecheck()`` re-enables checking
    and inherits what is not given.

    >>> with typecheck():
    ...     is_type_checking()
    True
    """
    if strict_mode not in (None, "strict", "permissive"):
        raise ValueError(f"strict_mode must be 'strict' or 'permissive', got {strict_mode!r}")
    if local is False:
        raise NotImplementedError("global SPMD checking (local=False) is not implemented yet")
    s = _state()
    saved = (s.active, s.enabled, s.strict, s.local)
    first = not s.active
    if first:
        ops.register_explicit()
        _patch(True)
    s.active, s.enabled = True, True
    if strict_mode is not None or first:
        s.strict = strict_mode != "permissive"
    if local is not None:
        s.local = local
    _apply(s)
    try:
        yield SpmdTypeMode(s)
    finally:
        s.active, s.enabled, s.strict, s.local = saved
        _apply(s)
        if first:
            _patch(False)


class no_typecheck:
    """Pause checking for a block (a no-op when checking is off).

    >>> with typecheck(), no_typecheck():
    ...     is_type_checking()
    False
    """

    def __init__(self, **kwargs):
        if kwargs:
            raise TypeError("the typed no_typecheck(out_types=...) decorator is not implemented "
                            "yet")

    def __enter__(self):
        s = _state()
        self._saved = s.enabled
        if s.enabled:
            s.enabled = False
            _apply(s)
        return self

    def __exit__(self, *exc):
        s = _state()
        if s.enabled != self._saved:
            s.enabled = self._saved
            _apply(s)
        return False


def is_type_checking():
    """True inside ``typecheck()`` on this thread and not paused."""
    return _state().enabled


class _TypeChecking:
    """Truthy exactly when checking is on: ``if TYPE_CHECKING: ...``."""

    def __bool__(self):
        return is_type_checking()

    def __repr__(self):
        return f"TYPE_CHECKING({is_type_checking()})"


TYPE_CHECKING = _TypeChecking()
