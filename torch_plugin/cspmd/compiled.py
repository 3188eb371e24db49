"""Checking torch.compile'd code: the graph Dynamo captures is checked, then
runs compiled.

While a ``typecheck()`` region is open, two of Dynamo's steps are wrapped:

- tracing a frame runs with the kernel paused (Dynamo traces on fake
  tensors that carry no types) but cspmd's key still included, so the
  guards Dynamo records -- they include the thread's dispatch keys -- match
  checked calls only: code compiled with checking off is recompiled under
  ``typecheck()`` and the other way round;
- the backend call: the graph (with the annotations ``assert_type`` made
  while it was traced, as marker nodes) is kept for checking, the markers
  are removed, and the user's backend compiles the rest.

The compiled callable then checks its graph the first time it sees a tuple
of input types: every node runs on meta copies of the inputs that carry the
inputs' types, through the C kernel (which decides every type), and an
error names the node's line in the user's source.  The result -- the output
types and the types of inputs the graph retyped -- is cached by the input
types, so a later call costs one dict lookup; the compiled code runs with
checking paused and its outputs get their types.  While gradients are
recorded, the call runs inside an autograd Function whose backward checks
the graph's backward on meta tensors before the compiled backward runs
(cspmd.compiled_grads).  See docs/testing.md.
"""

from typing import List

import torch
import torch.fx

from . import compiled_grads
from . import _compile_markers
from ._compile_markers import _tracing, is_marker
from ._errors import SpmdTypeError
from ._graph_check import GraphChecker, flat_outputs, meta_copy
from ._lib import ops
from .checker import _register_patch, _state, no_typecheck
from .mesh import _current

__all__: List[str] = []


class _Plan:
    """What one tuple of input types gives: the output types, the inputs the
    graph retyped (in-place ops, annotations of inputs), or eager: the graph
    runs op by op under the checker (it cannot run on meta tensors, or it
    writes in place to an input whose gradient is recorded)."""

    __slots__ = ("outputs", "inputs", "eager")

    def __init__(self, outputs, inputs, eager):
        self.outputs = outputs
        self.inputs = inputs
        self.eager = eager


_EAGER = _Plan((), (), eager=True)


class CheckedGraph:
    """The callable Dynamo installs for a graph traced for a checked call."""

    def __init__(self, check_gm, compiled_fn, dynamic):
        self._gm = check_gm
        self._compiled = compiled_fn
        self._dynamic = dynamic
        self._plans = {}  # one dict store per new key: no lock under the GIL
        self._grad_plans = {}  # (key, gradient types) -> input gradient types

    def _key(self, args, grads, recorded):
        """(key, input types): the key is what the check depends on."""
        types = [ops.get_type(a) if isinstance(a, torch.Tensor) else None for a in args]
        key = [_state().strict, _current(), grads, recorded]
        for a, t in zip(args, types):
            if t is not None:
                key.append(t)
                if recorded:
                    key.append(a.requires_grad)
                if self._dynamic:
                    key.append(tuple(a.shape))
            elif self._dynamic:
                key.append(a)
        return tuple(key), types

    def _check(self, args, grads, recorded):
        """The plan for args; grads: the call runs through Region; recorded:
        eager code would record and check gradients."""
        metas = [meta_copy(a) if isinstance(a, torch.Tensor) else a for a in args]
        before = [(ops.get_type(m), m._version) if isinstance(m, torch.Tensor) else None
                  for m in metas]
        try:
            out = GraphChecker(self._gm, meta=True).run(*metas)
        except SpmdTypeError:
            raise
        except Exception:  # an op without a meta kernel, data-dependent code
            return _EAGER
        if grads and any(b is not None and m.requires_grad and m._version != b[1]
                         for m, b in zip(metas, before)):
            return _EAGER  # Region's detached inputs cannot be written in place
        if recorded and not grads and any(isinstance(o, torch.Tensor) and o.requires_grad
                                          for o in flat_outputs(out)):
            return _EAGER  # gradients of tensors that are not inputs (attributes)
        outputs = [ops.get_type(o) if isinstance(o, torch.Tensor) else None
                   for o in flat_outputs(out)]
        inputs = [(i, ops.get_type(m)) for i, m in enumerate(metas)
                  if isinstance(m, torch.Tensor) and ops.get_type(m) != before[i][0]]
        return _Plan(outputs, inputs, eager=False)

    def __call__(self, *args):
        s = _state()
        if not s.enabled:
            return self._compiled(*args)  # checking off on this thread
        recorded = s.backward and torch.is_grad_enabled()
        grads = recorded and any(isinstance(a, torch.Tensor) and a.requires_grad for a in args)
        key, types = self._key(args, grads, recorded)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = self._check(args, grads, recorded)
        if plan.eager:
            return GraphChecker(self._gm, meta=False).run(*args)
        with no_typecheck():
            if grads:
                out = compiled_grads.run(compiled_grads.GradCall(self, key, args, types), args)
            else:
                out = self._compiled(*args)
        for o, t in zip(flat_outputs(out), plan.outputs):
            if t is not None and isinstance(o, torch.Tensor):
                ops.set_type(o, t)
        for i, t in plan.inputs:
            ops.set_type(args[i], t)
        return out


# The Dynamo hooks -----------------------------------------------------------

def _split_markers(gm):
    """(a copy of the graph with the markers, for checking; the graph
    without them, for the backend), both GraphModules."""
    graph = torch.fx.Graph()
    out = graph.graph_copy(gm.graph, {})
    graph.output(out)
    check_gm = torch.fx.GraphModule(gm, graph)
    for node in list(gm.graph.nodes):
        if is_marker(node):
            gm.graph.erase_node(node)
    gm.recompile()
    return check_gm


def _is_dynamic(example_inputs):
    for a in example_inputs:
        if isinstance(a, torch.Tensor):
            if any(not isinstance(s, int) for s in a.shape):
                return True
        elif isinstance(a, torch.SymInt):
            return True
    return False


def _wrap_compile(original):
    def compile_frame(*args, **kwargs):
        if not ops.checker_state()[2]:
            return original(*args, **kwargs)
        paused = ops.checker_pause(True)
        _tracing[0] += 1
        try:
            return original(*args, **kwargs)
        finally:
            _tracing[0] -= 1
            ops.checker_pause(paused)

    compile_frame._cspmd_original = original
    return compile_frame


def _wrap_call_user_compiler(original):
    def call_user_compiler(self, gm, example_inputs):
        if not _tracing[0]:
            return original(self, gm, example_inputs)
        check_gm = _split_markers(gm)
        # The backend compiles with the key off too: torch's Python
        # dispatcher, which inductor turns on, cannot resolve ops without
        # tensor arguments on a key it does not know.
        with no_typecheck():
            compiled = original(self, gm, example_inputs)
        return CheckedGraph(check_gm, compiled, _is_dynamic(example_inputs))

    call_user_compiler._cspmd_original = original
    return call_user_compiler


class _Hooks:
    """Installed while any typecheck() region is open.  Both steps are
    idempotent (checker._switch may run a step twice)."""

    def on(self):
        from torch._dynamo import convert_frame, output_graph
        _compile_markers.install()
        if not hasattr(convert_frame._compile, "_cspmd_original"):
            convert_frame._compile = _wrap_compile(convert_frame._compile)
        og = output_graph.OutputGraph
        if not hasattr(og.call_user_compiler, "_cspmd_original"):
            og.call_user_compiler = _wrap_call_user_compiler(og.call_user_compiler)

    def off(self):
        from torch._dynamo import convert_frame, output_graph
        while hasattr(convert_frame._compile, "_cspmd_original"):
            convert_frame._compile = convert_frame._compile._cspmd_original
        og = output_graph.OutputGraph
        while hasattr(og.call_user_compiler, "_cspmd_original"):
            og.call_user_compiler = og.call_user_compiler._cspmd_original


hooks = _Hooks()
_register_patch(hooks.on, hooks.off)
