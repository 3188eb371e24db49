"""Turning the checker on and off: ``typecheck()`` and ``no_typecheck()``.

Checking is per thread.  While it is on, cspmd's dispatch key is in the
thread's included key set, so every op -- forward and backward -- reaches the
C kernel; no Python runs per op.
"""

import contextlib
import functools
import inspect
import threading
import types
from typing import Any, Callable, Iterator, Literal, Optional, TypeVar, overload

import torch

from . import _handlers
from ._lib import ops
from ._open_regions import OpenRegions, run_every_step

__all__ = ["typecheck", "no_typecheck", "is_type_checking", "local_map", "TYPE_CHECKING",
           "SpmdTypeMode"]

_tls = threading.local()


class _State(OpenRegions):
    """This thread's checker flags (mirrors the core's, read without a call)
    and the regions open on it (typecheck(), no_typecheck(), a backward
    pass), each a _Frame with the flags in effect while it is the innermost
    open one."""

    __slots__ = ("active", "enabled", "strict", "local", "backward", "base")

    def __init__(self):
        super().__init__()
        self.active = False   # a typecheck() region exists on this thread
        self.enabled = False  # ... and is not paused by no_typecheck()
        self.strict = True
        self.local = True
        self.backward = True  # check the ops backward() runs, and gradients
        self.base = _flags(self)  # the flags when no region is open

    def enter(self, frame):
        if not self.frames:
            self.base = _flags(self)
        super().enter(frame)

    def _apply(self, frame):
        flags = frame.flags if frame is not None else self.base
        self.active, self.enabled, self.strict, self.local, self.backward = flags
        if self.on_owner():
            ops.checker_set(self.enabled, self.strict)
            ops.checker_set_local(self.local)
        else:
            # A region of another thread closed here (a generator finalized
            # on this thread): this thread's flags stay; the owner applies
            # the posted ones at its next op.
            ops.checker_post(self.mailbox, self.enabled, self.strict, self.local)


def _flags(s):
    return (s.active, s.enabled, s.strict, s.local, s.backward)


class _Frame:
    """One open region (typecheck(), no_typecheck(), a backward pass): the
    flags in effect while it is the innermost open one."""

    __slots__ = ("flags",)

    def __init__(self, flags):
        self.flags = flags


def _state():
    s = getattr(_tls, "state", None)
    if s is None:
        s = _tls.state = _State()
    return s


class SpmdTypeMode:
    """``with SpmdTypeMode(**kwargs):`` is ``with typecheck(**kwargs):`` (the
    older spelling); ``typecheck()`` also yields one, to read the region's
    flags.

    >>> with SpmdTypeMode():
    ...     is_type_checking()
    True
    """

    def __init__(self, **kwargs: Any) -> None:
        self._kwargs = kwargs
        self._s: _State | None = None
        self._cm: Any = None

    @classmethod
    def _of(cls, state: _State) -> "SpmdTypeMode":
        mode = cls()
        mode._s = state
        return mode

    def __enter__(self) -> "SpmdTypeMode":
        self._cm = typecheck(**self._kwargs)
        self._s = self._cm.__enter__()._s
        return self

    def __exit__(self, *exc: Any) -> Any:
        cm, self._cm = self._cm, None
        return cm.__exit__(*exc)

    @property
    def strict(self) -> bool:
        return (self._s or _state()).strict

    @property
    def local(self) -> bool:
        return (self._s or _state()).local


_patch_lock = threading.Lock()
_patch_holders = set()  # the open typecheck() frames, of every thread
_original_backward = torch.autograd.backward
_original_grad = torch.autograd.grad
# What our autograd.backward/grad call: torch's, or a patch another library
# installed before the first region opened (it keeps running, under ours).
_inner = {"backward": _original_backward, "grad": _original_grad}
# A patch another library installed over ours inside a region: it calls
# ours, so it stays when the region closes, and ours is not put over it again.
_left_over = {"backward": None, "grad": None}


def _seeds(outputs):
    """Loss check and the implicit gradients of ``outputs``: ones,
    typed as the dual of each output's type (the seed is Invariant data)."""
    seeds = []
    with no_typecheck():
        for t in outputs:
            ty = ops.get_type(t)
            ops.loss_check(ty)
            seed = torch.ones_like(t, memory_format=torch.preserve_format)
            ops.set_type(seed, ops.type_dual(ty))
            seeds.append(seed)
    return tuple(seeds)


def _explicit_gradients(outputs, grads, single, names):
    """The gradients backward() / autograd.grad start from, typed by the core:
    an untyped explicit gradient, or one a factory made in the region (the
    user's data, whatever type its making gave it), takes the dual of its
    output's type (what the implicit seed would be); a typed one is checked
    to be that dual.
    None entries of scalar outputs get the implicit seed (and the loss check).
    A gradient whose type changes is retyped on an alias, never in place:
    the caller's tensor keeps its type."""
    gs = ((grads,) if isinstance(grads, torch.Tensor)
          else (None,) * len(outputs) if grads is None else tuple(grads))
    if len(gs) != len(outputs):
        return grads  # torch reports the mismatch itself
    out_name, grad_name = names
    out = []
    with no_typecheck():
        for i, (t, g) in enumerate(zip(outputs, gs)):
            if not isinstance(t, torch.Tensor):
                out.append(g)
            elif g is None:
                out.append(_seeds((t,))[0] if t.numel() == 1 else None)
            elif not isinstance(g, torch.Tensor):
                out.append(g)
            else:
                what = ("the output", grad_name) if single else (f"{out_name}[{i}]",
                                                                 f"{grad_name}[{i}]")
                have = ops.get_type(g)
                seed = ops.grad_seed(ops.get_type(t), have, ops.tensor_is_data(g), what[0],
                                     what[1])
                if seed != have:
                    g = g.view_as(g) if g.requires_grad else g.detach()
                    ops.set_type(g, seed)
                out.append(g)
    return out[0] if single else tuple(out)


class _BackwardScope:
    """Runs the autograd engine with checking on or off, as typecheck(backward=...) says.
    The engine captures the dispatch key set when backward() starts."""

    def __enter__(self):
        s = self._state = _state()
        self._frame = None
        if s.enabled and (not s.backward or _in_registered_code()):
            self._frame = _pause(s)

    def __exit__(self, *exc):
        frame, self._frame = self._frame, None
        if frame is not None:
            self._state.leave(frame)


def _pause(s):
    """Open a frame with checking paused; returns it."""
    frame = _Frame((s.active, False, s.strict, s.local, s.backward))
    try:
        s.enter(frame)
    except BaseException:
        s.leave(frame)
        raise
    return frame


def _as_tuple(t):
    return (t,) if isinstance(t, torch.Tensor) else tuple(t)


@functools.wraps(_original_backward)
def _checked_backward(tensors, grad_tensors=None, *args, **kwargs):
    s = _state()
    if s.enabled and s.backward and not _in_registered_code():
        single = isinstance(tensors, torch.Tensor)
        ts = _as_tuple(tensors)
        grad_tensors = _explicit_gradients(ts, grad_tensors, single,
                                           ("tensors", "(given to backward())" if single
                                            else "grad_tensors"))
        ops.watch_leaves([t for t in ts if isinstance(t, torch.Tensor)])
    with _BackwardScope():
        return _inner["backward"](tensors, grad_tensors, *args, **kwargs)


@functools.wraps(_original_grad)
def _checked_grad(outputs, inputs, grad_outputs=None, *args, **kwargs):
    s = _state()
    checked = s.enabled and s.backward and not _in_registered_code()
    if checked:
        single = isinstance(outputs, torch.Tensor)
        grad_outputs = _explicit_gradients(_as_tuple(outputs), grad_outputs, single,
                                           ("outputs", "(grad_outputs)" if single
                                            else "grad_outputs"))
    with _BackwardScope():
        grads = _inner["grad"](outputs, inputs, grad_outputs, *args, **kwargs)
    if checked:
        _check_leaf_gradients(_as_tuple(inputs), grads)
    return grads


def _describe(t):
    """"parameter f32[4, 8]": a tensor as gradient messages name it."""
    kind = "parameter" if isinstance(t, torch.nn.Parameter) else "tensor"
    shape = ", ".join(str(s) for s in t.shape)
    return f"{kind} {str(t.dtype).replace('torch.', '')}[{shape}]"


def _check_leaf_gradients(inputs, grads):
    """autograd.grad returns the gradients of leaf inputs instead of
    accumulating them (no AccumulateGrad runs): check each is the dual of its
    leaf's type, as accumulation would (non-leaf inputs have their hooks)."""
    for t, g in zip(inputs, grads):
        if isinstance(t, torch.Tensor) and t.is_leaf and isinstance(g, torch.Tensor):
            ops.grad_watch_check(t, 0, g, _describe(t))


_patch_hooks = []  # (on_fn, off_fn) registered by other modules
# no_typecheck(**types): a typed region, made by cspmd.regions (a module
# above this one), which puts its maker here when it loads.
_typed_region = [None]


def _register_patch(on_fn, off_fn):
    """Have ``on_fn()`` run when the first ``typecheck()`` region (of any
    thread) starts and ``off_fn()`` when the last one ends, like the
    backward/grad patch above.  Used by cspmd.dtensor and cspmd.compiled."""
    with _patch_lock:
        _patch_hooks.append((on_fn, off_fn))
        if _patch_holders:
            on_fn()


def _autograd_patch(on):
    for name, ours in (("backward", _checked_backward), ("grad", _checked_grad)):
        current = getattr(torch.autograd, name)
        if on and current is not ours and current is not _left_over[name]:
            _inner[name] = current
            setattr(torch.autograd, name, ours)
        elif not on:
            if current is ours:
                setattr(torch.autograd, name, _inner[name])
                _left_over[name] = None
            else:
                _left_over[name] = current


def _switch(on):
    """Install (on) or remove every process-wide patch.  Every step runs even
    when one before it raises, and a step that raises is run once more (an
    interrupt lands once; the steps are idempotent): the first error is
    raised at the end, with the patches in place or gone."""
    steps = [lambda: _autograd_patch(on)]
    steps += [on_fn if on else off_fn for on_fn, off_fn in _patch_hooks]
    run_every_step(steps)


def _patch_acquire(frame):
    """The patches are on while any typecheck() frame holds them."""
    with _patch_lock:
        first = not _patch_holders
        _patch_holders.add(frame)
        if first:
            _switch(True)


def _patch_release(frame):
    """Idempotent: a frame that holds nothing releases nothing."""
    with _patch_lock:
        if frame not in _patch_holders:
            return
        _patch_holders.discard(frame)
        if not _patch_holders:
            _switch(False)


def _bind_groups():
    """Tell the core the mesh axis of every existing process group, so that
    raw torch.distributed collectives on any of them can be typed."""
    import torch.distributed as dist
    if not dist.is_available() or not dist.is_initialized():
        return
    from .mesh import bind_group
    for pg in list(dist.distributed_c10d._world.pg_names):
        try:
            bind_group(pg)  # names no axis: the program has not used the group yet
        except Exception:  # a group whose ranks cannot be read: left unbound
            pass


@contextlib.contextmanager
def typecheck(strict_mode: Optional[Literal["permissive", "strict"]] = None,
              local: Optional[bool] = None,
              backward: Optional[bool] = None) -> Iterator[SpmdTypeMode]:
    """Check SPMD types of every op run on this thread inside the block.

    ``strict_mode``: "strict" (default) requires every operand to carry every
    axis of the current mesh; "permissive" skips missing axes.
    ``backward``: True (default) also checks every op that ``backward()`` /
    ``autograd.grad`` run, the loss, and that each annotated tensor's
    gradient is the dual of its type; False checks the forward only.
    Re-entering inside another ``typecheck()`` or ``no_typecheck()``
    re-enables checking and inherits what is not given.

    >>> with typecheck():
    ...     is_type_checking()
    True
    """
    if strict_mode not in (None, "strict", "permissive"):
        raise ValueError(f"strict_mode must be 'strict' or 'permissive', got {strict_mode!r}")
    s = _state()
    first = not s.active
    strict = s.strict if strict_mode is None and not first else strict_mode != "permissive"
    back = s.backward if backward is None and not first else backward is not False
    frame = _Frame((True, True, strict, s.local if local is None else local, back))
    try:
        if first:
            ops.register_explicit()
            _handlers.install()
            _bind_groups()
        _patch_acquire(frame)
        s.enter(frame)
    except BaseException:
        _close(s, frame)
        raise
    try:
        yield SpmdTypeMode._of(s)
    finally:
        _close(s, frame)


def _close(s, frame):
    try:
        s.leave(frame)
    finally:
        _patch_release(frame)


class _NoTypecheck(contextlib.ContextDecorator):
    """The context (and decorator) ``no_typecheck()`` returns."""

    def _recreate_cm(self) -> "_NoTypecheck":
        return _NoTypecheck()  # each decorated call saves its own state

    _frame = None

    def __enter__(self) -> "_NoTypecheck":
        s = self._state = _state()  # the opener's, wherever it is closed
        self._frame = _pause(s) if s.enabled else None
        return self

    def __exit__(self, *exc: Any) -> bool:
        frame, self._frame = self._frame, None
        if frame is not None:
            self._state.leave(frame)
        return False


_F = TypeVar("_F", bound=Callable[..., Any])


@overload
def no_typecheck() -> _NoTypecheck: ...
@overload
def no_typecheck(fn: _F, /) -> _F: ...
@overload
def no_typecheck(*, out_types: Any, in_types: Any = ...) -> Callable[[_F], _F]: ...


def no_typecheck(fn: Optional[Callable[..., Any]] = None, /, **kwargs: Any) -> Any:
    """Pause checking: ``with no_typecheck():``, ``@no_typecheck()``,
    ``@no_typecheck`` or ``no_typecheck(fn)`` (a no-op when checking is off).

    ``no_typecheck(out_types=..., in_types=Infer)`` is instead a decorator
    with ``local_map``'s typed boundary whose body runs unchecked (to stamp
    types on the results of code the checker cannot follow).

    >>> with typecheck(), no_typecheck():
    ...     is_type_checking()
    False
    """
    if fn is not None:
        if not callable(fn) or kwargs:
            raise TypeError("no_typecheck(fn) requires a callable and no type specifications")
        return _NoTypecheck()(fn)
    if kwargs:
        return _typed_region[0](kwargs)
    return _NoTypecheck()


def is_type_checking() -> bool:
    """True inside ``typecheck()`` on this thread and not paused (by
    ``no_typecheck()`` or a ``register_no_typecheck`` function running)."""
    return _state().enabled and not _in_registered_code()


# The code objects given to register_no_typecheck (the core keeps their
# addresses; this keeps them alive).  Empty: nothing is registered, and no
# question is asked.
_registered_codes: set = set()


def _in_registered_code() -> bool:
    """A register_no_typecheck function on this thread's stack, or the
    backward of an op one ran (asked of the shim: the kernel's answer)."""
    return bool(_registered_codes) and ops.unchecked_code_active()


def register_no_typecheck(fn: _F) -> _F:
    """Run every op unchecked while ``fn`` is on this thread's stack, however
    it is reached (an alias, a bound method, a stored callback), without
    wrapping it; returns ``fn``.

    Wrappers are followed through ``__wrapped__`` (``functools.wraps``) to
    the innermost function, whose frame is on the stack whenever a wrapper
    runs it.  A ``typecheck()`` entered inside ``fn`` does not check again.
    Results of its ops are untyped (annotate them with ``assert_type``); the
    backward of those ops runs unchecked too, and gives each input the dual
    of its type as its gradient.  A ``backward()`` called inside ``fn`` is
    unchecked.  Registration lasts for the process.

    >>> def legacy(x):
    ...     return x * 2
    >>> register_no_typecheck(legacy) is legacy
    True
    """
    code = getattr(inspect.unwrap(fn), "__code__", None)
    if not isinstance(code, types.CodeType):
        raise TypeError(f"register_no_typecheck: {fn!r} is not a Python function")
    if code not in _registered_codes:
        ops.unchecked_code_add(code)
        _registered_codes.add(code)
    return fn


def _grad_prehook(ref, cell, index):
    """A pre-hook on the autograd node that produced an annotated tensor:
    checks that the gradient of output ``index`` -- after every tensor hook,
    the user's included, has run -- is the dual of the tensor's type (and
    types a V contribution to a pending sum as P).  cell is [type id at the
    last annotation, description]; the check is one call into the core, a
    no-op when the backward runs unchecked."""

    def hook(grad_outputs):
        g = grad_outputs[index]
        if g is not None:
            ops.grad_watch_check(ref(), cell[0], g, cell[1])

    return hook


class _TypeChecking:
    """Truthy exactly when checking is on: ``if TYPE_CHECKING: ...``."""

    def __bool__(self):
        return is_type_checking()

    def __repr__(self):
        return f"TYPE_CHECKING({is_type_checking()})"


TYPE_CHECKING = _TypeChecking()

