"""Running a torch.compile'd function's captured FX graph under the checker
(cspmd.compiled): on meta copies of the inputs that carry their types, or
on the real inputs (op by op, as eager code); each node's errors name the
line of the user's source it came from (the graph's stack traces)."""

import torch
import torch.fx

from . import _frames
from ._errors import SpmdTypeError
from ._lib import ops

__all__ = ["GraphChecker", "meta_copy", "flat_outputs"]


def meta_copy(t, type_id=None):
    """t on the meta device (same sizes, strides, dtype, requires_grad), typed
    as t or as type_id."""
    m = torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device="meta",
                            requires_grad=t.requires_grad)
    ops.set_type(m, ops.get_type(t) if type_id is None else type_id)
    return m


_COMPILED_NOTE = ("\n  (in a torch.compile'd function: cspmd checked the graph Dynamo captured "
                  "before running it compiled)")


class GraphChecker(torch.fx.Interpreter):
    """Runs the graph under the checker; each node's errors name its line.
    ``sites``, if given, collects {grad_fn: line} of the nodes' results."""

    def __init__(self, gm, meta, sites=None):
        super().__init__(gm, garbage_collect_values=True)
        self._meta = meta
        self._sites = sites
        self.extra_traceback = False  # the error names the node's line itself

    def run_node(self, n):
        trace = n.meta.get("stack_trace")
        site = _frames.user_site_of_stack(trace.splitlines()) if trace else ""
        with _frames.site_override(site):
            try:
                result = super().run_node(n)
                if self._sites is not None and site:
                    for r in flat_outputs(result):
                        fn = r.grad_fn if isinstance(r, torch.Tensor) else None
                        if fn is not None:
                            self._sites.setdefault(fn, site)
                return result
            except SpmdTypeError as e:
                text = str(e)
                if _COMPILED_NOTE not in text:
                    # The kernel's errors name the site; assert_type's do not.
                    note = _COMPILED_NOTE if not site or site in text else (
                        f"\n  at {site}" + _COMPILED_NOTE)
                    e.context = e.context + note if e.context else note.lstrip("\n")
                raise

    def get_attr(self, target, args, kwargs):
        value = super().get_attr(target, args, kwargs)
        if self._meta and isinstance(value, torch.Tensor):
            return meta_copy(value)
        return value


def flat_outputs(out):
    return list(out) if isinstance(out, (list, tuple)) else [out]


def flat_outputs(out):
    return list(out) if isinstance(out, (list, tuple)) else [out]
