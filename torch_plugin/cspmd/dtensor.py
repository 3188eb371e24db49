"""The DTensor bridge: placements <-> local SPMD types,
``spmd_redistribute`` on DTensors, and the typing of ``DTensor.to_local()``
/ ``DTensor.from_local()`` inside ``typecheck()``.

``torch.distributed.tensor`` is imported lazily, so ``import cspmd`` stays
cheap; the to_local/from_local hooks are installed when the first
``typecheck()`` region starts and removed when the last one ends.
"""

from typing import Any

import torch

from ._codes import LT, PLACEMENT
from ._lib import ops as _ops
from .checker import _register_patch, is_type_checking, no_typecheck
from .mesh import MeshAxis
from .types import (DimSharding, I, P, PerMeshAxisLocalSpmdType, R, S, Shard,  # noqa: F401
                    TensorSharding, V, _normalize_dim_sharding)

__all__ = ["dtensor_placement_to_spmd_type", "spmd_type_to_dtensor_placement",
           "spmd_redistribute", "TensorSharding", "DimSharding"]


# ---- placements <-> types --------------------------------------------------

def _placements():
    from torch.distributed.tensor import Partial, Replicate
    from torch.distributed.tensor import Shard as DtShard
    return Replicate, DtShard, Partial


def _placement_code(placement):
    """The core's code for a DTensor placement's kind; PLACEMENT.NONE for what
    is not one."""
    Replicate, DtShard, Partial = _placements()
    for cls, code in ((Replicate, PLACEMENT.REPLICATE), (DtShard, PLACEMENT.SHARD),
                      (Partial, PLACEMENT.PARTIAL)):
        if isinstance(placement, cls):
            return code
    return PLACEMENT.NONE


# The core's answers, read once (plain lookups): the local type of each
# (placement, grad placement) kind, and the placement kind of each local
# type (V needs a dim: asked per call, where the core raises for plain V).
_PLACE_CODES = (PLACEMENT.NONE, PLACEMENT.REPLICATE, PLACEMENT.SHARD, PLACEMENT.PARTIAL)
_LTYPE_OF = {(p, g): _ops.placement_ltype(p, g) for p in _PLACE_CODES[1:] for g in _PLACE_CODES}
_PLACEMENT_OF = {lt: _ops.ltype_placement(lt, -1) for lt in (LT.R, LT.I, LT.P)}
_BY_LTYPE = {t.value: t for t in (R, I, V, P)}


def _spmd_type(placement, grad_placement):
    """The local type of ``placement`` (S(d) for a Shard), as the core maps it."""
    code = _placement_code(placement)
    if code == PLACEMENT.NONE:
        raise ValueError(f"dtensor_placement_to_spmd_type: unknown DTensor placement "
                         f"{placement!r}")
    t = _BY_LTYPE[_LTYPE_OF[code, _placement_code(grad_placement)]]
    return S(placement.dim) if code == PLACEMENT.SHARD else t


def dtensor_placement_to_spmd_type(placement: Any, grad_placement: Any = None) -> Any:
    """The cspmd type of a DTensor placement: Replicate -> R if
    ``grad_placement`` is Partial, else I; Shard(d) -> S(d); Partial -> P.

    >>> from torch.distributed.tensor import Replicate, Partial
    >>> dtensor_placement_to_spmd_type(Replicate()), dtensor_placement_to_spmd_type(Replicate(), Partial())
    (I, R)
    """
    return _spmd_type(placement, grad_placement)


def spmd_type_to_dtensor_placement(spmd_type: Any) -> Any:
    """The DTensor placement of a cspmd type: R/I -> Replicate(), S(d) ->
    Shard(d), P -> Partial(); V has no placement (use S(dim)).

    >>> spmd_type_to_dtensor_placement(S(0))
    Shard(dim=0)
    """
    Replicate, DtShard, Partial = _placements()
    t = spmd_type
    if isinstance(t, Shard):
        code = _ops.ltype_placement(LT.V, max(t.dim, 0))
    elif t.__class__ is PerMeshAxisLocalSpmdType:
        code = _PLACEMENT_OF.get(t.value)
        if code is None:
            code = _ops.ltype_placement(t.value, -1)  # raises: plain V has no placement
    else:
        raise ValueError(f"spmd_type_to_dtensor_placement: expected R, I, V, P or S(i), got "
                         f"{t!r}")
    if code == PLACEMENT.SHARD:
        return DtShard(t.dim)
    return Replicate() if code == PLACEMENT.REPLICATE else Partial()


def _local_type_of(mesh, placements, grad_placements):
    """``{MeshAxis: R|I|V|P}`` of a DTensor's local tensor (no grad
    placements: none given, as the core reads it)."""
    if grad_placements is None:
        grad_placements = [None] * len(placements)
    out = {}
    for i, (p, g) in enumerate(zip(placements, grad_placements)):
        t = _spmd_type(p, g)
        out[MeshAxis.of(mesh.get_group(i))] = V if isinstance(t, Shard) else t
    return out


# ---- to_local / from_local under typecheck() ---------------------

_saved = {}


def _in_to_local_backward():
    """In torch's backward of to_local, which from torch 2.15 wraps the
    gradient with from_local (before, with the DTensor constructor): the
    gradient's type is the checker's, not an annotation of the user's."""
    node = torch._C._current_autograd_node()
    return node is not None and node.name() == "_ToTorchTensorBackward"


def _hook_on():
    if not torch.distributed.is_available() or "to" in _saved:  # already on
        return
    from torch.distributed.tensor import _api
    from .runtime import assert_type

    to_cls, from_cls = _api._ToTorchTensor, _api._FromTorchTensor
    orig_to, orig_from = to_cls.apply, from_cls.apply
    _saved["to"] = (to_cls, "apply" in to_cls.__dict__, to_cls.__dict__.get("apply"))
    _saved["from"] = (from_cls, "apply" in from_cls.__dict__, from_cls.__dict__.get("apply"))

    def to_local(dt, grad_placements=None, *rest):
        # _ToTorchTensor.apply(dtensor, grad_placements)
        if not is_type_checking():
            return orig_to(dt, grad_placements, *rest)
        with no_typecheck():
            result = orig_to(dt, grad_placements, *rest)
        assert_type(result, _local_type_of(dt.device_mesh, dt.placements, grad_placements))
        return result

    def from_local(t, mesh, placements, *rest):
        # _FromTorchTensor.apply(input, mesh, placements, run_check, shape, stride,
        #                        grad_placements)
        if not is_type_checking() or _in_to_local_backward():
            return orig_from(t, mesh, placements, *rest)
        grad_placements = rest[3] if len(rest) > 3 else None
        assert_type(t, _local_type_of(mesh, placements, grad_placements))
        with no_typecheck():
            return orig_from(t, mesh, placements, *rest)

    to_cls.apply = staticmethod(to_local)
    from_cls.apply = staticmethod(from_local)


def _hook_off():
    for key in ("to", "from"):
        entry = _saved.pop(key, None)
        if entry is None:
            continue
        cls, had, value = entry
        if had:
            cls.apply = value
        else:
            del cls.apply


_register_patch(_hook_on, _hook_off)


# ---- spmd_redistribute ---------------------------------------------------------

def _stamped(local, mesh, names, types):
    """An alias of ``local`` typed ``{axis of mesh dim n: types[n]}`` (S -> V):
    a DTensor's local tensor carries no type of its own."""
    from ._lib import ops
    from ._type_ids import _type_id
    with no_typecheck():
        alias = local.view_as(local)
    t = {MeshAxis.of(mesh.get_group(i)): V if isinstance(types[n], Shard) else types[n]
         for i, n in enumerate(names)}
    ops.set_type(alias, _type_id(t, alias.dim()))
    return alias


def _apply_transitions(local, mesh, names, transitions, start_types):
    from .collectives import redistribute
    local = _stamped(local, mesh, names, start_types)
    for name, (src, dst) in transitions:
        local = redistribute(local, mesh.get_group(names.index(name)), src=src, dst=dst)
    return local


class _SpmdRedistribute(torch.autograd.Function):
    """One autograd node: forward applies the per-mesh-dim transitions to the
    local tensor; backward applies them reversed (dst -> src, last first) and
    re-wraps the gradient as a DTensor with the source placements."""

    @staticmethod
    def forward(ctx, x, mesh, names, transitions, src_types, dst_types):
        ctx.mesh, ctx.names, ctx.placements = mesh, names, tuple(x.placements)
        ctx.back = [(n, (d, s)) for n, (s, d) in reversed(transitions)]
        ctx.dst_types = dst_types
        return _apply_transitions(x._local_tensor, mesh, names, transitions, src_types)

    @staticmethod
    def backward(ctx, grad):
        from torch.distributed.tensor import DTensor
        if isinstance(grad, DTensor):
            grad = grad._local_tensor
        grad = _apply_transitions(grad, ctx.mesh, ctx.names, ctx.back, ctx.dst_types)
        with no_typecheck():
            grad = DTensor.from_local(grad, ctx.mesh, ctx.placements, run_check=False)
        return grad, None, None, None, None, None


def spmd_redistribute(x: Any, src: Any, dst: Any) -> Any:
    """Redistribute a DTensor from sharding ``src`` to ``dst`` (TensorSharding
    or plain tuples of mesh-dim names) with cspmd's collectives, one mesh dim
    at a time, in mesh order.  Mesh dims absent from a sharding are
    Replicate.  A tensor dim whose multi-axis sharding changes raises
    NotImplementedError.  P and I cannot be expressed.

    >>> y = spmd_redistribute(x, TensorSharding("tp"), TensorSharding())  # doctest: +SKIP
    """
    from itertools import zip_longest

    from torch.distributed.tensor import DTensor

    if not isinstance(x, DTensor):
        raise TypeError(f"spmd_redistribute: x must be a DTensor, got {type(x).__name__}")
    for what, sh in (("src", src), ("dst", dst)):
        if not isinstance(sh, (TensorSharding, tuple, list)):
            raise TypeError(f"spmd_redistribute: {what} must be a TensorSharding, got "
                            f"{type(sh).__name__}")
    mesh = x.device_mesh
    if not mesh.mesh_dim_names:
        raise ValueError("spmd_redistribute: the DTensor's mesh needs mesh_dim_names")
    names = list(mesh.mesh_dim_names)
    src_t, dst_t = {n: R for n in names}, {n: R for n in names}
    for dim, (s, d) in enumerate(zip_longest(src, dst)):
        sd = _normalize_dim_sharding(s, f"spmd_redistribute: src entry {dim}")
        dd = _normalize_dim_sharding(d, f"spmd_redistribute: dst entry {dim}")
        if sd != dd and (len(sd) > 1 or len(dd) > 1):
            raise NotImplementedError(
                f"Multi-axis sharding on a single tensor dim is not yet supported by "
                f"spmd_redistribute. Tensor dim {dim} changes from {sd!r} to {dd!r}.")
        for what, table, dims in (("src", src_t, sd), ("dst", dst_t, dd)):
            for n in dims:
                if n not in table:
                    raise ValueError(f"spmd_redistribute: {what} names mesh dim {n!r}, not in "
                                     f"the DTensor's mesh dims {tuple(names)!r}")
                table[n] = S(dim)
    transitions = [(n, (src_t[n], dst_t[n])) for n in names if src_t[n] != dst_t[n]]
    if not transitions:
        return x
    local = _SpmdRedistribute.apply(x, mesh, names, transitions, src_t, dst_t)
    placements = list(x.placements)
    for n, (_, d) in transitions:
        placements[names.index(n)] = spmd_type_to_dtensor_placement(d)
    with no_typecheck():
        return DTensor.from_local(local, mesh, tuple(placements), run_check=False)
