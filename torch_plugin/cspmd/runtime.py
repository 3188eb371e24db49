"""Annotating and querying tensors' SPMD types.

Python converts axes and types to the core's integer codes; the core
interns, validates and refines them, and the type id lives on the tensor.
"""

import logging
import threading
import weakref
from typing import Any, Dict, List, Optional, Tuple, Union

import torch

from . import _compile_markers as _compiled
from ._codes import TYPE
from ._coverage import _touch
from ._errors import SpmdTypeError
from ._frames import user_site
from ._lib import ops
from ._ndim_type import NdimWithSpmdType
from ._traceback import api_boundary
from ._type_ids import _type_id, type_to_dict
from .checker import _describe, _grad_prehook
from .mesh import MeshAxis, current_mesh, normalize_axis, set_dist
from .scalar import Scalar
from .types import (I, PartitionSpec, PerMeshAxisLocalSpmdType, R, Shard, SpmdType, _resolved_key,
                    as_partition_spec, axis_key, ltype_code, normalize_partition_spec,
                    to_local_type)

_TensorOrSequence = Union[torch.Tensor, List[torch.Tensor], Tuple[torch.Tensor, ...]]

__all__ = ["assert_type", "assert_local_type", "assert_type_like", "assert_local_type_like",
           "get_local_type", "has_local_type", "get_axis_local_type",
           "maybe_get_axis_local_type", "mutate_type", "get_partition_spec", "set_dist",
           "to_local_type", "merge_types", "reinterpret_no_grad"]

_trace_logger = logging.getLogger("cspmd.runtime.trace")

_UNTYPED = TYPE.UNTYPED


def _check_tensor(t, fn):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{fn}: expected a torch.Tensor, got {type(t).__name__}")
    if type(t).__name__ == "DTensor":
        raise TypeError(f"{fn}: got a DTensor; annotate its local tensor (x.to_local()) instead")


def _check_typed(t, fn):
    """A tensor, or the rank-and-type stand-in of a typing rule."""
    if type(t) is not NdimWithSpmdType:
        _check_tensor(t, fn)


def _get_type(t):
    """The core type id of a tensor or an NdimWithSpmdType."""
    return t._cspmd_type if type(t) is NdimWithSpmdType else ops.get_type(t)


def _set_type(t, type_id):
    if type(t) is NdimWithSpmdType:
        t._cspmd_type = type_id
    else:
        ops.set_type(t, type_id)


def merge_types(*types: Any) -> SpmdType:
    """Merge partial types into one ``SpmdType``.

    Each argument is a dict ``{axis: type}``, an ``SpmdType``, a
    ``PartitionSpec`` (or a plain tuple or list of its entries), a bare type such as ``R`` (at most one), or None
    (ignored), in any order.  Dicts must agree on the axes they share and
    PartitionSpecs must be equal.  A bare type fills every current-mesh axis
    that nothing else names (the partition spec's axes count as named).

    >>> from cspmd.mesh import MeshAxis
    >>> ax = MeshAxis.of(4, 1)
    >>> merge_types({ax: R}, None).local_type
    {MeshAxis(4:1): R}
    """
    local_type: dict = {}
    specs: list = []
    default = None
    keys: list = []  # every (axis, type) written, for the core's conflict check
    ltypes: list = []
    dims: list = []
    for arg in types:
        if arg is None:
            continue
        if isinstance(arg, (PerMeshAxisLocalSpmdType, Shard)):
            if default is not None:
                raise TypeError(f"merge_types() takes at most one bare type, got {default} "
                                f"and {arg}.")
            default = arg
            continue
        if isinstance(arg, (PartitionSpec, tuple, list)):
            specs.append(as_partition_spec(arg))
            continue
        if isinstance(arg, SpmdType):
            if arg.partition_spec is not None:
                specs.append(arg.partition_spec)
            arg = arg.local_type
        if not isinstance(arg, dict):
            raise TypeError(f"merge_types: expected a dict {{axis: type}}, an SpmdType, a "
                            f"PartitionSpec, a bare type or None, got "
                            f"{builtins_type(arg).__name__}")
        for axis, typ in arg.items():
            keys.append(axis_key(axis))
            ltypes.append(ltype_code(typ))
            dims.append(typ.dim if isinstance(typ, Shard) else -1)
        ops.annotation_merge_check(keys, ltypes, dims)
        local_type.update(arg)
    if len(specs) > 1:
        # The core compares them, as written and as the current mesh resolves them.
        written, resolved = [], []
        for sp in specs:
            written.append(len(sp))
            resolved.append(len(sp))
            for entry in sp:
                axes = () if entry is None else entry if isinstance(entry, tuple) else (entry,)
                written.append(len(axes))
                resolved.append(len(axes))
                written.extend(axis_key(a) for a in axes)
                resolved.extend(_resolved_key(a) for a in axes)
        ops.annotation_specs_check(written, resolved, " and ".join(map(repr, specs)))
    spec = specs[0] if specs else None
    if default is not None:
        mesh = current_mesh()
        if mesh is None:
            raise SpmdTypeError(f"A bare {default!r} requires an active mesh, but no current mesh "
                                "is set. Use set_current_mesh() or pass an explicit per-axis "
                                "dict instead.")
        named = {normalize_axis(a) for a in local_type}
        for entry in spec or ():
            for a in () if entry is None else entry if isinstance(entry, tuple) else (entry,):
                named.add(normalize_axis(a))
        local_type.update({a: default for a in mesh if a not in named})
    return SpmdType(local_type, spec)


@api_boundary
def assert_type(tensor: _TensorOrSequence, *types: Any,
                partition_spec: Optional[PartitionSpec] = None) -> _TensorOrSequence:
    """Set ``tensor``'s type if it has none, else check and refine it.

    ``types`` are merged by ``merge_types``: ``{axis: R|I|V|P|S(i)}`` (axes
    as MeshAxis, ProcessGroup or names in the current mesh), an
    ``SpmdType``, a ``PartitionSpec`` (a plain tuple or list of its entries
    too, here and as ``partition_spec``), or a bare type meaning every current
    mesh axis not otherwise named.  An existing V becomes P when P is
    asserted; any other change raises SpmdTypeError and leaves the tensor
    unchanged.  A list or tuple of tensors is annotated element by element.

    >>> x = torch.zeros(4)
    >>> _ = assert_type(x, {MeshAxis.of(4, 1): R})
    """
    # spmd_types 0.2.x's spelling of a partition spec: a plain tuple or list.
    types = tuple(as_partition_spec(t) for t in types)
    partition_spec = as_partition_spec(partition_spec)
    if torch.compiler.is_compiling():
        # Traced by torch.compile.  With checking off an annotation changes
        # nothing; traced for a checked call it becomes a marker node, run
        # where cspmd checks the graph (cspmd.compiled).
        if _compiled.marking():
            for t in tensor if isinstance(tensor, (list, tuple)) else (tensor,):
                _compiled.mark_annotation(t, types, partition_spec)
        return tensor
    if isinstance(tensor, (list, tuple)):
        return tensor.__class__(assert_type(t, *types, partition_spec=partition_spec)
                                for t in tensor)
    _check_typed(tensor, "assert_type")
    _touch(tensor)  # accounts for a hook's argument (cspmd.rules)
    if all(t is None or isinstance(t, PartitionSpec) for t in types):
        raise TypeError("assert_type() requires at least one type argument.")
    if partition_spec is not None and not isinstance(partition_spec, PartitionSpec):
        raise TypeError(f"assert_type: partition_spec must be a PartitionSpec or None, got "
                        f"{builtins_type(partition_spec).__name__}")
    if len(types) == 1 and (isinstance(types[0], dict) or partition_spec is None and
                            isinstance(types[0], (PerMeshAxisLocalSpmdType, Shard))):
        type_ = types[0]  # the common case, without building an SpmdType
    else:
        merged = merge_types(*types, partition_spec)
        type_, partition_spec = merged.local_type, merged.partition_spec
    new = _type_id(type_, tensor.dim(), partition_spec)
    old = _get_type(tensor)
    refine = ops.type_refine_declared if _declares_output(tensor) else ops.type_refine
    _set_type(tensor, refine(old, new))
    if ops.trace_enabled():
        _trace_assert(old, _get_type(tensor))
    if type(tensor) is not NdimWithSpmdType and tensor.requires_grad:
        _watch_gradient(tensor)
    return tensor


builtins_type = type
_compiled._assert_type[0] = assert_type  # marker nodes run the annotation

# The outputs of a registered autograd Function's own forward, while its
# typecheck_forward runs (cspmd.registration pushes them): what it asserts
# of them is a declaration (ops.type_refine_declared).
_declaring = threading.local()


def _declares_output(tensor):
    stack = getattr(_declaring, "stack", None)
    return bool(stack) and any(t is tensor for t in stack[-1])


def _trace_assert(old, new):
    """``<file:line>  assert_type({...}) -> {...}`` on the trace logger."""
    before = ops.type_format(old if old != _UNTYPED else ops.type_make([], [], []))
    after = ops.type_format(new)
    if before == "{}" and after == "{}":
        return
    _trace_logger.info("%s  assert_type(%s) -> %s", user_site() or "<unknown>", before,
                      after)


@api_boundary
def assert_local_type(tensor: torch.Tensor, type: Any) -> torch.Tensor:  # noqa: A002
    """Deprecated alias of ``assert_type(tensor, type)``.

    >>> x = torch.zeros(4)
    >>> _ = assert_local_type(x, {MeshAxis.of(4, 1): R})  # doctest: +SKIP
    """
    return assert_type(tensor, type)


def _watch_gradient(tensor):
    """Check, in backward, that the gradients reaching an annotated non-leaf
    tensor are the dual of its type (cspmd.checker._grad_prehook).  Installed
    once; the type is re-read from the tensor while it lives, and kept for
    when an activation is freed before backward.  Leaves need no hook: every
    checked backward() puts the check on the graph's gradient accumulators
    (watch_leaves in csrc/torch/grad_accumulate.cpp), whenever the leaf was
    annotated."""
    if tensor.is_leaf:
        return
    cell = getattr(tensor, "_cspmd_grad_cell", None)
    if cell is not None:
        cell[0] = ops.get_type(tensor)
        return
    cell = [ops.get_type(tensor), _describe(tensor)]
    # An attribute, not a WeakSet: WeakSet lookups compare tensors with ==.
    tensor._cspmd_grad_cell = cell
    # On the producing node, after the tensor's own hooks: a hook added
    # later that changes the gradient is checked too.
    tensor.grad_fn.register_prehook(_grad_prehook(weakref.ref(tensor), cell, tensor.output_nr))


def _merged_type(tensor, source, overrides, fn):
    _check_typed(tensor, fn)
    _check_typed(source, fn)
    if overrides is not None and not isinstance(overrides, dict):
        raise TypeError(f"{fn}: overrides must be a dict {{axis: type}} or None, got "
                        f"{type(overrides).__name__}")
    merged = dict(get_local_type(source))
    for k, v in (overrides or {}).items():
        merged[normalize_axis(k)] = v
    return merged


@api_boundary
def assert_type_like(tensor: torch.Tensor, source: torch.Tensor,
                     overrides: Optional[Dict[Any, Any]] = None) -> None:
    """Give ``tensor`` the type (and spec) of ``source``, with ``overrides``.

    >>> assert_type_like(y, x, {tp: V})  # doctest: +SKIP
    """
    if torch.compiler.is_compiling():
        # Reads source's type: run eagerly when traced for a checked call.
        if _compiled.marking():
            _compiled.eager_annotation(assert_type_like, tensor, source, overrides)
        return
    merged = _merged_type(tensor, source, overrides, "assert_type_like")
    assert_type(tensor, merged, get_partition_spec(source))


@api_boundary
def assert_local_type_like(tensor: torch.Tensor, source: torch.Tensor,
                           overrides: Optional[Dict[Any, Any]] = None) -> None:
    """Like ``assert_type_like`` but copies only the local type, not the
    partition spec.

    >>> assert_local_type_like(y, x)  # doctest: +SKIP
    """
    if torch.compiler.is_compiling():
        if _compiled.marking():  # as in assert_type_like
            _compiled.eager_annotation(assert_local_type_like, tensor, source, overrides)
        return
    merged = _merged_type(tensor, source, overrides, "assert_local_type_like")
    assert_type(tensor, merged)


@api_boundary
def get_axis_local_type(tensor: Any, axis: Any) -> PerMeshAxisLocalSpmdType:
    """The tensor's type on one axis; ValueError if the axis is absent.

    >>> get_axis_local_type(x, "tp")  # doctest: +SKIP
    R
    """
    t = maybe_get_axis_local_type(tensor, axis)
    if t is None:
        raise ValueError(f"get_axis_local_type: the tensor has no type on axis "
                         f"{normalize_axis(axis)!r} (its type is "
                         f"{_fmt(get_local_type(tensor))})")
    return t


@api_boundary
def maybe_get_axis_local_type(tensor: Any, axis: Any) -> Optional[PerMeshAxisLocalSpmdType]:
    """The tensor's type on one axis, or None if the axis is absent.

    >>> maybe_get_axis_local_type(torch.zeros(2), MeshAxis.of(4, 1)) is None  # doctest: +SKIP
    True
    """
    if not isinstance(tensor, Scalar):
        _check_typed(tensor, "get_axis_local_type")
    return get_local_type(tensor).get(normalize_axis(axis))


@api_boundary
def has_local_type(tensor: torch.Tensor) -> bool:
    """True if the tensor carries a type (even an empty one ``{}``)."""
    _check_typed(tensor, "has_local_type")
    return _get_type(tensor) != _UNTYPED


@api_boundary
def get_local_type(value: object) -> dict:
    """The type of a tensor or typed ``Scalar`` as ``{MeshAxis: R|I|V|P}``
    (``{}`` if untyped)."""
    if isinstance(value, Scalar):
        return dict(value.spmd_type)
    _check_typed(value, "get_local_type")
    return type_to_dict(_get_type(value))


@api_boundary
def get_partition_spec(tensor: torch.Tensor) -> Optional[PartitionSpec]:
    """The tensor's PartitionSpec (of MeshAxis entries), or None."""
    _check_typed(tensor, "get_partition_spec")
    flat = ops.type_spec(_get_type(tensor))
    if not flat:
        return None
    ndim, k, entries = flat[0], 1, []
    for _ in range(ndim):
        n = flat[k]
        axes = [MeshAxis(a) for a in flat[k + 1:k + 1 + n]]
        k += 1 + n
        entries.append(None if n == 0 else axes[0] if n == 1 else tuple(axes))
    return PartitionSpec(*entries)


def _as_axis_dict(x, fn):
    if isinstance(x, dict):
        return {normalize_axis(k): v for k, v in x.items()}
    return None


@api_boundary
def mutate_type(tensor: torch.Tensor, axis: Any = None, *, src: Any, dst: Any) -> torch.Tensor:
    """Overwrite types on already-typed axes after checking them against
    ``src`` (all updates are checked before any is written).

    >>> x = torch.zeros(2); ax = MeshAxis.of(4, 1)
    >>> _ = assert_type(x, {ax: V}); _ = mutate_type(x, ax, src=V, dst=P)
    """
    _check_tensor(tensor, "mutate_type")
    current = get_local_type(tensor)
    sd, dd = _as_axis_dict(src, "src"), _as_axis_dict(dst, "dst")
    if axis is not None:
        if sd is not None or dd is not None:
            raise SpmdTypeError("mutate_type: pass either axis or dict src/dst, not both")
        targets = [normalize_axis(axis)]
    elif sd is not None and dd is not None:
        if set(sd) != set(dd):
            diff = ", ".join(sorted(repr(a) for a in set(sd) ^ set(dd)))
            raise SpmdTypeError(f"mutate_type: src and dst name different axes: {diff}")
        targets = list(sd)
    elif sd is not None or dd is not None:
        targets = list(sd if sd is not None else dd)
    else:
        targets = list(current)
    axes = [a for a in targets if a.size() > 1]
    srcs = [ltype_code(sd[a] if sd is not None else src, "src") for a in axes]
    dsts = [ltype_code(dd[a] if dd is not None else dst, "dst") for a in axes]
    # The core checks every axis before changing any.
    ops.set_type(tensor, ops.type_mutate(ops.get_type(tensor), [a.id for a in axes], srcs, dsts))
    return tensor


def _fmt(d):
    return "{" + ", ".join(f"{a!r}: {t!r}" for a, t in d.items()) + "}"


@api_boundary
def reinterpret_no_grad(tensor: torch.Tensor, axis: Any, *, dst: Any) -> torch.Tensor:
    """Change ``R`` to ``I`` or back on ``axis`` for a tensor no gradient can
    reach (``requires_grad=False``): R and I hold the same values and differ
    only in the gradient they accept.  The data is not touched.

    >>> x = torch.zeros(2); ax = MeshAxis.of(4, 1)
    >>> _ = assert_type(x, {ax: R}); _ = reinterpret_no_grad(x, ax, dst=I)
    """
    _check_tensor(tensor, "reinterpret_no_grad")
    shard_dim = dst.dim if isinstance(dst, Shard) else -1
    # The core checks requires_grad, dst and the current type (R or I).
    ops.set_type(tensor, ops.type_reinterpret_no_grad(
        ops.get_type(tensor), normalize_axis(axis).id, ltype_code(dst, "dst"), shard_dim,
        tensor.requires_grad))
    return tensor


# The reference's spmd_types.runtime also holds these names (those of
# cspmd.regions and cspmd.registration, modules above this one, are attached
# by the package's __init__).
from .checker import is_type_checking, no_typecheck, register_no_typecheck  # noqa: E402,F401
from .trace import trace  # noqa: E402,F401
from .types import (P, V, PerMeshAxisSpmdType, PerMeshAxisSpmdTypesArg,  # noqa: E402,F401
                    format_axis, normalize_local_type, normalize_partition_spec,
                    shard_types_to_partition_spec)
