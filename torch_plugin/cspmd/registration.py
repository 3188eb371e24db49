"""Autograd Function registration and module backward hooks.

cspmd needs no registration to *check* a custom ``torch.autograd.Function``:
its forward and backward ops reach the C kernel like any other op, so an
unregistered Function is checked op by op (the reference raises for it in
strict mode).  The registration APIs keep their meaning for code written for
``spmd_types``:

- a ``spmd_typecheck`` staticmethod on a Function declares its typing:
  ``Cls.apply`` runs the forward with checking paused, then the hook
  (``cspmd.rules.run_typecheck``: the hook's rules, stamping, coverage);
  the Function's backward runs paused and its gradients take the dual of
  their inputs' types (``cspmd._hook_backward``);
- ``register_autograd_function`` with a legacy ``typecheck_forward`` makes
  ``Cls.apply`` call it instead (it calls ``Cls.apply`` itself, which then
  runs for real, checked);
- ``register_decomposition(cls, ref_impl)`` types the Function by its
  reference implementation: ``ref_impl`` runs, checked, on typed copies of
  the inputs, the real ``apply`` runs unchecked, and the reference outputs'
  types are stamped on the real outputs;
- ``register_local_autograd_function`` marks a Function as typed like an
  ordinary op, which cspmd does anyway.

``Function.apply`` is patched only while ``typecheck()`` is active.
"""

import threading
from typing import Any

import torch

from ._errors import SpmdTypeError
from ._lib import ops
from .checker import _register_patch
from ._hook_backward import _declared_backward
from .rules import run_typecheck

__all__ = ["register_autograd_function", "register_decomposition",
           "register_local_autograd_function", "register_local_backward_hook"]

_typecheck_forward = {}      # cls -> legacy typecheck_forward(*args, **kwargs)
_local_functions = set()     # classes registered with register_local_autograd_function
_local_hooks = set()         # hooks registered with register_local_backward_hook
_tls = threading.local()


def _check_function_class(cls, fn):
    if not (isinstance(cls, type) and issubclass(cls, torch.autograd.Function)):
        raise TypeError(f"{fn}: expected a torch.autograd.Function subclass, got {cls!r}")


def register_autograd_function(cls: Any) -> Any:
    """Class decorator: ``cls`` types itself with exactly one of a
    ``typecheck_forward`` (legacy: replaces ``apply`` while checking) or a
    ``spmd_typecheck`` staticmethod.  Returns ``cls``.

    >>> @register_autograd_function  # doctest: +SKIP
    ... class MyFn(torch.autograd.Function): ...
    """
    _check_function_class(cls, "register_autograd_function")
    tf = cls.__dict__.get("typecheck_forward", getattr(cls, "typecheck_forward", None))
    hook = getattr(cls, "spmd_typecheck", None)
    if isinstance(tf, staticmethod):
        tf = tf.__func__
    if tf is not None and hook is not None:
        raise TypeError(f"{cls.__name__}: cannot define typecheck_forward together with "
                        "spmd_typecheck")
    if tf is None and hook is None:
        raise TypeError(f"{cls.__name__}: register_autograd_function requires a callable "
                        "typecheck_forward or spmd_typecheck staticmethod")
    if tf is not None:
        if not callable(tf):
            raise TypeError(f"{cls.__name__}.typecheck_forward must be callable")
        _typecheck_forward[cls] = tf
    elif not callable(hook):
        raise TypeError(f"{cls.__name__}.spmd_typecheck must be callable")
    return cls


def register_local_autograd_function(cls: Any) -> Any:
    """Class decorator: ``cls.apply`` is typed like an ordinary op.  cspmd
    checks every Function's ops anyway; this records the intent.

    >>> @register_local_autograd_function  # doctest: +SKIP
    ... class Gelu(torch.autograd.Function): ...
    """
    _check_function_class(cls, "register_local_autograd_function")
    _local_functions.add(cls)
    return cls


def register_decomposition(cls: Any, ref_impl: Any = None) -> Any:
    """Type ``cls`` by a reference implementation made of ordinary ops.

    ``register_decomposition(Cls, ref)`` returns ``ref``; with one argument
    it returns a decorator.  While checking, ``Cls.apply(*args)`` runs
    ``ref(*copies)`` on typed copies of the tensor arguments (checked op by
    op, so type errors surface there), then the real ``apply`` (unchecked),
    and stamps each reference output's type and spec on the real output.

    >>> @register_decomposition(FusedGelu)  # doctest: +SKIP
    ... def gelu_ref(x): return torch.nn.functional.gelu(x)
    """
    _check_function_class(cls, "register_decomposition")

    def register(ref):
        if not callable(ref):
            raise TypeError(f"register_decomposition: ref_impl must be callable, got "
                            f"{type(ref).__name__}")

        def typecheck_forward(*args, **kwargs):
            return _run_decomposition(cls, ref, args, kwargs)

        _typecheck_forward[cls] = typecheck_forward
        return ref

    return register if ref_impl is None else register(ref_impl)


def register_local_backward_hook(fn: Any) -> Any:
    """Declare a module backward hook type-neutral (it does not change the
    gradients' SPMD types); returns ``fn``.  Unregistered full backward hooks
    and backward pre-hooks raise SpmdTypeError when the module runs under
    checking.

    >>> @register_local_backward_hook  # doctest: +SKIP
    ... def log_grad(module, grad_in, grad_out): ...
    """
    if not callable(fn):
        raise TypeError(f"register_local_backward_hook: expected a callable, got "
                        f"{type(fn).__name__}")
    _local_hooks.add(fn)
    return fn


# ---- the apply interception (installed by typecheck()) ------------------

_BackwardHook = torch.utils.hooks.BackwardHook


def _copy_typed(x):
    if not isinstance(x, torch.Tensor):
        return x
    from .checker import no_typecheck
    with no_typecheck():
        c = x.detach().clone()
    ops.set_type(c, ops.get_type(x))
    return c


def _run_decomposition(cls, ref, args, kwargs):
    from torch.utils import _pytree as pytree

    from .checker import no_typecheck
    from .runtime import assert_type, get_local_type, get_partition_spec, has_local_type
    copies = pytree.tree_map(_copy_typed, (args, kwargs))
    with torch.no_grad():
        ref_out = ref(*copies[0], **copies[1])
    with no_typecheck():
        real_out = cls.apply(*args, **kwargs)
    ref_leaves, ref_spec = pytree.tree_flatten(ref_out)
    real_leaves, real_spec = pytree.tree_flatten(real_out)
    if ref_spec != real_spec:
        raise SpmdTypeError(f"{cls.__name__}: decomposition output tree does not match the real "
                            f"output tree: {ref_spec} vs {real_spec}")
    for r, o in zip(ref_leaves, real_leaves):
        if not isinstance(r, torch.Tensor) or not isinstance(o, torch.Tensor):
            continue
        spec = get_partition_spec(r)
        if not has_local_type(r) and spec is None:
            continue
        assert_type(o, get_local_type(r), spec)
    return real_out


def _hook_of(cls):
    """cls's spmd_typecheck hook, or None.  Hooks on torch's own Functions
    (the reference sets some on BackwardHookFunction and _NoopSaveInputs)
    are not used: cspmd types those Functions op by op."""
    hook = getattr(cls, "spmd_typecheck", None)
    if hook is None or (cls.__module__ or "").startswith("torch."):
        return None
    if not callable(hook):
        raise TypeError(f"{cls.__name__}.spmd_typecheck must be callable")
    return hook


def _unchecked(inner):
    """The real apply, with checking paused: the hook types the outputs."""
    from .checker import no_typecheck

    def run(*args):
        with no_typecheck():
            return inner(*args)
    return run


def _checked_apply(cls, *args, **kwargs):
    from .checker import is_type_checking
    inner = _inner_apply(cls)
    if not is_type_checking():
        return inner(*args, **kwargs)
    tf = _typecheck_forward.get(cls)
    inside = getattr(_tls, "inside", None)
    if inside is None:
        inside = _tls.inside = set()
    if tf is not None and cls not in inside:
        inside.add(cls)
        declaring = _declaring_stack()
        declaring.append([])
        try:
            return tf(*args, **kwargs)
        finally:
            declaring.pop()
            inside.discard(cls)
    if tf is not None:
        # typecheck_forward calling the real apply: its outputs are what
        # the Function declares types for.
        outputs = inner(*args, **kwargs)
        stack = _declaring_stack()
        if stack:
            from torch.utils import _pytree as pytree
            stack[-1].extend(t for t in pytree.tree_leaves(outputs)
                             if isinstance(t, torch.Tensor))
        return outputs
    hook = _hook_of(cls)
    if hook is None or cls in inside:
        return inner(*args, **kwargs)
    if kwargs:
        raise TypeError(f"{cls.__name__}.apply() accepts positional arguments only")
    outputs = run_typecheck(cls, _unchecked(inner), args)
    _declared_backward(cls, args, outputs)
    return outputs


def _declaring_stack():
    from . import runtime
    stack = getattr(runtime._declaring, "stack", None)
    if stack is None:
        stack = runtime._declaring.stack = []
    return stack


_patched_apply = classmethod(_checked_apply)


def _unregistered(hooks):
    for h in hooks or ():
        if h not in _local_hooks and getattr(h, "__func__", None) not in _local_hooks:
            return h
    return None


def _hook_error(h):
    name = getattr(h, "__qualname__", None) or repr(h)
    return SpmdTypeError(f"Backward hook '{name}' attached to nn.Module is not registered for "
                         "SPMD type propagation.  Call register_local_backward_hook(fn) if the "
                         "hook does not alter gradient SPMD types.")


def _setup_input_hook(self, args):
    from .checker import is_type_checking
    if is_type_checking():
        bad = _unregistered(self.user_hooks)
        if bad is not None:
            raise _hook_error(bad)
    return _inner_hook("setup_input_hook", self)(args)


def _setup_output_hook(self, args):
    from .checker import is_type_checking
    if is_type_checking():
        bad = _unregistered(self.user_pre_hooks)
        if bad is not None:
            raise _hook_error(bad)
    return _inner_hook("setup_output_hook", self)(args)


_PATCHED = ((torch.autograd.Function, "apply", _patched_apply),
            (_BackwardHook, "setup_input_hook", _setup_input_hook),
            (_BackwardHook, "setup_output_hook", _setup_output_hook))
# What ours wraps (torch's, or a patch another library installed before the
# region), and a patch another library put over ours inside a region (it
# wraps ours, so it stays, and the next region keeps it on top).
_inner = {name: owner.__dict__[name] for owner, name, _ in _PATCHED}
_left_over = {name: None for _, name, _ in _PATCHED}


def _inner_apply(cls):
    """The wrapped Function.apply, bound to cls as `cls.apply` binds it."""
    return _inner["apply"].__get__(None, cls)


def _inner_hook(name, hook):
    """The wrapped BackwardHook method, bound to hook."""
    return _inner[name].__get__(hook, _BackwardHook)


def _patch_apply(on):
    """Install (on) or remove the Function.apply and module-hook checks:
    on while any typecheck() region is open (cspmd.checker's patch hooks).
    Ours wraps whatever was there.  Removing restores it only where ours is
    still in place: a patch another library put over ours inside the region
    stays, and is left on top by the next region."""
    for owner, name, ours in _PATCHED:
        current = owner.__dict__.get(name)
        if on and current is not ours and current is not _left_over[name]:
            _inner[name] = current
            setattr(owner, name, ours)
        elif not on:
            if current is ours:
                setattr(owner, name, _inner[name])
                _left_over[name] = None
            else:
                _left_over[name] = current


_register_patch(lambda: _patch_apply(True), lambda: _patch_apply(False))
