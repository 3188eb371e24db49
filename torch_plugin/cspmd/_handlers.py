"""Checking ops at the Python handlers whose tensors carry cspmd's types.

From torch 2.13 cspmd's dispatch key sits below the Python key, so an op on
a DTensor, a FakeTensor or a LocalTensor, or under FakeTensorMode or
LocalTensorMode, reaches that handler (``__torch_dispatch__``) before the
checker, which would then see only the ops the handler runs inside (each
rank's op under LocalTensorMode, FakeTensorMode's own bookkeeping).  The
first ``typecheck()`` wraps these handlers: the op is checked on the
handler's own operands by the same kernel (``cspmd._C.handler_call``), and
the handler runs with the key off.  On torch 2.10-2.12, where the key sees
the op first and is off while the handler runs, the wrapper checks only
what C++ hands a handler directly, which no key sees: the ``detach`` that
autograd makes of a FakeTensor it saves for backward, say.  Other handlers
(user tensor subclasses, pass-through modes such as CommDebugMode) are not
wrapped: the checker sees the ops they run.
"""

import functools

import torch

from . import _lib

__all__ = ["install"]

_installed = False


def _handlers():
    """(class, attribute is a classmethod) for each wrapped handler."""
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
    from torch.distributed.tensor import DTensor

    out = [(FakeTensorMode, False), (FakeTensor, True), (DTensor, True)]
    try:
        from torch.distributed._local_tensor import LocalTensor, LocalTensorMode
    except ImportError:  # a torch without LocalTensorMode
        return out
    return out + [(LocalTensorMode, False), (LocalTensor, True)]


def _checked(original):
    call = _lib.ops.handler_call
    overload = torch._ops.OpOverload

    @functools.wraps(original)
    def __torch_dispatch__(owner, func, types, args=(), kwargs=None):
        if not isinstance(func, overload):
            return original(owner, func, types, args, kwargs)
        return call(func, tuple(args), dict(kwargs or {}),
                    lambda: original(owner, func, types, args, kwargs))

    return __torch_dispatch__


def install():
    """Wrap the handlers, once."""
    global _installed
    if _installed:
        return
    for cls, is_classmethod in _handlers():
        attr = cls.__dict__["__torch_dispatch__"]
        if is_classmethod:
            cls.__torch_dispatch__ = classmethod(_checked(attr.__func__))
        else:
            cls.__torch_dispatch__ = _checked(attr)
    _installed = True
