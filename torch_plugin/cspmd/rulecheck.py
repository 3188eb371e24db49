"""Test an ``spmd_typecheck`` hook numerically against the kernel it types.

The checker believes a hook: whatever types it derives are the output's.  A
hook can be right about local types and still wrong globally (an
``einsum("...d->...d")`` hook on a kernel that mixes values along ``d``:
V either way, but a shard of the output is not the output of a shard).
``rulecheck`` tests the global claim on numbers:

1. each global input is split per rank by a placement: sharded (``S(i)``),
   replicated (``R``/``I``), or cut into random contributions that sum to it
   (``P``);
2. the kernel runs on every rank's pieces under ``typecheck(local=False)``,
   so the hook types the outputs -- on plain tensors, once per rank, or with
   ``local_tensor_mode=True`` on every rank at once under ``LocalTensorMode``
   with a fake process group (needed when an argument names a mesh axis: it
   becomes that axis's process group, and collectives in the kernel run);
3. the per-rank outputs are put back together as their types say: summed
   over ``P`` axes, concatenated along the shard dim over sharded axes, and
   required to be equal over ``R``/``I`` axes;
4. the result must match the kernel run once on the global inputs.

Without ``placements`` every placement from a small family is tried (see
:func:`rulecheck`); the report lists those that matched and those the hook
refused.

>>> import torch, cspmd.rules as rules
>>> class RowSum(torch.autograd.Function):
...     @staticmethod
...     def forward(ctx, x):
...         return x.sum(-1)
...     @staticmethod
...     def spmd_typecheck(*, x):
...         return rules.einsum("ij->i", x)
>>> report = rulecheck(RowSum, (torch.randn(4, 6),))
>>> len(report.checked) > 0
True
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from itertools import combinations, product
from typing import Any, Callable, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union
from unittest import mock

import torch
import torch.distributed as dist

from . import mesh as _meshmod
from .checker import typecheck
from .mesh import MeshAxis, current_mesh_all_names, set_current_mesh
from .rules import _tensors, bind_forward_args, hook_kwargs, hook_shape
from .runtime import assert_type, get_local_type, get_partition_spec
from .types import (I, P, PartitionSpec, PerMeshAxisSpmdType, R, S, Shard, SpmdType,
                    SpmdTypeError, V, normalize_partition_spec)

__all__ = ["RuleCheckError", "RuleCheckPlacement", "RuleCheckRejection", "RuleCheckReport",
           "rulecheck"]


class RuleCheckError(AssertionError):
    """The types a hook derives do not describe what its kernel computes."""


RuleCheckPlacement = Dict[str, Dict[str, PerMeshAxisSpmdType]]


class RuleCheckRejection(NamedTuple):
    """A placement the hook refused, and the first line of its error."""

    placement: RuleCheckPlacement
    reason: str


@dataclass
class RuleCheckReport:
    """What a ``rulecheck`` without explicit placements tried: ``checked``,
    the placements whose reassembled outputs matched the kernel; ``rejected``,
    those the hook refused (with the reason)."""

    checked: List[RuleCheckPlacement] = field(default_factory=list)
    rejected: List[RuleCheckRejection] = field(default_factory=list)


# ---- the simulated mesh ------------------------------------------------------

class _Grid:
    """Axis names and sizes, ranks laid out row-major (the first name is the
    outermost axis, as ``init_device_mesh`` lays them out)."""

    def __init__(self, sizes: Mapping[str, int]) -> None:
        self.names = list(sizes)
        self.sizes = {n: int(sizes[n]) for n in self.names}
        self.world = 1
        for n in self.names:
            self.world *= self.sizes[n]

    def coords(self, rank: int) -> Dict[str, int]:
        out = {}
        for n in reversed(self.names):
            rank, out[n] = divmod(rank, self.sizes[n])
        return out

    def axes(self) -> Dict[str, MeshAxis]:
        """MeshAxis values with this layout and no process group (the plain
        backend's mesh)."""
        stride, axes = 1, {}
        for n in reversed(self.names):
            axes[n] = MeshAxis.of(self.sizes[n], stride)
            stride *= self.sizes[n]
        return {n: axes[n] for n in self.names}


def _reset_axis_state() -> None:
    """Forget axis names and process-group caches: rulecheck's own fake
    process groups come and go, and their names must not outlive them."""
    _meshmod._reset_names()
    _meshmod._group_axes.clear()


# ---- one input under one placement -------------------------------------------

def _split_placement(placement: Any, ndim: int) -> Tuple[Dict[str, Any], List[Tuple[str, ...]]]:
    """(per-axis local type with S(i) read as V, the axis names sharding each
    dim, outermost first) of a ``{axis: type}`` dict or an ``SpmdType``."""
    if isinstance(placement, SpmdType):
        local, spec = dict(placement.local_type), placement.partition_spec
    else:
        local, spec = dict(placement), None
    dims: List[Tuple[str, ...]] = [() for _ in range(ndim)]
    for axis, typ in list(local.items()):
        if isinstance(typ, Shard):
            if not -ndim <= typ.dim < ndim:
                raise ValueError(f"rulecheck: placement {axis}: S({typ.dim}) is out of range "
                                 f"for a tensor of {ndim} dims")
            dims[typ.dim % ndim] += (axis,)
            local[axis] = V
    for d, entry in enumerate(spec or ()):
        if entry is not None:
            names = entry if isinstance(entry, tuple) else (entry,)
            dims[d] += tuple(names)
            for a in names:
                local[a] = V
    return local, dims


def _contribution(like: torch.Tensor, *key: object) -> torch.Tensor:
    """A random tensor shaped like ``like`` that depends on ``key`` only."""
    if not like.is_floating_point():
        raise RuleCheckError("rulecheck: an integer tensor cannot be split into Partial "
                             "contributions")
    seed = int.from_bytes(hashlib.sha256(repr(key).encode()).digest()[:8], "little")
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(like.shape, generator=gen, dtype=like.dtype).to(like.device)


class _Input:
    """A global tensor argument and its placement: each rank's piece, and the
    annotation that piece carries."""

    def __init__(self, name: str, value: torch.Tensor, placement: Any, grid: _Grid) -> None:
        local, dims = _split_placement(placement, value.ndim)
        unknown = [a for a in local if a not in grid.sizes]
        if unknown:
            raise RuleCheckError(f"rulecheck: the placement of {name!r} names mesh axis "
                                 f"{unknown[0]!r}, which is not in the mesh {grid.names}")
        missing = [a for a in grid.names if a not in local]
        if missing:
            raise RuleCheckError(f"rulecheck: the placement of {name!r} must give every mesh "
                                 f"axis a type; {missing[0]!r} has none")
        for d, names in enumerate(dims):
            parts = 1
            for a in names:
                parts *= grid.sizes[a]
            if names and value.shape[d] % parts:
                raise RuleCheckError(
                    f"rulecheck: dim {d} of {name!r} (size {value.shape[d]}) cannot be split "
                    f"evenly over the axes {tuple(names)} sharding it ({parts} pieces)")
        self.name, self.value, self.grid, self.dims = name, value, grid, dims
        self.local = {a: local[a] for a in grid.names}
        self.spec = (PartitionSpec(*[None if not n else n[0] if len(n) == 1 else n
                                     for n in dims]) if any(dims) else None)

    def piece(self, rank: int) -> torch.Tensor:
        where = self.grid.coords(rank)
        t = self.value
        for d, names in enumerate(self.dims):
            for a in names:
                t = t.chunk(self.grid.sizes[a], dim=d)[where[a]]
        for a in self.grid.names:
            if self.local[a] is not P:
                continue
            n = self.grid.sizes[a]
            rest = tuple(sorted((k, c) for k, c in where.items() if k != a))
            if where[a] < n - 1:  # ranks before the last hold random parts ...
                t = _contribution(t, self.name, a, rest, where[a])
            else:  # ... and the last one what makes them sum to the value
                for c in range(n - 1):
                    t = t - _contribution(t, self.name, a, rest, c)
        return t.clone()

    def annotated(self, t: torch.Tensor) -> torch.Tensor:
        return assert_type(t, dict(self.local), partition_spec=self.spec)


def _inputs(cls: type, args: Tuple[Any, ...], placements: Mapping[str, Any],
            grid: _Grid) -> Tuple[Dict[str, object], Dict[str, _Input]]:
    bound = bind_forward_args(cls, args)
    inputs = {}
    for name, value in bound.items():
        if isinstance(value, torch.Tensor):
            if name not in placements:
                raise RuleCheckError(f"rulecheck: no placement for argument {name!r}")
            inputs[name] = _Input(name, value, placements[name], grid)
        elif _tensors(value):
            # a tensor inside a tuple or *args would reach every rank whole and
            # make the check pass for nothing
            raise TypeError(f"rulecheck: argument {name!r} holds tensors inside a "
                            f"{type(value).__name__}; only a tensor passed as its own "
                            "forward argument can be placed")
    return bound, inputs


# ---- putting the outputs back together ---------------------------------------

def _name_of(axis: MeshAxis, label: str) -> str:
    for name, a in (current_mesh_all_names() or {}).items():
        if a == axis:
            return name
    raise RuleCheckError(f"rulecheck: {label} is typed on mesh axis {axis!r}, which is not "
                         "an axis of the mesh under test")


def _reassemble(label: str, typed: torch.Tensor, pieces: Dict[int, torch.Tensor],
                grid: _Grid) -> torch.Tensor:
    """The global value that ``pieces`` (rank -> value) stand for under the
    type ``typed`` carries."""
    types = {_name_of(a, label): t for a, t in get_local_type(typed).items()}
    for a in grid.names:
        if a not in types:
            raise RuleCheckError(f"rulecheck: {label} has no type on mesh axis {a!r}; the "
                                 "hook must type every axis")
    shard_dim, depth = {}, {}
    spec = get_partition_spec(typed)
    for d, entry in enumerate(normalize_partition_spec(spec) if spec is not None else ()):
        if entry is not None:
            for k, a in enumerate(entry if isinstance(entry, tuple) else (entry,)):
                shard_dim[_name_of(a, label)], depth[_name_of(a, label)] = d, k
    for a, t in types.items():
        if t is V and a not in shard_dim:
            raise RuleCheckError(
                f"rulecheck: {label} is V on {a!r} without a shard dim; a global claim "
                "needs S(i) or P there, so that the ranks' values can be put together")
    cells = {tuple(grid.coords(r)[a] for a in grid.names): t for r, t in pieces.items()}
    axes = list(grid.names)
    # the inner axis of a dim sharded by several folds first
    for a in sorted(grid.names, key=lambda n: -depth.get(n, 0)):
        i = axes.index(a)
        rows: Dict[Tuple[int, ...], List[torch.Tensor]] = {}
        for key, t in sorted(cells.items()):
            rows.setdefault(key[:i] + key[i + 1:], []).append(t)
        typ = types[a]
        folded = {}
        for key, row in rows.items():
            if typ is P:
                folded[key] = sum(row[1:], row[0])
            elif typ is V:
                folded[key] = torch.cat(row, dim=shard_dim[a])
            else:
                for j, t in enumerate(row[1:], 1):
                    same = t.shape == row[0].shape and torch.equal(t, row[0])
                    if not same:
                        diff = (f"shapes {tuple(row[0].shape)} and {tuple(t.shape)}"
                                if t.shape != row[0].shape else
                                f"values (max difference {(t - row[0]).abs().max().item():.3g})")
                        raise RuleCheckError(
                            f"rulecheck: {label} is {typ!r} on {a!r}, but the ranks at "
                            f"coordinates 0 and {j} of {a!r} hold different {diff}: the "
                            "kernel leaves that axis varying or partial")
                folded[key] = row[0]
        cells = folded
        axes.pop(i)
    return cells[()]


def _flat(value: Any) -> List[Any]:
    return list(value) if isinstance(value, (tuple, list)) else [value]


def _compare(outputs: Any, expected: Any, values_of: Callable[[int], Dict[int, torch.Tensor]],
             grid: _Grid, rtol: float, atol: float) -> None:
    outs, want = _flat(outputs), _flat(expected)
    if len(outs) != len(want):
        raise RuleCheckError(f"rulecheck: the kernel gave {len(outs)} output(s) per rank but "
                             f"{len(want)} on the global inputs")
    for i, (typed, ref) in enumerate(zip(outs, want)):
        if not isinstance(typed, torch.Tensor):
            continue
        label = "the output" if len(outs) == 1 else f"output {i}"
        got = _reassemble(label, typed, values_of(i), grid)
        if got.shape != ref.shape:
            raise RuleCheckError(
                f"rulecheck: {label} put together by its type has shape {tuple(got.shape)}, "
                f"the kernel on the global inputs {tuple(ref.shape)}: the hook's shard dims "
                "do not describe the kernel")
        if not torch.allclose(got.to(ref.dtype), ref, rtol=rtol, atol=atol):
            types = {_name_of(a, label): t for a, t in get_local_type(typed).items()}
            spec = get_partition_spec(typed)
            raise RuleCheckError(
                f"rulecheck: {label} put together by its type {types}"
                f"{' ' + repr(spec) if spec is not None else ''} differs from the kernel on "
                f"the global inputs (max difference "
                f"{(got.to(ref.dtype) - ref).abs().max().item():.3g}): what the hook says is "
                "sharded or partial is not what the kernel computes")


# ---- the two ways of running the ranks ---------------------------------------

def _names_a_group(args: Sequence[Any], grid: _Grid) -> bool:
    return any(isinstance(a, str) and a in grid.sizes for a in args)


def _global_run_plain(cls: type, args: Tuple[Any, ...], grid: _Grid) -> Any:
    with set_current_mesh(grid.axes()), torch.no_grad():
        return cls.apply(*args)


def _run_plain(cls: type, args: Tuple[Any, ...], placements: Mapping[str, Any], grid: _Grid,
               expected: Any, rtol: float, atol: float) -> None:
    bound, inputs = _inputs(cls, args, placements, grid)
    outs = []
    with set_current_mesh(grid.axes()):
        for rank in range(grid.world):
            call = [inputs[n].annotated(inputs[n].piece(rank)) if n in inputs else v
                    for n, v in bound.items()]
            with typecheck(local=False):
                outs.append(cls.apply(*call))
        if expected is None:
            with torch.no_grad():
                expected = cls.apply(*args)
        _compare(outs[0], expected, lambda i: {r: _flat(o)[i] for r, o in enumerate(outs)},
                 grid, rtol, atol)


def _fake_world(size: int) -> None:
    from torch.testing._internal.distributed.fake_pg import FakeStore
    _reset_axis_state()
    dist.init_process_group(backend="fake", rank=0, world_size=size, store=FakeStore())


def _end_fake_world() -> None:
    dist.destroy_process_group()
    _reset_axis_state()


def _rank_queries(device_mesh: Any, grid: _Grid) -> Any:
    """``dist.get_rank`` per simulated rank: every rank of LocalTensorMode
    lives in this process, so torch's answer would be 0 for all.  The answer
    is a per-rank SymInt, for the world or for one mesh axis' group."""
    from torch.distributed._local_tensor import LocalIntNode
    groups = [(device_mesh.get_group(n), n) for n in grid.names]

    def get_rank(group: Any = None) -> Any:
        if group is None:
            return torch.SymInt(LocalIntNode({r: r for r in range(grid.world)}))
        for g, n in groups:
            if g is group:
                return torch.SymInt(LocalIntNode({r: grid.coords(r)[n]
                                                  for r in range(grid.world)}))
        raise RuleCheckError("rulecheck: the kernel asked dist.get_rank about a process group "
                             "that is not a mesh axis' group; only groups passed as arguments "
                             "(a string naming a mesh axis) are simulated")

    return mock.patch.object(dist, "get_rank", get_rank)


def _global_run_local(cls: type, args: Tuple[Any, ...], grid: _Grid) -> Any:
    """The kernel on the global inputs, every group a world of one rank."""
    from torch.distributed._local_tensor import LocalTensor, LocalTensorMode
    from torch.distributed.device_mesh import init_device_mesh
    _fake_world(1)
    try:
        device_mesh = init_device_mesh("cpu", (1,) * len(grid.names),
                                       mesh_dim_names=tuple(grid.names))
        with LocalTensorMode(1) as mode, set_current_mesh(device_mesh), torch.no_grad():
            call = [mode.rank_map(lambda r, v=a: v.clone()) if isinstance(a, torch.Tensor)
                    else device_mesh.get_group(a) if isinstance(a, str) and a in grid.sizes
                    else a for a in args]
            out = cls.apply(*call)

        def plain(v: Any) -> Any:
            return v._local_tensors[0] if isinstance(v, LocalTensor) else v

        return type(out)(plain(v) for v in out) if isinstance(out, (tuple, list)) else plain(out)
    finally:
        _end_fake_world()


def _run_local(cls: type, args: Tuple[Any, ...], placements: Mapping[str, Any], grid: _Grid,
               expected: Any, rtol: float, atol: float) -> None:
    from torch.distributed._local_tensor import LocalTensor, LocalTensorMode
    from torch.distributed.device_mesh import init_device_mesh
    if dist.is_initialized():
        raise RuleCheckError("rulecheck: local_tensor_mode sets up its own fake process "
                             "group; call it with none initialized")
    if expected is None:
        expected = _global_run_local(cls, args, grid)
    _fake_world(grid.world)
    try:
        device_mesh = init_device_mesh("cpu", tuple(grid.sizes[n] for n in grid.names),
                                       mesh_dim_names=tuple(grid.names))
        with LocalTensorMode(grid.world) as mode, set_current_mesh(device_mesh), \
                _rank_queries(device_mesh, grid):
            bound, inputs = _inputs(cls, args, placements, grid)
            call = []
            for n, v in bound.items():
                if n in inputs:
                    call.append(inputs[n].annotated(mode.rank_map(inputs[n].piece)))
                elif isinstance(v, str) and v in grid.sizes:
                    call.append(device_mesh.get_group(v))
                else:
                    call.append(v)
            with typecheck(local=False):
                outs = cls.apply(*call)

            def values_of(i: int) -> Dict[int, torch.Tensor]:
                out = _flat(outs)[i]
                if not isinstance(out, LocalTensor):
                    raise RuleCheckError(f"rulecheck: output {i} is not a LocalTensor; did the "
                                         "kernel run under LocalTensorMode?")
                return dict(out._local_tensors)

            _compare(outs, expected, values_of, grid, rtol, atol)
    finally:
        _end_fake_world()


def _check(cls: type, args: Tuple[Any, ...], placements: Mapping[str, Any], grid: _Grid,
           expected: Any, rtol: float, atol: float, local_tensor_mode: bool) -> None:
    if local_tensor_mode:
        _run_local(cls, args, placements, grid, expected, rtol, atol)
    elif _names_a_group(args, grid):
        raise RuleCheckError("rulecheck: an argument names a mesh axis as a process group; "
                             "pass local_tensor_mode=True to run the ranks under "
                             "LocalTensorMode with a fake process group")
    else:
        _run_plain(cls, args, placements, grid, expected, rtol, atol)


# ---- enumeration ---------------------------------------------------------------

def _axis_candidates(tensors: Mapping[str, torch.Tensor], axis: str,
                     n: int) -> List[RuleCheckPlacement]:
    """The placements tried on one axis of size ``n``: all R; for each dim
    size divisible by ``n``, every non-empty set of the tensors with a dim
    of that size sharded there together (every choice of dim); each floating
    tensor P alone, and all of them P together; all I."""
    names = list(tensors)
    out: List[RuleCheckPlacement] = []
    seen = set()

    def add(types: Mapping[str, Any]) -> None:
        key = tuple(repr(types[nm]) for nm in names)
        if key not in seen:
            seen.add(key)
            out.append({nm: {axis: types[nm]} for nm in names})

    add({nm: R for nm in names})
    dims_of_size: Dict[int, Dict[str, List[int]]] = {}
    for nm, t in tensors.items():
        for d, size in enumerate(t.shape):
            if size % n == 0:
                dims_of_size.setdefault(size, {}).setdefault(nm, []).append(d)
    for per_tensor in dims_of_size.values():
        owners = list(per_tensor)
        for k in range(1, len(owners) + 1):
            for chosen in combinations(owners, k):
                for dims in product(*(per_tensor[nm] for nm in chosen)):
                    add({nm: R for nm in names} | {nm: S(d) for nm, d in zip(chosen, dims)})
    floating = [nm for nm in names if tensors[nm].is_floating_point()]
    for nm in floating:
        add({**{m: R for m in names}, nm: P})
    if len(floating) > 1:
        add({nm: P if nm in floating else R for nm in names})
    add({nm: I for nm in names})
    return out


def _hook_refusal(cls: type, args: Tuple[Any, ...], placement: Mapping[str, Any],
                  grid: _Grid) -> Optional[str]:
    """Why the hook refuses ``placement`` (run alone on rank 0's annotated
    pieces), or None.  A placement that cannot be built is refused too.  A
    hook that types given outputs (``outs`` first) needs the kernel's
    outputs: only building is checked for it."""
    try:
        bound, inputs = _inputs(cls, args, placement, grid)
        returns_types, _ = hook_shape(cls)
        if returns_types:
            with set_current_mesh(grid.axes()):
                local = {n: inputs[n].annotated(inputs[n].piece(0)) if n in inputs else v
                         for n, v in bound.items()}
                with typecheck(local=False):
                    cls.spmd_typecheck(**hook_kwargs(cls, local))
    except (SpmdTypeError, RuleCheckError) as e:
        return str(e).splitlines()[0]
    return None


def _text(placement: Mapping[str, Mapping[str, Any]]) -> str:
    return "{" + ", ".join(
        f"{n}: {{{', '.join(f'{a}: {t!r}' for a, t in p.items())}}}"
        for n, p in placement.items()) + "}"


def rulecheck(cls: type, args: Sequence[Any],
              placements: Optional[Mapping[str, Union[SpmdType,
                                                      Mapping[str, PerMeshAxisSpmdType]]]] = None,
              *, mesh: Optional[Mapping[str, int]] = None, rtol: float = 1e-4,
              atol: float = 1e-5, local_tensor_mode: bool = False) -> Optional[RuleCheckReport]:
    """Check that ``cls.spmd_typecheck`` says what ``cls.forward`` computes.

    ``args`` are the positional arguments of ``cls.apply`` with *global*
    tensors; a string that names a mesh axis stands for that axis' process
    group (then ``local_tensor_mode=True`` is needed).  ``placements`` maps
    each tensor argument (by its ``forward`` name) to the placement to test
    (``{axis name: R|I|V|P|S(i)}`` covering every axis, or an ``SpmdType``)
    and needs ``mesh`` (axis name -> size).  Without it (recommended) the
    placements of each axis are enumerated -- all R; every set of tensors
    sharded together on dims of one size; each floating tensor P alone and
    all together; all I -- and their product over the axes is tried;
    ``mesh`` defaults to the one string argument's axis of size 2 (or
    ``{"shard": 2}``).  Outputs put together by their derived types are
    compared with the kernel on the global inputs within ``rtol``/``atol``;
    ranks an R or I type says agree must agree exactly.

    Returns a :class:`RuleCheckReport` when enumerating, else None.  Raises
    :class:`RuleCheckError` when the outputs do not match (or the hook
    refused every enumerated placement), ``SpmdTypeError`` when the hook
    refuses explicit placements.

    >>> import torch, cspmd.rules as rules
    >>> class Cumsum(torch.autograd.Function):  # mixes values along j
    ...     @staticmethod
    ...     def forward(ctx, x):
    ...         return x.cumsum(-1)
    ...     @staticmethod
    ...     def spmd_typecheck(*, x):
    ...         return rules.einsum("ij->ij", x)
    >>> try:
    ...     rulecheck(Cumsum, (torch.randn(4, 6),))
    ... except RuleCheckError as e:
    ...     print(str(e).splitlines()[0][:40])
    rulecheck: the output put together by it
    """
    args = tuple(args)
    if placements is not None:
        if mesh is None:
            raise TypeError("rulecheck: explicit placements need mesh= (axis name -> size)")
        _check(cls, args, placements, _Grid(mesh), None, rtol, atol, local_tensor_mode)
        return None
    if mesh is None:
        strings = [a for a in args if isinstance(a, str)]
        if len(strings) > 1:
            raise TypeError("rulecheck: several string arguments; pass mesh= to say which "
                            f"name process groups (strings: {strings})")
        mesh = {strings[0] if strings else "shard": 2}
    grid = _Grid(mesh)
    tensors = {n: v for n, v in bind_forward_args(cls, args).items()
               if isinstance(v, torch.Tensor)}
    candidates = []
    for parts in product(*(_axis_candidates(tensors, a, grid.sizes[a]) for a in grid.names)):
        merged: RuleCheckPlacement = {n: {} for n in tensors}
        for part in parts:
            for n, types in part.items():
                merged[n].update(types)
        candidates.append(merged)
    if local_tensor_mode and dist.is_initialized():
        raise RuleCheckError("rulecheck: local_tensor_mode sets up its own fake process "
                             "group; call it with none initialized")
    # the kernel on the global inputs does not depend on the placement
    if local_tensor_mode:
        expected = _global_run_local(cls, args, grid)
    elif not _names_a_group(args, grid):
        expected = _global_run_plain(cls, args, grid)
    else:
        expected = None
    returns_types, _ = hook_shape(cls)
    report = RuleCheckReport()
    for placement in candidates:
        why = _hook_refusal(cls, args, placement, grid)
        if why is not None:
            report.rejected.append(RuleCheckRejection(placement, why))
            continue
        try:
            _check(cls, args, placement, grid, expected, rtol, atol, local_tensor_mode)
        except SpmdTypeError as e:
            if returns_types:  # the hook accepted it above: running it must not fail
                raise RuleCheckError(
                    f"rulecheck: the hook accepts this placement but running it failed: "
                    f"{str(e).splitlines()[0]}\n  under placements {_text(placement)}") from e
            # a hook that types given outputs refuses a placement only here
            report.rejected.append(RuleCheckRejection(placement, str(e).splitlines()[0]))
        except RuleCheckError as e:
            raise RuleCheckError(f"{e}\n  under placements {_text(placement)}") from e
        else:
            report.checked.append(placement)
    if not report.checked:
        raise RuleCheckError(
            "rulecheck: the hook refused every placement tried, so nothing was checked: " +
            "; ".join(f"{_text(p)}: {why}" for p, why in report.rejected))
    return report
