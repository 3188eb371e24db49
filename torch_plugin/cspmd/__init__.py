"""cspmd: local SPMD types for PyTorch, checked by a C kernel on a dispatch key.

``import cspmd as spmd`` runs code written for ``spmd_types``.  ``typecheck()``
lives in ``cspmd.checker``.
"""

from . import _lib
from . import rules  # noqa: F401  (cspmd.rules: typing rules of spmd_typecheck hooks)
from . import carry as _carry  # noqa: F401  (types survive module moves, copies, loads)
from . import collectives as _coll
from .collectives import *  # noqa: F401,F403  (the collectives, API-wrapped there)
from . import compiled as _compiled  # noqa: F401  (torch.compile'd code checked under typecheck())
from ._errors import DTensorPropagationError, RedistributeError, SpmdTypeError
from ._traceback import api_boundary as _api
from ._traceback import traceback_filtering
from .checker import TYPE_CHECKING, is_type_checking, no_typecheck, register_no_typecheck
from .dtensor import (DimSharding, TensorSharding, dtensor_placement_to_spmd_type,
                      spmd_redistribute, spmd_type_to_dtensor_placement)
from .module import annotate_module as _annotate_module
from .mesh import (MeshAxis, current_mesh, current_mesh_all_names, current_mesh_names,
                   flatten_axes, set_current_mesh, set_printoptions)
from .regions import Infer, local, local_map, out_partial_axes
from .reinterpret_mesh import reinterpret_mesh
from .registration import (register_autograd_function, register_decomposition,
                           register_local_autograd_function, register_local_backward_hook)
from .runtime import (assert_local_type, assert_local_type_like, assert_type, assert_type_like,
                      get_axis_local_type, get_local_type, get_partition_spec, has_local_type,
                      maybe_get_axis_local_type, merge_types, mutate_type,
                      reinterpret_no_grad, set_dist)
from .scalar import Scalar
from .spec_redistribute import redistribute_spec
from .trace import trace
from .types import (I, Invariant, LocalSpmdType, P, Partial, PartitionSpec,
                    PerMeshAxisLocalSpmdType, PerMeshAxisSpmdType, PerMeshAxisSpmdTypes, R,
                    Replicate, S, Shard, SpmdType, V, Varying, normalize_axis,
                    normalize_local_type, normalize_mesh, normalize_partition_spec,
                    partition_spec_get_shard, partition_spec_to_shard_types,
                    shard_types_to_partition_spec, to_local_type)

__version__ = _lib.build_info["version"]

annotate_module = _api(_annotate_module)

# The reference's modules also hold names that are defined here in a module
# above them (its checker holds local_map; its runtime the regions and
# registration functions).  They are attached once everything is loaded, so
# that every import inside the package goes down (tests/python/test_module_dag.py).
from . import checker as _checker_module  # noqa: E402
from . import runtime as _runtime_module  # noqa: E402

_checker_module.local_map = local_map
for _name in ("Infer", "local", "local_map", "register_autograd_function",
              "register_decomposition", "register_local_autograd_function"):
    setattr(_runtime_module, _name, globals()[_name])
del _name

__all__ = [
    # types
    "R", "I", "V", "P", "Replicate", "Invariant", "Varying", "Partial", "S", "Shard",
    "PerMeshAxisLocalSpmdType", "PerMeshAxisSpmdType", "PerMeshAxisSpmdTypes", "LocalSpmdType",
    "SpmdType", "PartitionSpec", "SpmdTypeError", "RedistributeError",
    "DTensorPropagationError", "normalize_axis", "normalize_mesh", "normalize_local_type",
    "normalize_partition_spec", "shard_types_to_partition_spec",
    "partition_spec_to_shard_types", "partition_spec_get_shard", "to_local_type",
    # mesh
    "MeshAxis", "set_current_mesh", "current_mesh", "current_mesh_names",
    "current_mesh_all_names", "flatten_axes", "set_printoptions", "reinterpret_mesh",
    # annotation / query
    "assert_type", "assert_local_type", "assert_type_like", "assert_local_type_like",
    "mutate_type", "has_local_type", "get_local_type", "get_axis_local_type",
    "maybe_get_axis_local_type", "get_partition_spec", "annotate_module", "merge_types",
    "reinterpret_no_grad",
    # regions
    "local", "local_map", "no_typecheck", "register_no_typecheck", "Infer", "is_type_checking",
    "TYPE_CHECKING", "out_partial_axes", "redistribute_spec",
    # registration
    "register_autograd_function", "register_decomposition",
    "register_local_autograd_function", "register_local_backward_hook",
    # misc
    "Scalar", "trace", "traceback_filtering", "set_dist", "dtensor_placement_to_spmd_type",
    "spmd_type_to_dtensor_placement", "spmd_redistribute", "TensorSharding", "DimSharding",
]
__all__ += _coll.__all__  # the collectives and conversions (ops)
