"""cspmd: local SPMD types for PyTorch, checked by a C kernel on a dispatch key.

``import cspmd as spmd`` runs code written for ``spmd_types``.  ``typecheck()``
lives in ``cspmd.checker``.
"""

from .checker import TYPE_CHECKING, is_type_checking, no_typecheck
from ._errors import DTensorPropagationError, RedistributeError, SpmdTypeError
from .collectives import (all_gather, all_reduce, all_to_all, convert, invariant_to_replicate,
                          redistribute, reduce_scatter, reinterpret, shard, unshard)
from .mesh import (MeshAxis, current_mesh, current_mesh_all_names, current_mesh_names,
                   normalize_axis, set_current_mesh)
from .runtime import (assert_type, assert_type_like, get_local_type, get_partition_spec,
                      has_local_type, mutate_type, set_dist)
from .scalar import Scalar
from .types import (I, Invariant, P, Partial, PartitionSpec, PerMeshAxisLocalSpmdType, R,
                    Replicate, S, Shard, V, Varying)


__all__ = [
    "R", "I", "V", "P", "Replicate", "Invariant", "Varying", "Partial", "S", "Shard",
    "PerMeshAxisLocalSpmdType", "PartitionSpec", "SpmdTypeError", "RedistributeError",
    "DTensorPropagationError", "MeshAxis", "set_current_mesh", "current_mesh",
    "current_mesh_names", "current_mesh_all_names", "normalize_axis", "assert_type",
    "assert_type_like", "get_local_type", "has_local_type", "mutate_type",
    "get_partition_spec", "set_dist", "all_reduce", "all_gather", "reduce_scatter",
    "all_to_all", "reinterpret", "convert", "redistribute", "shard", "unshard",
    "invariant_to_replicate", "Scalar", "is_type_checking",
    "no_typecheck", "TYPE_CHECKING",
]
