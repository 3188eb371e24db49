"""DTensor's own sharding propagation of one aten op on one mesh axis.

Global mode's fallback for ops with no C shard rule (the core asks, per
shard axis, for the placements of the op's results; it still decides the
types itself), and the oracle the tests check the C rules against.  Each
tensor operand becomes a meta DTensor on a 1-D mesh of the axis' size,
placed as given (Shard(d) scales dim d by the size); the op runs with no
redistribution allowed, and each result's placement is read back.

Placements are the core's integers: d >= 0 for Shard(d), -1 Replicate,
-2 Partial (a sum), -3 for a result that is not a tensor.
"""

from __future__ import annotations

import torch

REPLICATE, PARTIAL, NONE = -1, -2, -3

_meshes: dict = {}
_used: dict = {}


def _mesh(size):
    mesh = _meshes.get(size)
    if mesh is None:
        from torch.distributed.device_mesh import DeviceMesh

        mesh = DeviceMesh("cpu", torch.arange(size), _init_backend=False, _rank=0)
        _meshes[size] = mesh
    return mesh


def _placement(p):
    from torch.distributed.tensor import Partial, Replicate, Shard

    if p >= 0:
        return Shard(p)
    return Partial() if p == PARTIAL else Replicate()


def _code(p):
    from torch.distributed.tensor import Partial, Replicate, Shard
    from torch.distributed.tensor.placement_types import _StridedShard

    if isinstance(p, _StridedShard):
        raise ValueError(f"DTensor gave a strided shard ({p})")
    if isinstance(p, Shard):
        return p.dim
    if isinstance(p, Replicate):
        return REPLICATE
    # exactly Partial: its subclasses (_NormPartial, _MaskPartial) reduce
    # with "sum" too but are not plain pending sums
    if type(p) is Partial and p.reduce_op == "sum":
        return PARTIAL
    raise ValueError(f"DTensor gave the placement {p}, which is not a sum")


def resolve(name, overload):
    """The OpOverload of "aten::mm" / "" (the default overload)."""
    ns, _, op = name.partition("::")
    packet = getattr(getattr(torch.ops, ns), op)
    return getattr(packet, overload or "default")


def propagate(op, args, kwargs, places, size):
    """Each result's (placement, ndim), one pair per schema return (a list
    return: its first element's, all of them alike); raises ValueError with
    DTensor's reason when no strategy needs no redistribution."""
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor._utils import ExplicitRedistributionContext
    from torch.utils._python_dispatch import _disable_current_modes

    from .checker import no_typecheck

    mesh = _mesh(size)
    it = iter(places)

    def to_meta(x):
        if not isinstance(x, torch.Tensor):
            return x
        p = next(it)
        meta = torch.empty(x.shape, dtype=x.dtype, device="meta")
        return DTensor.from_local(meta, mesh, [_placement(p)], run_check=False)

    with no_typecheck(), _disable_current_modes():
        meta_args, meta_kwargs = torch.utils._pytree.tree_map(to_meta, (args, kwargs))
        try:
            with ExplicitRedistributionContext(strict=True):
                out = op(*meta_args, **meta_kwargs)
        except Exception as e:  # noqa: BLE001 -- DTensor's reason, passed on
            raise ValueError(f"DTensor: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
    outs = out if isinstance(out, tuple) else (out,)
    result = []
    for o in outs:
        leaves = o if isinstance(o, (list, tuple)) else [o]
        codes = {(_code(x.placements[0]), x.ndim) for x in leaves if isinstance(x, DTensor)}
        if len(codes) > 1:
            raise ValueError("DTensor placed the pieces of one result differently")
        result.append(codes.pop() if codes else (NONE, 0))
    return result


def fallback(name, overload, args, places, size):
    """The kernel's entry (csrc/torch/fallback.cpp): the op's schema
    arguments in order, one placement per tensor operand; returns the
    results' (placement, ndim) pairs or the reason as a string."""
    try:
        op = resolve(name, overload)
        pos, kw = [], {}
        for a, v in zip(op._schema.arguments, args):
            if a.kwarg_only:
                kw[a.name] = v
            else:
                pos.append(v)
        res = propagate(op, tuple(pos), kw, places, size)
    except Exception as e:  # noqa: BLE001 -- reported by the core
        res = str(e) or type(e).__name__
    finally:
        key = f"{name}.{overload}" if overload else name
        _used[key] = _used.get(key, 0) + 1
    return res


def fallback_ops():
    """The ops that took the fallback in this process, with their counts."""
    return dict(_used)
