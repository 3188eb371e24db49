"""``redistribute_spec(x, src_partition_spec, dst_partition_spec)``: change
a tensor's PartitionSpec (and R / I / P on the axes it does not shard) with
a sequence of cspmd's own collectives.

The core plans the sequence (``cspmd_redistribute_plan``): shards leave
their dims innermost first (all_gather, all_to_all, redistribute to P),
the unsharded axes change type (all_reduce, the per-axis redistribute),
then the new shards are added outermost first (reduce_scatter, convert).  Each step is an ordinary
differentiable cspmd collective, checked as any other, so the backward
pass runs their backward collectives.
"""

from typing import Any, Dict, Optional

import torch

from ._lib import ops
from ._codes import COLL
from ._traceback import api_boundary
from ._type_ids import _spec_encoding, _type_id
from . import collectives as _c
from .mesh import MeshAxis
from .types import PartitionSpec, Shard, V, ltype_of

__all__ = ["redistribute_spec"]

# The collectives a plan uses, by the core's code.
_NAMES = {COLL.ALL_GATHER: "all_gather", COLL.ALL_TO_ALL: "all_to_all",
          COLL.REDUCE_SCATTER: "reduce_scatter", COLL.ALL_REDUCE: "all_reduce",
          COLL.CONVERT: "convert", COLL.REDISTRIBUTE: "redistribute"}


def _ctype(code, dim):
    return Shard(dim) if dim >= 0 else ltype_of(code)


def plan(x: torch.Tensor, src_partition_spec: Optional[PartitionSpec],
         dst_partition_spec: Optional[PartitionSpec],
         dst_types: Optional[Dict[Any, Any]] = None):
    """The steps ``redistribute_spec`` would run: a list of ``(function
    name, MeshAxis, src, dst)``, without running them."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"redistribute_spec: expected a tensor, got {type(x).__name__}")
    for name, spec in (("src_partition_spec", src_partition_spec),
                       ("dst_partition_spec", dst_partition_spec)):
        if spec is not None and not isinstance(spec, PartitionSpec):
            raise TypeError(f"redistribute_spec: {name} must be a PartitionSpec or None, got "
                            f"{type(spec).__name__}")
    cur = ops.get_type(x)
    nd = x.dim()
    # The core reads the tensor's type with src_partition_spec's axes V
    # (cspmd_redistribute_src) for the planner to compare with the tensor.
    src = ops.redistribute_src(cur, _spec_encoding(src_partition_spec, nd))
    for a, t in (dst_types or {}).items():
        if isinstance(t, Shard) or t is V:
            raise ValueError(f"redistribute_spec: dst_types gives {t!r} on axis {a!r}; say "
                             "where shards go with dst_partition_spec")
    dst = _type_id(dict(dst_types or {}), nd, dst_partition_spec)
    flat = ops.redistribute_plan(cur, src, dst, list(x.shape))
    steps = []
    for i in range(0, len(flat), 6):
        op, axis, slt, sdim, dlt, ddim = flat[i:i + 6]
        steps.append((_NAMES[op], MeshAxis(axis), _ctype(slt, sdim), _ctype(dlt, ddim)))
    return steps


@api_boundary
def redistribute_spec(x: torch.Tensor, src_partition_spec: Optional[PartitionSpec],
                      dst_partition_spec: Optional[PartitionSpec], *,
                      dst_types: Optional[Dict[Any, Any]] = None) -> torch.Tensor:
    """Redistribute ``x`` from ``src_partition_spec`` (which must be its
    PartitionSpec) to ``dst_partition_spec``, with cspmd collectives.

    Axes the destination does not shard keep R, I or P, and a shard becomes
    R, unless ``dst_types`` (``{axis: R | I | P}``) says otherwise.  This is
    a separate name from ``redistribute(x, axis, *, src, dst)`` (one axis,
    the reference's signature), which it does not change.

    >>> y = redistribute_spec(x, PartitionSpec("dp", "tp"), PartitionSpec("tp", None))  # doctest: +SKIP
    """
    for fn, axis, src, dst in plan(x, src_partition_spec, dst_partition_spec, dst_types):
        x = getattr(_c, fn)(x, axis, src=src, dst=dst)
    return x
