"""The backward of a Function typed by an ``spmd_typecheck`` hook.

The hook declares the forward's typing because the checker cannot follow
the Function's kernel; its backward is the same kind of code (the gradient
of an opaque kernel, a hand-written collective).  So its ops run with
checking paused, and each gradient it returns is typed as the gradient of
that input must be: the dual of the input's type (R -> P, I -> I, V -> V,
P -> R).  The gradients arriving at the Function are checked against the
dual of the outputs' declared types (the watch ``assert_type`` puts on a
non-leaf output), and what the returned gradients meet downstream is
checked as usual.
"""

import torch

from ._codes import TYPE
from ._lib import ops

__all__: list = []

_BackwardNode = torch.autograd.function.BackwardCFunction


def _declared_backward(cls, args, outputs):
    """Record, on the Function's autograd node, the gradient type due for
    each argument of ``cls.apply(*args)``, and route its backward through
    ``_typed_backward``."""
    due = []
    for a in args:
        t = ops.get_type(a) if isinstance(a, torch.Tensor) and a.requires_grad else TYPE.UNTYPED
        due.append(None if t == TYPE.UNTYPED else ops.type_dual(t))
    if all(d is None for d in due):
        return
    flat = outputs if isinstance(outputs, (tuple, list)) else (outputs,)
    for out in flat:
        node = getattr(out, "grad_fn", None) if isinstance(out, torch.Tensor) else None
        if isinstance(node, _BackwardNode) and node._forward_cls is cls:
            node._cspmd_grads_due = tuple(due)
            _wrap(cls)
            return


def _wrap(cls):
    """Put ``_typed_backward`` around the backward torch will call for cls
    (its ``vjp`` if it defines one); once per class.  Nodes recorded without
    a hook pass straight through."""
    base = torch.autograd.Function
    name = "vjp" if cls.vjp is not base.vjp else "backward"
    user = getattr(cls, name)
    if getattr(user, "_cspmd_typed", False):
        return

    def backward(ctx, *grads):
        due = getattr(ctx, "_cspmd_grads_due", None)
        if due is None:
            return user(ctx, *grads)
        prev = ops.checker_pause(True)
        try:
            result = user(ctx, *grads)
        finally:
            ops.checker_pause(prev)
        return _typed(result, due)

    backward._cspmd_typed = True
    backward.__wrapped__ = user
    setattr(cls, name, staticmethod(backward))


def _typed(result, due):
    """The gradients with their due types; a gradient that already carries
    a type (an incoming gradient passed through) is typed on an alias, so
    the tensor other nodes hold keeps its own."""
    single = not isinstance(result, tuple)
    grads = list((result,) if single else result)
    for i, g in enumerate(grads):
        if i >= len(due) or due[i] is None or not isinstance(g, torch.Tensor):
            continue
        if ops.get_type(g) != TYPE.UNTYPED:
            prev = ops.checker_pause(True)
            try:
                g = g.view_as(g)
            finally:
                ops.checker_pause(prev)
        ops.set_type(g, due[i])
        grads[i] = g
    return grads[0] if single else tuple(grads)
