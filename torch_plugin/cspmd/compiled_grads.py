"""The backward of a checked torch.compile'd graph (cspmd.compiled).

The compiled backward runs below the checker (inductor's kernels call no
aten op), so the region's gradients are checked on meta tensors instead.
The compiled call runs inside one autograd Function, ``Region``: its forward
calls the compiled code on detached inputs, recording the compiled graph's
own autograd graph; its backward, once the gradients of the outputs have
arrived, runs the captured graph's forward again on meta copies of the
inputs (typed as at the forward call) and torch.autograd computes its
backward on meta tensors under the checker, seeded with gradients of the
types that arrived.  Every backward op is checked as in eager code, and an
error names the line of the forward op whose gradient failed.  Then the
compiled backward runs with the checker paused, and the gradients it gives
the inputs get the types found.  The check is cached by the input and
gradient types.  Double backward through a checked region raises a clear
error.
"""

import torch

from ._errors import SpmdTypeError
from ._graph_check import GraphChecker, flat_outputs, meta_copy
from ._lib import ops
from .checker import _original_grad

__all__ = []

_BACKWARD_NOTE = ("\n  (in the backward of a torch.compile'd function: cspmd checked the "
                  "gradients of the graph Dynamo captured before its compiled backward ran)")


_NO_DOUBLE_BACKWARD = (
    "cspmd: double backward (create_graph=True) through a torch.compile'd function checked "
    "under typecheck() is not supported: its gradients come from the compiled backward. "
    "Check it uncompiled: with torch.compiler.set_stance(\"force_eager\") inside the "
    "typecheck() region")


class GradCall:
    """One checked call whose gradients are recorded: what its backward needs."""

    __slots__ = ("graph", "key", "args", "types", "out_kind")

    def __init__(self, graph, key, args, types):
        self.graph = graph
        self.key = key
        self.args = args    # for shapes, strides, dtypes, requires_grad
        self.types = types  # the input types at the forward call
        self.out_kind = tuple

    def input_grad_types(self, grads):
        """The types of the inputs' gradients given the outputs' gradients
        (None where none arrives); None when the backward runs unchecked."""
        if not ops.checker_state()[2]:
            return None
        got = tuple(None if g is None else ops.get_type(g) for g in grads)
        key = (self.key, got)
        plans = self.graph._grad_plans
        found = plans.get(key)
        if found is None:
            found = plans[key] = check_backward(self, got)
        return found


def check_backward(call, grad_types):
    """The types of the gradients of the call's inputs that require grad,
    from the graph's backward on meta tensors under the checker."""
    metas = [meta_copy(a, t) if isinstance(a, torch.Tensor) else a
             for a, t in zip(call.args, call.types)]
    sites = {}
    with torch.enable_grad():
        outs = flat_outputs(GraphChecker(call.graph._gm, meta=True, sites=sites).run(*metas))
    roots, seeds = [], []
    for o, t in zip(outs, grad_types):
        if t is None or not isinstance(o, torch.Tensor) or not o.requires_grad:
            continue
        seed = torch.empty_like(o, device="meta")
        ops.set_type(seed, t)
        roots.append(o)
        seeds.append(seed)
    wrt = [m for m in metas if isinstance(m, torch.Tensor) and m.requires_grad]
    if not roots:
        return (None,) * len(wrt)
    current = [""]
    handles = [fn.register_prehook(_entering(current, site)) for fn, site in sites.items()]
    try:
        grads = _original_grad(roots, wrt, seeds, allow_unused=True)
    except SpmdTypeError as e:
        note = f"\n  the gradient of the forward op at {current[0]}" if current[0] else ""
        e.context = (e.context or "") + note + _BACKWARD_NOTE
        raise
    finally:
        for h in handles:
            h.remove()
    return tuple(None if g is None else ops.get_type(g) for g in grads)


def _entering(current, site):
    def hook(grad_outputs):
        current[0] = site
    return hook


class Region(torch.autograd.Function):
    """A checked compiled call whose inputs require grad (see the module)."""

    @staticmethod
    def forward(ctx, call, *args):
        ctx.call = call
        ctx.set_materialize_grads(False)
        inner = [a.detach().requires_grad_() if isinstance(a, torch.Tensor) and a.requires_grad
                 else a for a in args]
        with torch.enable_grad():
            out = call.graph._compiled(*inner)
        call.out_kind = type(out)
        outs = list(out) if isinstance(out, (list, tuple)) else [out]
        ctx.wrt = [i for i in inner if isinstance(i, torch.Tensor) and i.requires_grad]
        ctx.outs = outs
        ctx.nargs = len(args)
        ctx.grad_args = [k for k, a in enumerate(args)
                         if isinstance(a, torch.Tensor) and a.requires_grad]
        return tuple(o.detach() if isinstance(o, torch.Tensor) else o for o in outs)

    @staticmethod
    def backward(ctx, *grads):
        if torch.is_grad_enabled():  # create_graph=True
            raise RuntimeError(_NO_DOUBLE_BACKWARD)
        types = ctx.call.input_grad_types(grads)
        roots, seeds = [], []
        for o, g in zip(ctx.outs, grads):
            if g is not None and isinstance(o, torch.Tensor) and o.requires_grad:
                roots.append(o)
                seeds.append(g)
        result = [None] * (1 + ctx.nargs)
        if not roots:
            return tuple(result)
        paused = ops.checker_pause(True)  # the compiled backward, below the checker
        try:
            got = _original_grad(roots, ctx.wrt, seeds, allow_unused=True)
        finally:
            ops.checker_pause(paused)
        for k, g, t in zip(ctx.grad_args, got, types or (None,) * len(got)):
            if g is not None and t is not None:
                g = g.detach()  # an alias: the compiled code may hand one tensor on twice
                ops.set_type(g, t)
            result[1 + k] = g
        return tuple(result)


def run(call, args):
    """The compiled call through Region; the outputs as the compiled code
    returns them (a list or tuple)."""
    outs = Region.apply(call, *args)
    return outs if call.out_kind is tuple else call.out_kind(outs)
