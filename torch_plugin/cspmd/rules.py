"""Typing rules for ``spmd_typecheck`` hooks on custom autograd Functions.

A ``torch.autograd.Function`` that wraps an opaque kernel (Triton, a fused
C++ op) or does its own communication declares its typing in an
``spmd_typecheck`` staticmethod, written as a type-level forward composed
from the operations here: ``einsum`` (the sharding rule of an
einsum-shaped computation), the type-only collectives and transitions
(``all_reduce``, ``all_gather``, ``reduce_scatter``, ``all_to_all``,
``reinterpret``, ``convert``), ``ignore`` for arguments that do not affect
the value, and ``output`` to stamp outputs.  Intermediate values are
``NdimWithSpmdType`` (a rank and a type).  The type decisions are the C
core's (``cspmd_rules_einsum``, ``cspmd_rules_transition``); this module
parses arguments and moves types on and off values.

Every hook is coverage checked: each tensor argument of ``forward`` must
reach a rule, ``assert_type`` or ``ignore``, and every output must end up
typed.  Guide: docs/custom-functions.md.

>>> class LinearAllReduce(torch.autograd.Function):  # doctest: +SKIP
...     @staticmethod
...     def spmd_typecheck(*, x, weight, group):
...         y = einsum("mk,nk->mn", x, weight)
...         return all_reduce(y, group, src=P, dst=I)
"""

import functools
import inspect
import weakref
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import torch
from torch.utils._pytree import tree_flatten

from ._codes import COLL, TYPE
from ._coverage import _coverage, _touch
from ._errors import SpmdTypeError
from ._lib import ops
from ._ndim_type import NdimWithSpmdType
from .mesh import current_mesh, normalize_axis
from .runtime import (_get_type, _set_type, _watch_gradient, assert_type, get_local_type,
                      get_partition_spec)
from .types import P, PerMeshAxisLocalSpmdType, Shard, V, ltype_code

__all__ = ["NdimWithSpmdType", "all_gather", "all_reduce", "all_to_all", "bind_forward_args",
           "convert", "einsum", "hook_kwargs", "hook_shape", "ignore", "output",
           "reduce_scatter", "reinterpret", "run_typecheck"]

_Value = Union[torch.Tensor, NdimWithSpmdType]


def _typed_value(value: object) -> bool:
    return isinstance(value, (torch.Tensor, NdimWithSpmdType))


def _make(ndim: int, type_id: int) -> NdimWithSpmdType:
    d = NdimWithSpmdType(ndim)
    d._cspmd_type = type_id
    return d


def _on_current_mesh(value: _Value, what: str) -> _Value:
    """``value``, or a stand-in retagged onto the current mesh when it is
    typed on another presentation of the same ranks (an opaque kernel's
    operands reach the hook directly, never through an op that retags)."""
    t = _get_type(value)
    if current_mesh() is None or t == TYPE.UNTYPED:
        return value
    try:
        moved = ops.type_to_mesh(t, 0)
    except SpmdTypeError as e:
        raise SpmdTypeError(f"{what}: {e.args[0] if e.args else e}") from None
    return value if moved == t else _make(value.ndim, moved)


def ignore(*tensors: torch.Tensor) -> None:
    """Declare tensors that take no part in the forward value (for example
    tensors saved only for backward): they satisfy the coverage check.

    >>> ignore(torch.zeros(1))
    """
    _touch(*tensors)


# ---- einsum ----------------------------------------------------------------

_ELLIPSIS, _OPAQUE = -1, -2  # CSPMD_EINSUM_ELLIPSIS, CSPMD_EINSUM_OPAQUE


def _term(text: str, equation: str) -> List[int]:
    """One term's label codes: a letter (any script) is its code point."""
    if not text.strip():
        raise TypeError(f"rules.einsum: empty operand in {equation!r}")
    codes: List[int] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch.isspace():
            i += 1
        elif text.startswith("...", i):
            codes.append(_ELLIPSIS)
            i += 3
        elif ch == "_":
            codes.append(_OPAQUE)
            i += 1
        elif ch.isalpha():
            codes.append(ord(ch))
            i += 1
        else:
            raise TypeError(f"rules.einsum: unexpected {ch!r} in {equation!r}; labels are "
                            f"single letters (any script), '_' or '...'")
    if codes.count(_ELLIPSIS) > 1:
        raise TypeError(f"rules.einsum: operand {text.strip()!r} has two '...' in {equation!r}")
    letters = [c for c in codes if c >= 0]
    if len(letters) != len(set(letters)):
        raise TypeError(f"rules.einsum: operand {text.strip()!r} repeats a label in "
                        f"{equation!r}; repeated labels (diagonals) are not supported")
    return codes


def _parse(equation: str) -> Tuple[Tuple[int, ...], Tuple[int, ...], Tuple[int, ...]]:
    """(every input term's label codes, flattened; each term's length; the
    output's codes).  Memoised: a hook runs on every apply."""
    if not isinstance(equation, str):
        raise TypeError(f"rules.einsum: equation {equation!r} must contain exactly one '->'")
    return _parse_text(equation)


@functools.lru_cache(maxsize=256)
def _parse_text(equation: str) -> Tuple[Tuple[int, ...], Tuple[int, ...], Tuple[int, ...]]:
    if equation.count("->") != 1:
        raise TypeError(f"rules.einsum: equation {equation!r} must contain exactly one '->'")
    lhs, rhs = equation.split("->")
    if "," in rhs:
        raise TypeError(f"rules.einsum: {equation!r} lists several outputs; write one "
                        "rules.einsum per output instead")
    inputs = [_term(t, equation) for t in lhs.split(",")]
    out = [] if not rhs.strip() else _term(rhs, equation)
    seen = {c for term in inputs for c in term}
    for c in out:
        if c >= 0 and c not in seen:
            raise TypeError(f"rules.einsum: output label {chr(c)!r} does not appear on any "
                            f"input in {equation!r}")
    if _ELLIPSIS in out and _ELLIPSIS not in seen:
        raise TypeError(f"rules.einsum: output uses '...' but no input does in {equation!r}")
    return (tuple(c for term in inputs for c in term), tuple(len(t) for t in inputs),
            tuple(out))


def _linear_groups(linear_in: Sequence[Any], n: int) -> List[int]:
    """linear_in as a group id per operand (-1: none)."""
    group = [-1] * n
    for g, entry in enumerate(linear_in):
        members = (entry,) if isinstance(entry, int) else tuple(entry)
        for i in members:
            if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < n:
                raise TypeError(f"rules.einsum: linear_in refers to operand {i!r}; there are "
                                f"{n} operand(s)")
            if group[i] != -1:
                raise TypeError(f"rules.einsum: operand {i} appears twice in linear_in")
            group[i] = g
    return group


def einsum(equation: str, *operands: _Value, linear_in: Sequence[Union[int, Sequence[int]]] = (),
           out: Optional[torch.Tensor] = None) -> _Value:
    """The type of an einsum-shaped computation over tensors or
    ``NdimWithSpmdType`` values.

    ``equation`` is einsum notation with one-letter labels, ``_`` for a dim
    that must not be sharded and ``...`` for dims passed through; a scalar
    output is an empty right-hand side.  One output per call.  Per global
    mesh axis (every axis when no ``typecheck()`` is on; none in local
    mode), from the operands' partition specs: a sharded label that
    reaches the output keeps its sharding, a sharded label contracted away
    makes the output P, an operand without a sharded label must not be V on
    its axis, and a label is sharded alike everywhere.  Other axes follow
    the non-linear op rule (R with V is V; I does not mix).  A P operand
    passes only if the op is declared linear in it: ``linear_in=(0, 1)``
    multilinear, ``((0, 1),)`` jointly linear (``add``); every other
    operand must then be R there.  With ``out=``, the type is stamped on
    that tensor, which is returned.

    >>> from cspmd.mesh import MeshAxis
    >>> from cspmd.types import PartitionSpec, V
    >>> tp = MeshAxis.of(4, 1)
    >>> x = assert_type(NdimWithSpmdType(2), {tp: V}, partition_spec=PartitionSpec(None, tp))
    >>> w = assert_type(NdimWithSpmdType(2), {tp: V}, partition_spec=PartitionSpec(None, tp))
    >>> einsum("mk,nk->mn", x, w)
    NdimWithSpmdType(ndim=2, {MeshAxis(4:1): P})
    """
    labels, counts, out_labels = _parse(equation)
    if len(operands) != len(counts):
        raise TypeError(f"rules.einsum: {equation!r} has {len(counts)} operand(s) but "
                        f"{len(operands)} value(s) were passed")
    groups = _linear_groups(linear_in, len(operands))
    for v in operands:
        if not _typed_value(v):
            raise TypeError(f"rules.einsum: operands must be tensors or NdimWithSpmdType, got "
                            f"{type(v).__name__}; write a separate rule for the None case")
    _touch(*operands)
    operands = tuple(_on_current_mesh(v, f"rules.einsum: {equation!r}: operand {i}")
                     for i, v in enumerate(operands))
    type_id, ndim = ops.rules_einsum(equation, labels, counts, [v.ndim for v in operands],
                                     [_get_type(v) for v in operands], groups, out_labels)
    return _finish(_make(ndim, type_id), out)


def _finish(result: NdimWithSpmdType, out: Optional[torch.Tensor]) -> _Value:
    if out is None:
        return result
    output(out, result)
    return out


# ---- type-only collectives and transitions -----------------------------------

def _transition(kind: str, x: _Value, axis: Any, src: Any, dst: Any,
                out: Optional[torch.Tensor]) -> _Value:
    for t in (src, dst):
        if not isinstance(t, (PerMeshAxisLocalSpmdType, Shard)):
            raise TypeError(f"rules.{kind}: src and dst must be R, I, V, P or S(i); got "
                            f"src={src!r}, dst={dst!r}")
    if not _typed_value(x):
        raise TypeError(f"rules.{kind}: expected a tensor or NdimWithSpmdType, got "
                        f"{type(x).__name__}")
    _touch(x)
    given = x
    no_grad = isinstance(x, torch.Tensor) and not (torch.is_grad_enabled() and x.requires_grad)
    mesh_axis = normalize_axis(axis)
    call = f"rules.{kind}({mesh_axis!r}, src={src!r}, dst={dst!r})"
    if mesh_axis not in get_local_type(x):
        x = _on_current_mesh(x, call)  # an axis x has names x's own mesh: no retag then
    ndim = x.ndim

    def code(t):
        if not isinstance(t, Shard):
            return ltype_code(t), -1
        d = t.dim + ndim if t.dim < 0 else t.dim
        if d < 0:
            raise SpmdTypeError(f"S({t.dim}) is out of bounds for tensor with ndim={ndim}")
        return ltype_code(t), d

    (s_lt, s_dim), (d_lt, d_dim) = code(src), code(dst)
    if mesh_axis.size() > 1:
        # An axis x lacks is established as src (as the real collective
        # would); a plain V gets src's shard dim the same way.
        if mesh_axis not in get_local_type(x) or (
                s_dim >= 0 and _shard_dim(get_partition_spec(x), mesh_axis) is None):
            assert_type(x, {mesh_axis: src})
    type_id, new_ndim = ops.rules_transition(getattr(COLL, kind.upper()), mesh_axis.id,
                                             (s_lt, s_dim), (d_lt, d_dim), _get_type(x), ndim,
                                             no_grad)
    if out is not None and (out is x or out is given) and out.ndim == new_ndim:
        _set_type(out, type_id)  # in place: the buffer itself takes the new type
    return _finish(_make(new_ndim, type_id), out)


def _shard_dim(spec: Any, axis: Any) -> Optional[int]:
    for d, entry in enumerate(spec or ()):
        if entry is not None and axis in (entry if isinstance(entry, tuple) else (entry,)):
            return d
    return None


def all_reduce(x: _Value, axis: Any, *, src: Any = P, dst: Any,
               out: Optional[torch.Tensor] = None) -> _Value:
    """Type of ``all_reduce(x, axis, src=, dst=)``: P|V -> R|I.  A V value
    must be reduced with ``src=V`` (the reinterpret is then on record).

    >>> from cspmd.mesh import MeshAxis
    >>> from cspmd.types import I
    >>> tp = MeshAxis.of(4, 1)
    >>> all_reduce(assert_type(NdimWithSpmdType(1), {tp: P}), tp, dst=I)
    NdimWithSpmdType(ndim=1, {MeshAxis(4:1): I})
    """
    return _transition("all_reduce", x, axis, src, dst, out)


def all_gather(x: _Value, axis: Any, *, src: Any = V, dst: Any,
               out: Optional[torch.Tensor] = None) -> _Value:
    """Type of ``all_gather(x, axis, src=, dst=)``: V|S(i) -> R|I; from V
    the result gains a leading dim (stack), from S(i) the rank is kept.

    >>> from cspmd.mesh import MeshAxis
    >>> from cspmd.types import R
    >>> tp = MeshAxis.of(4, 1)
    >>> all_gather(assert_type(NdimWithSpmdType(1), {tp: V}), tp, dst=R)
    NdimWithSpmdType(ndim=2, {MeshAxis(4:1): R})
    """
    return _transition("all_gather", x, axis, src, dst, out)


def reduce_scatter(x: _Value, axis: Any, *, src: Any = P, dst: Any = V,
                   out: Optional[torch.Tensor] = None) -> _Value:
    """Type of ``reduce_scatter(x, axis, src=, dst=)``: P|V -> V|S(i); to V
    dim 0 is unbound across ranks (one dim fewer), to S(i) the rank is kept.

    >>> from cspmd.mesh import MeshAxis
    >>> tp = MeshAxis.of(4, 1)
    >>> reduce_scatter(assert_type(NdimWithSpmdType(2), {tp: P}), tp)
    NdimWithSpmdType(ndim=1, {MeshAxis(4:1): V})
    """
    return _transition("reduce_scatter", x, axis, src, dst, out)


def all_to_all(x: _Value, axis: Any, *, src: Any = V, dst: Any = V,
               out: Optional[torch.Tensor] = None) -> _Value:
    """Type of ``all_to_all(x, axis, src=, dst=)``: V|S(i) -> V|S(j).

    >>> from cspmd.mesh import MeshAxis
    >>> from cspmd.types import S
    >>> tp = MeshAxis.of(4, 1)
    >>> all_to_all(assert_type(NdimWithSpmdType(2), {tp: S(0)}), tp, src=S(0), dst=S(1))
    NdimWithSpmdType(ndim=2, {MeshAxis(4:1): V} PartitionSpec(None, MeshAxis(4:1)))
    """
    return _transition("all_to_all", x, axis, src, dst, out)


def reinterpret(x: _Value, axis: Any, *, src: Any, dst: Any,
                out: Optional[torch.Tensor] = None) -> _Value:
    """Type of ``reinterpret(x, axis, src=, dst=)``: no communication, the
    local data unchanged, its meaning may change (e.g. V -> P).

    >>> from cspmd.mesh import MeshAxis
    >>> tp = MeshAxis.of(4, 1)
    >>> reinterpret(assert_type(NdimWithSpmdType(0), {tp: V}), tp, src=V, dst=P)
    NdimWithSpmdType(ndim=0, {MeshAxis(4:1): P})
    """
    return _transition("reinterpret", x, axis, src, dst, out)


def convert(x: _Value, axis: Any, *, src: Any, dst: Any,
            out: Optional[torch.Tensor] = None) -> _Value:
    """Type of ``convert(x, axis, src=, dst=)``: no communication, the
    value kept (e.g. R -> S(0) keeps this rank's slice).

    >>> from cspmd.mesh import MeshAxis
    >>> from cspmd.types import R, S
    >>> tp = MeshAxis.of(4, 1)
    >>> convert(assert_type(NdimWithSpmdType(1), {tp: R}), tp, src=R, dst=S(0))
    NdimWithSpmdType(ndim=1, {MeshAxis(4:1): V} PartitionSpec(MeshAxis(4:1)))
    """
    return _transition("convert", x, axis, src, dst, out)


# ---- outputs ---------------------------------------------------------------

def output(out: Any, typed: Any) -> None:
    """Stamp the real output(s) ``out`` with the type(s) of ``typed``: a
    tensor and a tensor or ``NdimWithSpmdType``, or matching tuples/lists
    of them, of equal ranks.  A ``None`` output (optional) is skipped.

    >>> from cspmd.mesh import MeshAxis
    >>> from cspmd.types import R
    >>> tp = MeshAxis.of(4, 1)
    >>> y = torch.zeros(3)
    >>> output(y, assert_type(NdimWithSpmdType(1), {tp: R}))
    >>> get_local_type(y)
    {MeshAxis(4:1): R}
    """
    if isinstance(out, (tuple, list)):
        if not isinstance(typed, (tuple, list)) or len(typed) != len(out):
            n = len(typed) if isinstance(typed, (tuple, list)) else 1
            raise SpmdTypeError(f"rules.output: {len(out)} output(s) but {n} type(s)")
        for o, t in zip(out, typed):
            output(o, t)
        return
    if out is None or (typed is None and not isinstance(out, torch.Tensor)):
        return
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"rules.output: expected a tensor output, got {type(out).__name__}")
    if not _typed_value(typed):
        raise TypeError(f"rules.output: expected a tensor or NdimWithSpmdType, got "
                        f"{type(typed).__name__}")
    _touch(typed)
    if out.ndim != typed.ndim:
        raise SpmdTypeError(f"rules.output: output has {out.ndim} dim(s) but its declared type "
                            f"has {typed.ndim}")
    have, want = _get_type(out), _get_type(typed)
    if have != TYPE.UNTYPED and ops.type_local(have) != ops.type_local(want):
        raise SpmdTypeError(f"rules.output: output already has type {ops.type_format(have)}, "
                            f"but the rule derives {ops.type_format(ops.type_local(want))}")
    try:
        _set_type(out, ops.type_refine(have, want))  # assert_type's refinement
    except SpmdTypeError as e:
        raise SpmdTypeError(f"rules.output: output annotations conflict with the derived type: "
                            f"{e.args[0] if e.args else e}") from None
    _touch(out)
    if out.requires_grad:
        _watch_gradient(out)  # the gradient arriving in backward must be the dual


# ---- running a hook ------------------------------------------------------------

_SIGNATURES: "weakref.WeakKeyDictionary[Callable[..., object], inspect.Signature]" = (
    weakref.WeakKeyDictionary())


def _signature(fn: Callable[..., object]) -> inspect.Signature:
    sig = _SIGNATURES.get(fn)
    if sig is None:
        sig = _SIGNATURES[fn] = inspect.signature(fn)
    return sig


def hook_shape(cls: type) -> Tuple[bool, Tuple[str, ...]]:
    """``(returns_types, names)`` of ``cls.spmd_typecheck``: whether the hook
    returns the output types (only keyword-only parameters) rather than
    taking the outputs first, and the forward arguments it names.

    >>> class F(torch.autograd.Function):
    ...     @staticmethod
    ...     def spmd_typecheck(*, x): return x
    >>> hook_shape(F)
    (True, ('x',))
    """
    params = list(_signature(cls.spmd_typecheck).parameters.values())
    returns_types = not params or params[0].kind is inspect.Parameter.KEYWORD_ONLY
    return returns_types, tuple(p.name for p in (params if returns_types else params[1:]))


def hook_kwargs(cls: type, forward_args: Dict[str, object],
                names: Optional[Tuple[str, ...]] = None) -> Dict[str, object]:
    """The keyword arguments ``cls.spmd_typecheck`` receives: the forward
    arguments it names; a name ``forward`` lacks takes the hook's default,
    or is a ``TypeError`` when the hook gives none.

    >>> class F(torch.autograd.Function):
    ...     @staticmethod
    ...     def spmd_typecheck(*, x, scale=2): return x
    >>> hook_kwargs(F, {"x": 1, "y": 2})
    {'x': 1}
    """
    if names is None:
        _, names = hook_shape(cls)
    params = _signature(cls.spmd_typecheck).parameters
    for name in names:
        if name not in forward_args and params[name].default is inspect.Parameter.empty:
            raise TypeError(f"{cls.__name__}.spmd_typecheck: {name!r} is not a parameter of "
                            f"{cls.__name__}.forward (has {sorted(forward_args)})")
    return {name: forward_args[name] for name in names if name in forward_args}


def bind_forward_args(cls: type, args: Tuple[object, ...]) -> Dict[str, object]:
    """``cls.apply(*args)``'s arguments by ``cls.forward``'s parameter names
    (without ``ctx``; defaults applied; ``*args`` binds a tuple).

    >>> class F(torch.autograd.Function):
    ...     @staticmethod
    ...     def forward(ctx, x, k=3): return x * k
    >>> bind_forward_args(F, (1,))
    {'x': 1, 'k': 3}
    """
    sig = _signature(cls.forward)
    has_ctx = cls.setup_context is torch.autograd.Function.setup_context
    bound = sig.bind(*((None, *args) if has_ctx else args))
    bound.apply_defaults()
    named = dict(bound.arguments)
    if has_ctx:
        named.pop(next(iter(sig.parameters)))
    return named


def _tensors(value: object) -> List[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (int, float, bool, complex, str, type(None), NdimWithSpmdType)):
        return []
    flat, _ = tree_flatten(value)
    return [t for t in flat if isinstance(t, torch.Tensor)]


def run_typecheck(cls: type, func: Callable[..., object], args: Tuple[object, ...]) -> Any:
    """Run ``func(*args)`` (the Function's real ``apply``), then
    ``cls.spmd_typecheck`` with the forward arguments it names.

    A hook with only keyword-only parameters returns the output type(s),
    which are stamped on the outputs; one with a leading positional
    parameter receives the outputs and stamps them itself.  Then coverage:
    each tensor argument must have reached a rule, ``assert_type`` or
    ``ignore``, and each tensor output must be typed, else SpmdTypeError.

    >>> run_typecheck(MyFunction, MyFunction.apply, (x, w))  # doctest: +SKIP
    """
    who = f"{cls.__name__}.spmd_typecheck"
    forward_args = bind_forward_args(cls, args)
    returns_types, names = hook_shape(cls)
    kwargs = hook_kwargs(cls, forward_args, names)
    hook = cls.spmd_typecheck
    outputs = func(*args)
    out_tensors = _tensors(outputs)
    with _coverage() as cov:
        if returns_types:
            result = hook(**kwargs)
            if result is None and out_tensors:
                raise SpmdTypeError(f"{who}: returned None; a keyword-only spmd_typecheck must "
                                    "return the output type(s) (a NdimWithSpmdType, a tensor, "
                                    "or a tuple)")
            output(outputs, result)
        else:
            hook(outputs, **kwargs)
    for name, value in forward_args.items():
        if any(id(t) not in cov.touched for t in _tensors(value)):
            raise SpmdTypeError(f"{who}: tensor argument {name!r} was not accounted for. Pass "
                                "it to the rules operation that consumes it, assert_type it, "
                                f"or declare rules.ignore({name}) if it does not affect the "
                                "forward value.")
    for i, t in enumerate(out_tensors):
        if _get_type(t) == TYPE.UNTYPED:
            raise SpmdTypeError(f"{who}: output {i} was left untyped; return its type from the "
                                "hook, or finish the rule with rules.output(out, "
                                "<NdimWithSpmdType>) or assert_type(out, ...)")
    return outputs
