"""User-written types -> the core's type ids, and back.

A type as annotations write it (``{axis: R|I|V|P|S(i)}`` or a bare type,
plus a PartitionSpec) becomes a core type id here; the core validates and
interns it.  Below cspmd.runtime and cspmd.scalar, which both intern.
"""

from . import _errors
from ._errors import SpmdTypeError
from ._lib import ops
from .mesh import MeshAxis, current_mesh, normalize_axis
from .types import PerMeshAxisLocalSpmdType, Shard, _empty_entry, ltype_code, ltype_of

__all__ = ["type_to_dict"]


def _spec_encoding(spec, ndim):
    """[ndim, n0, axes..., n1, ...] for the core; [] for no spec."""
    if spec is None:
        return []
    if len(spec) != ndim:
        raise SpmdTypeError(f"PartitionSpec {spec!r} has {len(spec)} entries but the tensor has "
                            f"{ndim} dims")
    out = [ndim]
    for i, entry in enumerate(spec):
        if entry == ():
            raise ValueError(_empty_entry(i))
        axes = [] if entry is None else list(entry) if isinstance(entry, tuple) else [entry]
        axes = [normalize_axis(a) for a in axes]
        axes = [a for a in axes if a.size() > 1]
        out.append(len(axes))
        out.extend(a.id for a in axes)
    return out


def _type_id(type_, ndim, partition_spec=None):
    """Intern a user-written type (dict, or a bare R/I/V/P) for a tensor of ndim dims."""
    if isinstance(type_, (PerMeshAxisLocalSpmdType, Shard)):
        mesh = current_mesh()
        if mesh is None:
            raise SpmdTypeError(f"assert_type with a bare type {type_!r} needs a current mesh "
                                "(set_current_mesh), or pass {axis: type}")
        type_ = {a: type_ for a in mesh}
    if not isinstance(type_, dict):
        raise TypeError(f"expected a dict {{axis: type}} or one of R, I, V, P, got "
                        f"{type(type_).__name__}")
    # Two keys for one axis (its MeshAxis and its ProcessGroup, as in
    # ``t = dict(get_local_type(x)); t[group] = I``): the later one wins, as
    # a dict assignment does (spmd_types 0.2.x; docs/differences.md).
    entries = {}
    for key, t in type_.items():
        axis = normalize_axis(key)
        code = ltype_code(t, f"type on axis {axis!r}")
        if axis.size() == 1:
            continue
        entries.pop(axis.id, None)
        entries[axis.id] = (t, code)
    axes, codes, shard_axes, shard_dims = [], [], [], []
    for axis_id, (t, code) in entries.items():
        if isinstance(t, Shard):
            shard_axes.append(axis_id)
            shard_dims.append(t.dim)
        axes.append(axis_id)
        codes.append(code)
    if shard_axes:
        if partition_spec is not None:
            raise SpmdTypeError("S(i) entries cannot be combined with an explicit partition_spec")
        # The core lays the S(d) entries out as a spec (one axis per dim).
        return ops.type_make(axes, codes, ops.spec_from_shards(shard_axes, shard_dims, ndim))
    # Spec axes the dict does not name are V: the core adds them.
    return ops.type_make(axes, codes, _spec_encoding(partition_spec, ndim))


def type_to_dict(type_id):
    """``{MeshAxis: R|I|V|P}`` of a core type id."""
    flat = ops.type_entries(type_id)
    return {MeshAxis(flat[i]): ltype_of(flat[i + 1]) for i in range(0, len(flat), 2)}


_errors._decode_type = type_to_dict  # SpmdTypeError.operands[i].type
