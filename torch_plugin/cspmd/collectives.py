"""Differentiable collectives.  Each call is one ``cspmd::collective`` op: the
C core validates (src, dst), checks and infers the type, and names the
backward collective, which is type-checked in its turn."""

import torch

from ._lib import ops
from .mesh import MeshAxis, process_group_for
from .types import P, PerMeshAxisLocalSpmdType, Shard, ltype_code

__all__ = ["all_reduce"]

# The core's cspmd_coll_t codes.
_ALL_REDUCE = 0


def _ctype(t, what):
    if t is None:
        return 0, -1
    if isinstance(t, Shard):
        return ltype_code(t), t.dim
    if isinstance(t, PerMeshAxisLocalSpmdType):
        return t.value, -1
    raise ValueError(f"{what} must be one of R, I, V, P or S(i), got {t!r}")


def _group_and_axis(axis):
    pg = process_group_for(axis)
    return pg, MeshAxis.of(pg)


def all_reduce(x, axis, *, src=P, dst, inplace=False):
    """Sum ``x`` over the ranks of ``axis``: P -> R (backward: all_reduce) or
    P -> I (backward: no-op).  ``src=V`` is accepted (read as P).

    >>> y = all_reduce(x, tp, src=P, dst=R)  # doctest: +SKIP
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"all_reduce: expected a torch.Tensor, got {type(x).__name__}")
    pg, ax = _group_and_axis(axis)
    s, sd = _ctype(src, "all_reduce src")
    d, dd = _ctype(dst, "all_reduce dst")
    return ops.collective(x, _ALL_REDUCE, pg.group_name, ax.id, s, sd, d, dd, False,
                          bool(inplace))
