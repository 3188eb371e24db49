"""Annotations inside torch.compile'd code traced for a checked call.

While Dynamo traces a frame for a call under ``typecheck()`` (cspmd.compiled
sets the flag), ``assert_type`` becomes a marker node: a call of an allowed
function that Dynamo keeps in the graph with its arguments, which must be
tensors and plain constants, so the type arguments are frozen to nested
tuples of str / int / None and thawed when the marker runs -- where cspmd
checks the graph; the backend never sees it (cspmd.compiled removes it).

Dynamo learns of the markers when the first typecheck() region opens
(``install``), not when cspmd is imported: importing torch._dynamo imports
FSDP, which looks for spmd_types once, at import, and ``python -m
cspmd.run`` must have put its alias in place before that.
"""

import torch
import torch.fx

__all__ = ["marking", "mark_annotation", "eager_annotation", "is_marker"]

# runtime.assert_type, put here by cspmd.runtime (a module above this one).
_assert_type = [None]

_tracing = [0]  # >0 while Dynamo traces a frame for a checked call


def _marking() -> bool:
    """True while Dynamo traces for a checked call: annotations then become
    marker nodes.  A constant for Dynamo once installed, so it adds no guard."""
    return _tracing[0] > 0


marking = _marking


def _freeze(obj):
    from .mesh import MeshAxis
    from .types import PartitionSpec, PerMeshAxisLocalSpmdType, Shard, SpmdType
    if obj is None or isinstance(obj, (str, int)):
        return obj
    if isinstance(obj, PerMeshAxisLocalSpmdType):
        return ("lt", obj.value)
    if isinstance(obj, Shard):
        return ("S", obj.dim)
    if isinstance(obj, MeshAxis):
        return ("axis", obj._id)
    if isinstance(obj, PartitionSpec):
        return ("spec",) + tuple(_freeze(e) for e in obj)
    if isinstance(obj, tuple):
        return ("tuple",) + tuple(_freeze(e) for e in obj)
    if isinstance(obj, dict):
        return ("dict",) + tuple((_freeze(k), _freeze(v)) for k, v in obj.items())
    if isinstance(obj, SpmdType):
        return ("spmd", _freeze(obj.local_type), _freeze(obj.partition_spec))
    return _UNFROZEN


_UNFROZEN = ("unfrozen",)


def _frozen(obj):
    """True when _freeze got every part (a sentinel, not an exception: this
    runs while Dynamo traces)."""
    if obj == _UNFROZEN:
        return False
    if isinstance(obj, tuple):
        return all(_frozen(e) for e in obj)
    return True


def _thaw(obj):
    from .mesh import MeshAxis
    from .types import PartitionSpec, PerMeshAxisLocalSpmdType, Shard, SpmdType
    if not isinstance(obj, tuple):
        return obj
    tag, rest = obj[0], obj[1:]
    if tag == "lt":
        return PerMeshAxisLocalSpmdType(rest[0])
    if tag == "S":
        return Shard(rest[0])
    if tag == "axis":
        return MeshAxis(rest[0])
    if tag == "spec":
        return PartitionSpec(*(_thaw(e) for e in rest))
    if tag == "tuple":
        return tuple(_thaw(e) for e in rest)
    if tag == "dict":
        return {_thaw(k): _thaw(v) for k, v in rest}
    if tag == "spmd":
        return SpmdType(_thaw(rest[0]), _thaw(rest[1]))
    raise ValueError(f"cspmd: unknown frozen type argument {obj!r}")


def _annotation(tensor, types, partition_spec):
    """A marker node: ``assert_type(tensor, *types, partition_spec=...)``
    where the graph is checked.  Nothing while Dynamo traces (fake tensors)."""
    if torch.compiler.is_compiling() or isinstance(tensor, torch._subclasses.FakeTensor):
        return None
    _assert_type[0](tensor, *(_thaw(t) for t in types), partition_spec=_thaw(partition_spec))
    return None


torch.fx.node._side_effectful_functions.add(_annotation)  # kept with no users
_annotation_in_graph = _annotation


def _run_eagerly(fn, *args, **kwargs):
    """Run an annotation eagerly (a graph break): for arguments that cannot
    be frozen, and for the annotations that read another tensor's type."""
    return fn(*args, **kwargs)


_eager = _run_eagerly


def install():
    """Tell Dynamo what the markers are; idempotent.  Until then nothing
    is traced for a checked call (_tracing stays 0), so no marker is made."""
    global marking, _annotation_in_graph, _eager
    if marking is not _marking:
        return
    import torch._dynamo
    marking = torch._dynamo.assume_constant_result(_marking)
    _annotation_in_graph = torch._dynamo.allow_in_graph(_annotation)
    _eager = torch._dynamo.disable(_run_eagerly)


def mark_annotation(tensor, types, partition_spec):
    """assert_type while Dynamo traces for a checked call."""
    frozen_types = tuple(_freeze(t) for t in types)
    frozen_spec = _freeze(partition_spec)
    if _frozen(frozen_types) and _frozen(frozen_spec):
        _annotation_in_graph(tensor, frozen_types, frozen_spec)
        return tensor
    return _eager(_assert_type[0], tensor, *types, partition_spec=partition_spec)


def eager_annotation(fn, *args, **kwargs):
    """An annotation that reads types (assert_type_like, ...) while Dynamo
    traces for a checked call: run eagerly, between two checked graphs."""
    return _eager(fn, *args, **kwargs)


def is_marker(node):
    """True for a marker node of an FX graph."""
    return node.op == "call_function" and node.target is _annotation
