"""Differentiable collectives and conversions.

The public functions are the ones in ``__all__``; ``cspmd`` exports them as
they are (``from .collectives import *``), each already wrapped at the API
boundary, so a new collective is written here and nowhere else in Python.

Each call is one ``cspmd::collective`` op: the C core validates (src, dst)
and the expert gate, resolves dims and dtypes, checks and infers the type,
and names the backward collective -- which is an op of its own, type-checked
in its turn.  Python only turns arguments into the core's codes.

``async_op`` (also a ``backward_options`` key) is accepted as the reference
takes it: the collective may then complete before its result is used, and
cspmd's do so at the call, so the values and types are the same either way.
"""

import weakref
from typing import Any, Dict, List, Optional

import torch

from ._codes import COLL, DTSRC, LT
from ._lib import collective, ops as _ops
from ._traceback import api_boundary
from .mesh import MeshAxis, process_group_for
from .types import I, P, PerMeshAxisLocalSpmdType, R, Shard, V

__all__ = ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "reinterpret", "convert",
           "redistribute", "shard", "unshard", "invariant_to_replicate", "broadcast"]


# The dtypes the options accept, with torch's code for each (read from
# torch through the library, never spelled here).
_DTYPE_CODES = {dt: _ops.dtype_code(dt) for dt in (
    torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
    torch.float32, torch.float64, torch.complex64, torch.complex128, torch.bool,
    torch.bfloat16)}
_BACKWARD_KEYS = ("async_op", "backward_options", "op_dtype", "out_dtype")


def _check_tensor(x, fn):
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{fn}: expected a torch.Tensor, got {type(x).__name__}")
    if x.is_nested:
        raise TypeError(f"{fn}: got a nested tensor; cspmd's collectives take strided tensors "
                        "(run the collective on each component, or on the padded values)")


def _ctype_or_none(t, ndim):
    """[ltype, shard_dim] for the core (S(d) canonicalized against ndim),
    None for what is not a type or a shard dim out of range."""
    if t.__class__ is PerMeshAxisLocalSpmdType:
        return [t._value_, -1]
    if isinstance(t, Shard):
        d = t.dim + ndim if t.dim < 0 else t.dim
        return [V.value, d] if 0 <= d < ndim else None
    if isinstance(t, PerMeshAxisLocalSpmdType):
        return [t.value, -1]
    return None


def _written(t, fn, what):
    """(ltype, is a shard, shard dim as written) of a src/dst for the core;
    ValueError for what is not a type."""
    if isinstance(t, Shard):
        return V.value, True, t.dim
    if isinstance(t, PerMeshAxisLocalSpmdType):
        return t.value, False, -1
    raise ValueError(f"{fn} {what} must be one of R, I, V, P or S(i), got {t!r}")


def _ctypes(op, fn, x, src, dst, expert):
    """[src ltype, src shard dim, dst ltype, dst shard dim] for the core, S(d)
    canonicalized against x's dims (in Python, so that torch.compile traces
    it).  For a bad src/dst the core decides what is reported, in the
    reference's order (cspmd_coll_check_shard_range: a shard out of range,
    or the (src, dst) pair's error where the reference checks that first)."""
    a, b = _ctype_or_none(src, x.dim()), _ctype_or_none(dst, x.dim())
    if a is not None and b is not None:
        return a + b
    _ops.coll_check_shard_range(op, *_written(src, fn, "src"), *_written(dst, fn, "dst"),
                                x.dim(), bool(expert))
    raise RuntimeError(f"{fn}: internal error: src={src!r}, dst={dst!r} were refused here but "
                       "accepted by the core")


def _shards(sa, sb):
    """Which of src, dst are shards, as one code: bit 0 src, bit 1 dst,
    bit 2 two shards of different dims (sa, sb: canonical dims, -1 none)."""
    return (sa >= 0) | (sb >= 0) << 1 | (sa >= 0 and sb >= 0 and sa != sb) << 2


def _noop_table():
    """{(op, src ltype, dst ltype, _shards code): no-op?} for every
    collective, the core's cspmd_coll_noop read once: a plain lookup, which
    torch.compile traces (a call into the library would break the graph)."""
    table = {}
    dims = [(-1, -1), (0, -1), (-1, 0), (0, 0), (0, 1)]
    for op in vars(COLL).values():
        for a in (LT.R, LT.I, LT.V, LT.P):
            for b in (LT.R, LT.I, LT.V, LT.P):
                for sa, sb in dims:
                    if (sa >= 0 and a != LT.V) or (sb >= 0 and b != LT.V):
                        continue  # only V is sharded
                    table[op, a, b, _shards(sa, sb)] = bool(_ops.coll_noop(op, (a, sa), (b, sb)))
    return table


_NOOP = _noop_table()


def _split_tables():
    """The core's answers, read once (torch.compile traces plain lookups):
    {(op, src ltype, dst ltype): the middle type} for calls that run as two
    nodes (cspmd_coll_split), and {(backward op_dtype given, floating input,
    op_dtype given): DTSRC} for the first node's backward dtype
    (cspmd_coll_split_backward_dtype)."""
    split = {}
    for op in vars(COLL).values():
        for a in (LT.R, LT.I, LT.V, LT.P):
            for b in (LT.R, LT.I, LT.V, LT.P):
                splits, (mid, _) = _ops.coll_split(op, (a, -1), (b, -1))
                if splits:
                    split[op, a, b] = _LTYPES[mid]
    source = {(bw, fl, op): _ops.coll_split_backward_dtype(bw, fl, op)
              for bw in (False, True) for fl in (False, True) for op in (False, True)}
    return split, source


_LTYPES = {t.value: t for t in (R, I, V, P)}
_SPLIT, _SPLIT_BW_DTYPE = _split_tables()
# {(op, src ltype): the ltype it is reduced as} where the two differ: the
# core's cspmd_coll_src_as read once (src=V of a reduction is reinterpreted
# as P first).
_SRC_AS = {(op, a): _LTYPES[b] for op in vars(COLL).values() for a in (LT.R, LT.I, LT.V, LT.P)
           for b in (_ops.coll_src_as(op, a),) if b != a}


def _is_noop(op, x, src, dst):
    """Whether the core calls this conversion a no-op (src and dst agree);
    a bad src/dst is not one: the call raises for it."""
    a, b = _ctype_or_none(src, x.dim()), _ctype_or_none(dst, x.dim())
    if a is None or b is None:
        return False
    return _NOOP[op, a[0], b[0], _shards(a[1], b[1])]


def _dtype_code(dt, what):
    if dt is None:
        return -1
    code = _DTYPE_CODES.get(dt)
    if code is None:
        raise ValueError(f"{what} must be a torch dtype, got {dt!r}")
    return code


def _dtypes(op_dtype, out_dtype, backward_options):
    """[op, out, bw_op, bw_out, ...] (one pair per level of backward_options),
    and the unknown-keys error text ("" if none): the op raises it after the
    reduced-precision rule, in the reference's order."""
    out = [_dtype_code(op_dtype, "op_dtype"), _dtype_code(out_dtype, "out_dtype")]
    bad = ""
    level = backward_options
    while level is not None:
        if not isinstance(level, dict):
            raise ValueError(f"backward_options must be a dict, got {type(level).__name__}")
        unknown = set(level) - set(_BACKWARD_KEYS)
        if unknown and not bad:
            bad = (f"Unknown keys in backward_options: {unknown}. Valid keys are: "
                   f"{list(_BACKWARD_KEYS)}")
        out += [_dtype_code(level.get("op_dtype"), "backward_options op_dtype"),
                _dtype_code(level.get("out_dtype"), "backward_options out_dtype")]
        level = level.get("backward_options")
    return out, bad


def _dim(d, ndim, fn, what):
    """d wrapped into 0..ndim-1; a dim out of that range is an argument error,
    never wrapped twice or taken as "no dim"."""
    if d is None:
        return -1
    if not isinstance(d, int) or isinstance(d, bool):
        raise ValueError(f"{fn}: {what} must be an int, got {d!r}")
    if not -ndim <= d < ndim:
        raise ValueError(f"{fn}: {what}={d} is out of range for {ndim} dims (expected "
                         f"{-ndim}..{ndim - 1})")
    return d + ndim if d < 0 else d


def _sizes(s, what):
    if s is None:
        return []
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in s):
        raise ValueError(f"{what} must be a list of ints, got {s!r}")
    return list(s)


_groups = weakref.WeakKeyDictionary()  # ProcessGroup -> (group name, axis id)
_NO_DIMS = [-1, -1]
_NO_SIZES = []
_NO_DTYPES = [-1, -1]


def _group(axis):
    """(group name, axis id) of a collective's axis argument, cached per group."""
    pg = process_group_for(axis)
    try:
        return _groups[pg]
    except (KeyError, TypeError):
        pass
    if isinstance(pg, (int, float, list, tuple)):  # MeshAxis.of would read a layout size
        raise TypeError(f"expected a ProcessGroup, MeshAxis or axis name as the axis, got "
                        f"{type(pg).__name__} {pg!r}")
    axis_id = MeshAxis.of(pg).id  # TypeError for what is not a group
    name = getattr(pg, "group_name", None)
    if not isinstance(name, str):
        raise TypeError(f"expected a ProcessGroup, MeshAxis or axis name, got {pg!r}")
    info = (name, axis_id)
    try:
        _groups[pg] = info
    except TypeError:  # not weak-referenceable (a mock): not cached
        pass
    return info


def _run(fn, op, x, axis, src, dst, *, dims=(None, None), dim_names=("dim", "dim"),
         ndim_extra=0, root=None, sizes_a=None,
         sizes_b=None, op_dtype=None, out_dtype=None, backward_options=None, expert=False,
         inplace=False):
    _check_tensor(x, fn)
    group, axis_id = _group(axis)
    types = _ctypes(op, fn, x, src, dst, expert)
    if op_dtype is None and out_dtype is None and backward_options is None:
        dtypes, bad_options = _NO_DTYPES, ""
    else:
        dtypes, bad_options = _dtypes(op_dtype, out_dtype, backward_options)
    if root is not None:  # broadcast's root rides where a dim would
        dim_list = [root, -1]
    elif dims[0] is None and dims[1] is None:
        dim_list = _NO_DIMS
    else:
        nd = x.dim() + ndim_extra
        dim_list = [_dim(dims[0], nd, fn, dim_names[0]), _dim(dims[1], nd, fn, dim_names[1])]
    return collective(x, op, group, axis_id, types, dim_list,
                          _NO_SIZES if sizes_a is None else _sizes(sizes_a, "split sizes"),
                          _NO_SIZES if sizes_b is None else _sizes(sizes_b, "split sizes"),
                          dtypes, bool(expert), bool(inplace), bad_options)


def _unchanged(fn, op, x, axis, src, dst):
    """A conversion whose src and dst agree: x itself, once the axis, both
    types and x's type on the axis (src) are checked like any collective's;
    a new tensor typed dst on the axis where x was accepted as src by a
    coercion (V read as P: reinterpret(x, V, P); R and I for each other
    without a gradient: an alias)."""
    group, axis_id = _group(axis)
    lt, dim, _, _ = _ctypes(op, fn, x, src, dst, False)
    return _ops.collective_check_input(x, fn, group, axis_id, lt, dim)


def _src_as(fn, op, x, axis, src, dst):
    """(x, src) as the reduction takes them: where the core reduces src as
    another type (V as P), x is first reinterpreted to it, its arguments
    checked first and x's type named under the reduction's own name, as
    the reference orders them."""
    as_ = _SRC_AS.get((op, src.value)) if src.__class__ is PerMeshAxisLocalSpmdType else None
    if as_ is None:
        return x, src
    if not torch.compiler.is_compiling():  # (Dynamo cannot trace calls into _C)
        _check_tensor(x, fn)
        group, axis_id = _group(axis)
        dst_code = _ctypes(op, fn, x, as_, dst, False)[2:]
        _ops.coll_validate(op, (as_.value, -1), dst_code, False)
        _ops.collective_check_input(x, fn, group, axis_id, src.value, -1)
    return reinterpret(x, axis, src=src, dst=as_), as_


@api_boundary
def all_reduce(x: torch.Tensor, axis: Any, *, src: Any = P, dst: Any, inplace: bool = False,
               op_dtype: Optional[torch.dtype] = None, out_dtype: Optional[torch.dtype] = None,
               async_op: bool = False,
               backward_options: Optional[Dict[str, Any]] = None) -> torch.Tensor:
    """Sum over the ranks of ``axis``: P -> R (backward: all_reduce) or P -> I
    (backward: no-op).  ``src=V`` first reinterprets V as P.

    >>> y = all_reduce(x, tp, src=P, dst=R)  # doctest: +SKIP
    """
    if inplace and (op_dtype is not None or out_dtype is not None):
        raise ValueError("inplace=True does not support op_dtype or out_dtype: the result is "
                         "written into the input's storage")
    x, src = _src_as("all_reduce", COLL.ALL_REDUCE, x, axis, src, dst)
    return _run("all_reduce", COLL.ALL_REDUCE, x, axis, src, dst, op_dtype=op_dtype,
                out_dtype=out_dtype, backward_options=backward_options, inplace=inplace)


@api_boundary
def all_gather(x: torch.Tensor, axis: Any, *, src: Any = V, dst: Any,
               gather_dim: Optional[int] = None, split_sizes: Optional[List[int]] = None,
               op_dtype: Optional[torch.dtype] = None, out_dtype: Optional[torch.dtype] = None,
               async_op: bool = False,
               backward_options: Optional[Dict[str, Any]] = None) -> torch.Tensor:
    """Gather V -> R|I: stack along ``gather_dim`` (src=V, default 0) or
    concatenate along i (src=S(i), optionally uneven ``split_sizes``).

    >>> y = all_gather(x, tp, src=S(0), dst=R)  # doctest: +SKIP
    """
    extra = 1 if not isinstance(src, Shard) else 0  # stack adds a dim
    return _run("all_gather", COLL.ALL_GATHER, x, axis, src, dst, dims=(gather_dim, None),
                dim_names=("gather_dim", None), ndim_extra=extra, sizes_a=split_sizes,
                op_dtype=op_dtype, out_dtype=out_dtype,
                backward_options=backward_options)


@api_boundary
def reduce_scatter(x: torch.Tensor, axis: Any, *, src: Any = P, dst: Any = V,
                   scatter_dim: Optional[int] = None, split_sizes: Optional[List[int]] = None,
                   op_dtype: Optional[torch.dtype] = None,
                   out_dtype: Optional[torch.dtype] = None, async_op: bool = False,
                   backward_options: Optional[Dict[str, Any]] = None) -> torch.Tensor:
    """Sum and scatter P -> V (unbind along ``scatter_dim``) or P -> S(i)
    (chunk along i, optionally uneven ``split_sizes``).

    >>> y = reduce_scatter(x, tp, src=P, dst=S(0))  # doctest: +SKIP
    """
    x, src = _src_as("reduce_scatter", COLL.REDUCE_SCATTER, x, axis, src, dst)
    return _run("reduce_scatter", COLL.REDUCE_SCATTER, x, axis, src, dst, dims=(scatter_dim, None),
                dim_names=("scatter_dim", None), sizes_a=split_sizes, op_dtype=op_dtype,
                out_dtype=out_dtype,
                backward_options=backward_options)


@api_boundary
def all_to_all(x: torch.Tensor, axis: Any, *, src: Any = V, dst: Any = V,
               split_dim: Optional[int] = None, concat_dim: Optional[int] = None,
               output_split_sizes: Optional[List[int]] = None,
               input_split_sizes: Optional[List[int]] = None,
               op_dtype: Optional[torch.dtype] = None, out_dtype: Optional[torch.dtype] = None,
               async_op: bool = False,
               backward_options: Optional[Dict[str, Any]] = None) -> torch.Tensor:
    """Exchange V|S(i) -> V|S(j): split along ``split_dim``, send piece s to
    rank s, concatenate (or stack, for V->V) along ``concat_dim``.

    >>> y = all_to_all(x, tp, src=S(0), dst=S(1))  # doctest: +SKIP
    """
    return _run("all_to_all", COLL.ALL_TO_ALL, x, axis, src, dst, dims=(split_dim, concat_dim),
                dim_names=("split_dim", "concat_dim"), sizes_a=output_split_sizes,
                sizes_b=input_split_sizes, op_dtype=op_dtype,
                out_dtype=out_dtype, backward_options=backward_options)


@api_boundary
def reinterpret(x: torch.Tensor, axis: Any, *, src: Any, dst: Any, expert_mode: bool = False,
                op_dtype: Optional[torch.dtype] = None, out_dtype: Optional[torch.dtype] = None,
                async_op: bool = False,
                backward_options: Optional[Dict[str, Any]] = None) -> torch.Tensor:
    """Change the type, never the local data.  I -> V and I -> P
    run as two nodes (I -> R, then R -> V|P).

    >>> y = reinterpret(x, tp, src=V, dst=P)  # doctest: +SKIP
    """
    _check_tensor(x, "reinterpret")
    if _is_noop(COLL.REINTERPRET, x, src, dst):
        return _unchanged("reinterpret", COLL.REINTERPRET, x, axis, src, dst)
    split = (_SPLIT.get((COLL.REINTERPRET, src.value, dst.value))
             if src.__class__ is PerMeshAxisLocalSpmdType and
             dst.__class__ is PerMeshAxisLocalSpmdType else None)
    if split is not None:  # two nodes, src -> split -> dst (the core's cspmd_coll_split)
        bw = backward_options or {}
        _check_composed_options(backward_options)
        bw_op, bw_out = bw.get("op_dtype"), bw.get("out_dtype")
        source = _SPLIT_BW_DTYPE[bw_op is not None, x.is_floating_point(), op_dtype is not None]
        first_bw_op = {DTSRC.NONE: None, DTSRC.BACKWARD: bw_op, DTSRC.OP: op_dtype,
                       DTSRC.INPUT: x.dtype}[source]
        mid = _run("reinterpret", COLL.REINTERPRET, x, axis, src, split, op_dtype=op_dtype,
                   out_dtype=op_dtype, backward_options={"op_dtype": first_bw_op,
                                                         "out_dtype": bw_out}, expert=True)
        return _run("reinterpret", COLL.REINTERPRET, mid, axis, split, dst, op_dtype=op_dtype,
                    out_dtype=out_dtype, backward_options={"op_dtype": bw_op, "out_dtype": bw_op}
                    if backward_options else None, expert=True)
    return _run("reinterpret", COLL.REINTERPRET, x, axis, src, dst, op_dtype=op_dtype,
                out_dtype=out_dtype, backward_options=backward_options, expert=expert_mode)


def _check_composed_options(backward_options):
    """reinterpret I -> V|P runs as two nodes, each given one level of
    backward options: unknown keys raise as anywhere, and a nested level
    (double backward) raises instead of being dropped, as the reference's
    composed reinterprets do."""
    if not backward_options:
        return
    _, bad = _dtypes(None, None, backward_options)
    if bad:
        raise ValueError(bad)
    if "backward_options" in backward_options:
        raise NotImplementedError(
            "backward_options with nested backward_options (double backward) is not supported "
            "for composed operations (reinterpret I->V, I->P)")


@api_boundary
def convert(x: torch.Tensor, axis: Any, *, src: Any, dst: Any, expert_mode: bool = False,
            op_dtype: Optional[torch.dtype] = None, out_dtype: Optional[torch.dtype] = None,
            async_op: bool = False,
            backward_options: Optional[Dict[str, Any]] = None) -> torch.Tensor:
    """Change the type, keep the meaning, no communication: e.g.
    R -> S(d) keeps this rank's chunk, R -> P zeroes every rank but 0.

    >>> y = convert(x, tp, src=R, dst=S(0))  # doctest: +SKIP
    """
    _check_tensor(x, "convert")
    if _is_noop(COLL.CONVERT, x, src, dst):
        return _unchanged("convert", COLL.CONVERT, x, axis, src, dst)
    return _run("convert", COLL.CONVERT, x, axis, src, dst, op_dtype=op_dtype, out_dtype=out_dtype,
                backward_options=backward_options, expert=expert_mode)


@api_boundary
def redistribute(x: torch.Tensor, axis: Any, *, src: Any, dst: Any,
                 op_dtype: Optional[torch.dtype] = None, out_dtype: Optional[torch.dtype] = None,
                 async_op: bool = False,
                 backward_options: Optional[Dict[str, Any]] = None) -> torch.Tensor:
    """Change the type, keep the meaning, communicating if needed.

    >>> y = redistribute(x, tp, src=S(0), dst=R)  # doctest: +SKIP
    """
    _check_tensor(x, "redistribute")
    if _is_noop(COLL.REDISTRIBUTE, x, src, dst):
        return _unchanged("redistribute", COLL.REDISTRIBUTE, x, axis, src, dst)
    return _run("redistribute", COLL.REDISTRIBUTE, x, axis, src, dst, op_dtype=op_dtype,
                out_dtype=out_dtype, backward_options=backward_options)


@api_boundary
def shard(x: torch.Tensor, axis: Any, *, src: Any, dst: Any,
          op_dtype: Optional[torch.dtype] = None, out_dtype: Optional[torch.dtype] = None,
          async_op: bool = False,
          backward_options: Optional[Dict[str, Any]] = None) -> torch.Tensor:
    """``convert`` to ``dst=S(i)`` (no expert mode).

    >>> y = shard(x, tp, src=R, dst=S(0))  # doctest: +SKIP
    """
    if not isinstance(dst, Shard):
        raise ValueError(f"shard dst must be S(i), got {dst!r}")
    return convert(x, axis, src=src, dst=dst, op_dtype=op_dtype, out_dtype=out_dtype,
                   backward_options=backward_options)


@api_boundary
def unshard(x: torch.Tensor, axis: Any, *, src: Any, dst: Any,
            op_dtype: Optional[torch.dtype] = None, out_dtype: Optional[torch.dtype] = None,
            async_op: bool = False,
            backward_options: Optional[Dict[str, Any]] = None) -> torch.Tensor:
    """``all_gather`` from ``src=S(i)``.

    >>> y = unshard(x, tp, src=S(0), dst=R)  # doctest: +SKIP
    """
    if not isinstance(src, Shard):
        raise ValueError(f"unshard src must be S(i), got {src!r}")
    return all_gather(x, axis, src=src, dst=dst, op_dtype=op_dtype, out_dtype=out_dtype,
                      backward_options=backward_options)


@api_boundary
def invariant_to_replicate(x: torch.Tensor, axis: Any, *, op_dtype: Optional[torch.dtype] = None,
                           out_dtype: Optional[torch.dtype] = None, async_op: bool = False,
                           backward_options: Optional[Dict[str, Any]] = None) -> torch.Tensor:
    """I -> R: identity forward, all_reduce in backward.

    >>> y = invariant_to_replicate(x, tp)  # doctest: +SKIP
    """
    return _run("invariant_to_replicate", COLL.INVARIANT_TO_REPLICATE, x, axis, I, R,
                op_dtype=op_dtype, out_dtype=out_dtype, backward_options=backward_options,
                expert=True)


@api_boundary
def broadcast(x: torch.Tensor, axis: Any, *, root: int = 0, src: Any = V, dst: Any = R,
              op_dtype: Optional[torch.dtype] = None, out_dtype: Optional[torch.dtype] = None,
              async_op: bool = False,
              backward_options: Optional[Dict[str, Any]] = None) -> torch.Tensor:
    """Copy the value of rank ``root`` of ``axis`` (its index within the
    axis group) to every rank of the axis: V -> R (backward: the gradient
    is summed onto root, zeros elsewhere) or V -> I (backward: root keeps
    its gradient, zeros elsewhere).  ``src=dst=R`` or ``I`` is the input
    itself: such a value is the same on every rank already.  cspmd's own
    (``spmd_types`` has no broadcast).

    >>> y = broadcast(x, dp, root=0, src=V, dst=R)  # doctest: +SKIP
    """
    _check_tensor(x, "broadcast")
    if not isinstance(root, int) or isinstance(root, bool):
        raise TypeError(f"broadcast: root must be an int (a rank's index within the axis "
                        f"group), got {root!r}")
    pg = process_group_for(axis)
    if not torch.compiler.is_compiling():  # (Dynamo cannot trace calls into _C)
        size = pg.size() if callable(getattr(pg, "size", None)) else None
        if isinstance(size, int):
            _ops.coll_root_check(root, size)
    if _is_noop(COLL.BROADCAST, x, src, dst):
        return _unchanged("broadcast", COLL.BROADCAST, x, axis, src, dst)
    return _run("broadcast", COLL.BROADCAST, x, axis, src, dst, root=root, op_dtype=op_dtype,
                out_dtype=out_dtype, backward_options=backward_options)
