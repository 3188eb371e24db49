"""The local SPMD types: R, I, V, P and Shard(d), and partition specs.

Each value carries the integer code the C core uses (read from the library); the core does all
reasoning over those codes.
"""

import dataclasses
import enum
import typing
from typing import Any, Sequence, Union

from ._codes import LT
from ._lib import ops as _ops
from ._errors import DTensorPropagationError, RedistributeError, SpmdTypeError
from .mesh import MeshAxis  # noqa: F401  (the reference's types module holds it)

__all__ = [
    "PerMeshAxisLocalSpmdType", "R", "I", "V", "P", "Replicate", "Invariant", "Varying",
    "Partial", "Shard", "S", "PartitionSpec", "PerMeshAxisSpmdType", "PerMeshAxisSpmdTypes",
    "LocalSpmdType", "SpmdType", "SpmdTypeError", "RedistributeError",
    "DTensorPropagationError", "normalize_axis", "normalize_mesh", "normalize_local_type",
    "normalize_partition_spec", "shard_types_to_partition_spec",
    "partition_spec_to_shard_types", "partition_spec_get_shard", "to_local_type",
]


class PerMeshAxisLocalSpmdType(enum.Enum):
    """The local type of a tensor on one mesh axis.

    >>> R, R.backward_type()
    (R, P)
    """

    R = LT.R  # Replicate: same value on every rank, used independently
    I = LT.I  # noqa: E741  Invariant: same value, one computation duplicated
    V = LT.V  # Varying: a different value per rank
    P = LT.P  # Partial: the true value is the pending sum over ranks

    def __repr__(self):
        return self.name

    # str() too: "R" in every message and f-string, never the enum's long
    # "PerMeshAxisLocalSpmdType.R" (which the reference prints).
    __str__ = __repr__

    def backward_type(self) -> "PerMeshAxisLocalSpmdType":
        """The type of this type's gradient: R<->P, I->I, V->V."""
        return _DUAL[self]


R = Replicate = PerMeshAxisLocalSpmdType.R
I = Invariant = PerMeshAxisLocalSpmdType.I  # noqa: E741
V = Varying = PerMeshAxisLocalSpmdType.V
P = Partial = PerMeshAxisLocalSpmdType.P
_BY_CODE = {t.value: t for t in PerMeshAxisLocalSpmdType}
# The core's duality (R<->P, I, V), read once.
_DUAL = {t: _BY_CODE[_ops.ltype_dual(t.value)] for t in PerMeshAxisLocalSpmdType}


class Shard:
    """``S(d)``: Varying, and the global tensor is the concatenation of the
    per-rank tensors along dim ``d``.

    >>> S(0), S(0) == Shard(0), S(1).backward_type()
    (S(0), True, S(1))
    """

    __slots__ = ("dim",)

    def __init__(self, dim: int) -> None:
        if not isinstance(dim, int) or isinstance(dim, bool):
            raise TypeError(f"Shard dim must be an int, got {dim!r}")
        object.__setattr__(self, "dim", dim)

    def __setattr__(self, name, value):
        raise AttributeError("Shard is immutable")

    def __reduce__(self):
        return (Shard, (self.dim,))  # pickle/copy through __init__

    def __repr__(self):
        return f"S({self.dim})"

    def __eq__(self, other):
        return isinstance(other, Shard) and other.dim == self.dim

    def __hash__(self):
        return hash(("Shard", self.dim))

    def backward_type(self) -> "Shard":
        """A shard's gradient is sharded the same way."""
        return self


S = Shard


def ltype_code(t, what="type"):
    """The core's code for R/I/V/P (S(d) counts as V)."""
    if isinstance(t, PerMeshAxisLocalSpmdType):
        return t.value
    if isinstance(t, Shard):
        return V.value
    raise TypeError(f"{what} must be one of R, I, V, P or S(i), got {t!r}")


def ltype_of(code):
    """The type for a core code."""
    return _BY_CODE[code]


class PartitionSpec(tuple):
    """One entry per tensor dim: None, a mesh axis, or a tuple of axes
    (major to minor).

    >>> PartitionSpec("tp", None)
    PartitionSpec(tp, None)
    """

    def __new__(cls, *args: typing.Any) -> "PartitionSpec":
        # Kept as written (an empty tuple entry too, as the reference does);
        # normalize_partition_spec and assert_type validate.
        return super().__new__(cls, args)

    def __getnewargs__(self) -> tuple:
        return tuple(self)  # pickle/copy rebuild PartitionSpec(*entries)

    def __repr__(self):
        def one(e):
            if isinstance(e, tuple):
                return "(" + ", ".join(_axis_text(a) for a in e) + ")"
            return "None" if e is None else _axis_text(e)

        return "PartitionSpec(" + ", ".join(one(e) for e in self) + ")"

    def axes_with_partition_spec(self):
        """The set of (normalized) mesh axes this spec mentions.

        >>> from cspmd.mesh import MeshAxis
        >>> PartitionSpec(MeshAxis.of(4, 1), None).axes_with_partition_spec()
        {MeshAxis(4:1)}
        """
        out = set()
        for e in normalize_partition_spec(self):
            if e is not None:
                out.update(e if isinstance(e, tuple) else (e,))
        return out


def _axis_text(a):
    return a if isinstance(a, str) else repr(a)


# ---- aliases (the reference's type names) ---------------------------------

PerMeshAxisSpmdType = typing.Union[PerMeshAxisLocalSpmdType, Shard]
"""One axis' type as written in annotations: R, I, V, P or S(i)."""
PerMeshAxisSpmdTypes = typing.Dict[typing.Any, PerMeshAxisSpmdType]
"""``{axis: R|I|V|P|S(i)}`` as written in annotations."""
PerMeshAxisSpmdTypesArg = typing.Mapping[typing.Any, PerMeshAxisSpmdType]
"""What annotations accept for ``{axis: type}``: any mapping."""
LocalSpmdType = typing.Dict[typing.Any, PerMeshAxisLocalSpmdType]
"""``{MeshAxis: R|I|V|P}``: a tensor's stored local type."""


def to_local_type(typ: "PerMeshAxisSpmdType") -> PerMeshAxisLocalSpmdType:
    """S(i) -> V; R, I, V, P unchanged.

    >>> to_local_type(S(0)), to_local_type(R)
    (V, R)
    """
    if isinstance(typ, Shard):
        return V
    if isinstance(typ, PerMeshAxisLocalSpmdType):
        return typ
    raise TypeError(f"to_local_type: expected one of R, I, V, P or S(i), got {typ!r}")


# ---- normalization (axes resolved by cspmd.mesh, validated by the core) ---

def normalize_axis(axis: Any) -> "MeshAxis":
    """A MeshAxis from a MeshAxis, a ProcessGroup or a name in the current mesh.

    >>> from cspmd.mesh import MeshAxis
    >>> normalize_axis(MeshAxis.of(4, 1))
    MeshAxis(4:1)
    """
    from .mesh import normalize_axis as _n
    return _n(axis)


def normalize_mesh(axes: typing.Iterable[typing.Any]) -> typing.FrozenSet["MeshAxis"]:
    """Drop size-1 axes and require the rest to be mutually orthogonal
    (SpmdTypeError otherwise); returns a frozenset of MeshAxis.

    >>> from cspmd.mesh import MeshAxis
    >>> sorted(map(repr, normalize_mesh([MeshAxis.of(4, 1), MeshAxis.of(2, 4)])))
    ['MeshAxis(2:4)', 'MeshAxis(4:1)']
    """
    from ._lib import ops
    if isinstance(axes, (str, bytes)) or not hasattr(axes, "__iter__"):
        raise TypeError(f"normalize_mesh: axes must be a collection of mesh axes, got "
                        f"{type(axes).__name__}")
    out = frozenset(a for a in (normalize_axis(x) for x in axes) if a.size() > 1)
    ops.axes_check_orthogonal([a.id for a in out])
    return out


def normalize_local_type(spmd_type: typing.Mapping[Any, Any]
                         ) -> typing.Dict["MeshAxis", PerMeshAxisLocalSpmdType]:
    """``{MeshAxis: R|I|V|P}`` from a dict with any axis keys: names
    resolved, size-1 axes dropped, orthogonality checked by the core.
    Values must be R, I, V or P (TypeError; S(i) is not a stored type).

    >>> from cspmd.mesh import MeshAxis
    >>> normalize_local_type({MeshAxis.of(4, 1): R, MeshAxis.of(1, 1): V})
    {MeshAxis(4:1): R}
    """
    from ._lib import ops
    if not isinstance(spmd_type, dict):
        raise TypeError(f"normalize_local_type: expected a dict {{axis: R|I|V|P}}, got "
                        f"{type(spmd_type).__name__}")
    out = {}
    for axis, t in spmd_type.items():
        if isinstance(t, Shard):
            raise TypeError(f"Shard type {t!r} on axis {axis!r} cannot be stored as a local SPMD "
                            "type. Shard is only valid as src/dst in collective operations. "
                            "Use V instead for local type tracking.")
        if not isinstance(t, PerMeshAxisLocalSpmdType):
            raise TypeError(f"Expected PerMeshAxisLocalSpmdType (R, I, V, or P) on axis "
                            f"{axis!r}, got {t!r}")
        a = normalize_axis(axis)
        if a.size() > 1:
            out[a] = t
    ops.axes_check_orthogonal([a.id for a in out])
    return out


def _empty_entry(i):
    return (f"PartitionSpec entry at dim {i} is an empty tuple. Use None for replicated "
            "dimensions.")


def as_partition_spec(spec: typing.Any) -> typing.Any:
    """A plain tuple or list given where a PartitionSpec goes, as
    spmd_types 0.2.x took it (torchtitan's layouts write ``(("dp", "cp"),
    "tp", None)``), as a PartitionSpec (a list entry as a tuple of axes);
    anything else as it is.

    >>> as_partition_spec(("tp", None))
    PartitionSpec(tp, None)
    """
    if isinstance(spec, PartitionSpec) or not isinstance(spec, (tuple, list)):
        return spec
    return PartitionSpec(*(tuple(e) if isinstance(e, list) else e for e in spec))


def normalize_partition_spec(spec: typing.Sequence[typing.Any]) -> "PartitionSpec":
    """Resolve names, drop size-1 axes (a tuple left with one axis becomes
    that axis, with none becomes None) and require every axis of the spec
    to be mutually orthogonal (so no axis twice).

    >>> from cspmd.mesh import MeshAxis
    >>> normalize_partition_spec(PartitionSpec((MeshAxis.of(4, 1), MeshAxis.of(1, 1)), None))
    PartitionSpec(MeshAxis(4:1), None)
    """
    from ._lib import ops
    if not isinstance(spec, (PartitionSpec, tuple, list)):
        raise TypeError(f"normalize_partition_spec: expected a PartitionSpec, got "
                        f"{type(spec).__name__}")
    entries, every = [], []
    for i, e in enumerate(spec):
        if e is None:
            entries.append(None)
            continue
        if isinstance(e, (tuple, list)):
            if not e:
                raise ValueError(_empty_entry(i))
            axes = [a for a in (normalize_axis(x) for x in e) if a.size() > 1]
        else:
            axes = [a for a in (normalize_axis(e),) if a.size() > 1]
        every.extend(axes)
        entries.append(None if not axes else axes[0] if len(axes) == 1 else tuple(axes))
    ops.axes_check_orthogonal([a.id for a in every])
    return PartitionSpec(*entries)


def format_axis(axis: typing.Any) -> str:
    """An axis as error messages show it: a MeshAxis or a name by its repr,
    a ProcessGroup as its MeshAxis.

    >>> format_axis("tp")
    "'tp'"
    """
    if isinstance(axis, str) or type(axis).__name__ == "MeshAxis":
        return repr(axis)
    return repr(normalize_axis(axis))


def normalize_dim_sharding(dim_sharding: typing.Any) -> typing.Sequence[str]:
    """A DimSharding (None, a name, or names) as a sequence of names.

    >>> normalize_dim_sharding("tp"), normalize_dim_sharding(None)
    (('tp',), ())
    """
    if dim_sharding is None:
        return ()
    if isinstance(dim_sharding, str):
        return (dim_sharding,)
    return dim_sharding


# ---- S(i) <-> PartitionSpec ---------------------------------------------

def shard_types_to_partition_spec(types: typing.Mapping[Any, Any], ndim: int,
                                  axis_order: typing.Optional[typing.Sequence[Any]] = None
                                  ) -> "PartitionSpec":
    """The PartitionSpec (length ``ndim``) of the S(d) entries of ``types``
    (R/I/V/P ignored).  Axes in ``axis_order`` come first on their dim;
    two unordered axes on one dim raise SpmdTypeError.

    >>> from cspmd.mesh import MeshAxis
    >>> tp = MeshAxis.of(4, 1)
    >>> shard_types_to_partition_spec({tp: S(1)}, 2)
    PartitionSpec(None, MeshAxis(4:1))
    """
    if not isinstance(types, dict):
        raise TypeError(f"shard_types_to_partition_spec: types must be a dict, got "
                        f"{type(types).__name__}")
    if not isinstance(ndim, int) or isinstance(ndim, bool) or ndim < 0:
        raise TypeError(f"shard_types_to_partition_spec: ndim must be a non-negative int, got "
                        f"{ndim!r}")
    # The core places each S(d) entry (cspmd_shards_layout); axis_order is
    # passed as the indices of the entries it names.
    shards = [(axis, t.dim) for axis, t in types.items() if isinstance(t, Shard)]
    index = {axis: i for i, (axis, _) in enumerate(shards)}
    order = [index.get(axis, -1) for axis in axis_order or ()]
    dims, places = _ops.shards_layout([axis_key(a) for a, _ in shards], [d for _, d in shards],
                                      order, ndim, True)
    by_dim = {}
    for (axis, _), d, pos in sorted(zip(shards, dims, places), key=lambda e: e[2]):
        by_dim.setdefault(d, []).append(axis)
    entries = [None] * ndim
    for d, axes in by_dim.items():
        entries[d] = axes[0] if len(axes) == 1 else tuple(axes)
    return PartitionSpec(*entries)


def partition_spec_to_shard_types(spec: typing.Sequence[Any]) -> typing.Dict["MeshAxis", "Shard"]:
    """``{MeshAxis: S(dim)}`` of a PartitionSpec (normalized first).

    >>> from cspmd.mesh import MeshAxis
    >>> partition_spec_to_shard_types(PartitionSpec(None, MeshAxis.of(4, 1)))
    {MeshAxis(4:1): S(1)}
    """
    out = {}
    for d, e in enumerate(normalize_partition_spec(spec)):
        for a in () if e is None else e if isinstance(e, tuple) else (e,):
            out[a] = Shard(d)
    return out


def partition_spec_get_shard(spec: typing.Optional[typing.Sequence[Any]],
                             axis: Any) -> typing.Optional["Shard"]:
    """``S(dim)`` if ``axis`` shards dim ``dim`` of ``spec``, else None.

    >>> from cspmd.mesh import MeshAxis
    >>> partition_spec_get_shard(PartitionSpec(MeshAxis.of(4, 1)), MeshAxis.of(4, 1))
    S(0)
    """
    if spec is None:
        return None
    a = normalize_axis(axis)
    return partition_spec_to_shard_types(spec).get(a)


# ---- axes as written -------------------------------------------------------

def axis_key(axis: Any) -> int:
    """The core's key for an axis as an annotation writes it: a MeshAxis's
    id, a name's interned key (no mesh needed), a process group's axis."""
    if isinstance(axis, MeshAxis):
        return axis.id
    if isinstance(axis, str):
        return _ops.axis_key_of_name(axis)
    return normalize_axis(axis).id


def _resolved_key(axis: Any) -> int:
    """The id of the axis that ``axis`` names here, -1 when nothing does."""
    try:
        return normalize_axis(axis).id
    except (SpmdTypeError, TypeError, ValueError):
        return -1


# ---- SpmdType ------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class SpmdType:
    """A local type plus an optional PartitionSpec (the global SPMD type).
    ``S(i)`` entries are kept as written until applied to a tensor.

    >>> from cspmd.mesh import MeshAxis
    >>> SpmdType({MeshAxis.of(4, 1): S(0)}).local_type
    {MeshAxis(4:1): S(0)}
    """

    local_type: dict
    partition_spec: typing.Optional[PartitionSpec] = None

    def __post_init__(self):
        if not isinstance(self.local_type, dict):
            raise TypeError(f"SpmdType: local_type must be a dict {{axis: R|I|V|P|S(i)}}, got "
                            f"{type(self.local_type).__name__}")
        for axis, t in self.local_type.items():
            if not isinstance(t, (Shard, PerMeshAxisLocalSpmdType)):
                raise TypeError(f"SpmdType: type on axis {axis!r} must be one of R, I, V, P "
                                f"or S(i), got {t!r}")
        spec = self.partition_spec
        if spec is None:
            return
        if not isinstance(spec, PartitionSpec):
            if not isinstance(spec, tuple):
                raise TypeError(f"SpmdType: partition_spec must be a PartitionSpec, got "
                                f"{type(spec).__name__}")
            object.__setattr__(self, "partition_spec", PartitionSpec(*spec))
            spec = self.partition_spec
        for i, e in enumerate(spec):
            if e == ():
                raise ValueError(_empty_entry(i))
        # The core checks the local type against the spec (S(i) entries, the
        # spec's axes V), on the axes as written.
        keys = list(self.local_type)
        spec_axes = [a for e in spec for a in (() if e is None else e if isinstance(e, tuple)
                                               else (e,))]
        _ops.annotation_check_spec(
            True, [axis_key(k) for k in keys], [_resolved_key(k) for k in keys],
            [ltype_code(t) for t in self.local_type.values()],
            [t.dim if isinstance(t, Shard) else -1 for t in self.local_type.values()],
            [axis_key(a) for a in spec_axes], [_resolved_key(a) for a in spec_axes])


# ---- TensorSharding -------------------------------------------

#: Sharding of one tensor dim: None (replicated), one mesh-dim name, or a
#: sequence of names (major to minor).
DimSharding = Union[None, str, Sequence[str]]


def _normalize_dim_sharding(d, what="dim sharding"):
    if d is None:
        return ()
    if isinstance(d, str):
        return (d,)
    if isinstance(d, (list, tuple)) and all(isinstance(n, str) for n in d):
        return tuple(d)
    raise TypeError(f"{what} must be None, a mesh dim name or a sequence of names, got {d!r}")


class TensorSharding:
    """Per tensor dim, the DeviceMesh dim names it is sharded on.

    Tuple-like, but a pytree *leaf*; equal to a plain tuple with the same
    entries; supports ``+``.

    >>> TensorSharding("tp", None) == ("tp", None)
    True
    >>> TensorSharding("dp") + TensorSharding(None, "tp")
    TensorSharding('dp', None, 'tp')
    """

    __slots__ = ("_values",)

    def __init__(self, *dim_shardings):
        for i, d in enumerate(dim_shardings):
            _normalize_dim_sharding(d, f"TensorSharding entry {i}")
        object.__setattr__(self, "_values", tuple(dim_shardings))

    def __setattr__(self, name, value):
        raise AttributeError("TensorSharding is immutable")

    def __repr__(self):
        return f"TensorSharding({repr(self._values)[1:-1].rstrip(',')})"

    def __getitem__(self, i):
        return self._values[i]

    def __iter__(self):
        return iter(self._values)

    def __len__(self):
        return len(self._values)

    def __eq__(self, other):
        if isinstance(other, TensorSharding):
            return self._values == other._values
        if isinstance(other, tuple):
            return self._values == other
        return NotImplemented

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __hash__(self):
        return hash(self._values)

    def __add__(self, other):
        if isinstance(other, (TensorSharding, tuple)):
            return TensorSharding(*self._values, *tuple(other))
        return NotImplemented

    def __radd__(self, other):
        if isinstance(other, tuple):
            return TensorSharding(*other, *self._values)
        return NotImplemented

