"""Every public name of the reference API is exported, with a docstring."""

import inspect

import pytest

import cspmd
import cspmd.checker

TOP_LEVEL = [
    # types
    "R", "I", "V", "P", "Replicate", "Invariant", "Varying", "Partial", "S", "Shard",
    "PerMeshAxisLocalSpmdType", "PerMeshAxisSpmdType", "PerMeshAxisSpmdTypes", "LocalSpmdType",
    "SpmdType", "PartitionSpec", "TensorSharding", "DimSharding", "SpmdTypeError",
    "normalize_axis", "normalize_mesh", "normalize_partition_spec",
    # mesh
    "MeshAxis", "set_current_mesh", "current_mesh", "current_mesh_names",
    "current_mesh_all_names",
    # annotation / query
    "assert_type", "assert_local_type", "assert_type_like", "assert_local_type_like",
    "mutate_type", "has_local_type", "get_local_type", "get_axis_local_type",
    "maybe_get_axis_local_type", "get_partition_spec", "reinterpret_mesh",
    # ops
    "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "redistribute", "unshard",
    "reinterpret", "convert", "shard", "invariant_to_replicate",
    # regions
    "local", "local_map", "no_typecheck", "Infer", "is_type_checking", "TYPE_CHECKING",
    # registration
    "register_autograd_function", "register_decomposition",
    "register_local_autograd_function", "register_local_backward_hook",
    # misc
    "Scalar", "trace", "traceback_filtering", "set_dist", "dtensor_placement_to_spmd_type",
    "spmd_type_to_dtensor_placement", "spmd_redistribute",
]
CHECKER = ["typecheck", "no_typecheck", "is_type_checking", "local_map", "SpmdTypeMode"]
TYPES_MODULE = ["RedistributeError", "DTensorPropagationError", "shard_types_to_partition_spec",
                "partition_spec_to_shard_types", "partition_spec_get_shard", "to_local_type",
                "normalize_local_type", "SpmdType"]
RUNTIME_MODULE = ["assert_type", "assert_local_type", "mutate_type", "has_local_type",
                  "get_partition_spec", "get_local_type", "set_dist"]
# Type aliases and values: existence only.
NO_DOC = {"R", "I", "V", "P", "Replicate", "Invariant", "Varying", "Partial",
          "PerMeshAxisSpmdType", "PerMeshAxisSpmdTypes", "LocalSpmdType", "TYPE_CHECKING",
          "Infer", "DimSharding"}


def _documented(obj):
    return bool((inspect.getdoc(obj) or "").strip())


@pytest.mark.parametrize("name", TOP_LEVEL)
def test_top_level(name):
    assert hasattr(cspmd, name), f"cspmd.{name} is missing"
    assert name in cspmd.__all__
    obj = getattr(cspmd, name)
    if name not in NO_DOC and (inspect.isclass(obj) or callable(obj)):
        assert _documented(obj), f"cspmd.{name} has no docstring"


@pytest.mark.parametrize("name", CHECKER)
def test_checker(name):
    assert hasattr(cspmd.checker, name), f"cspmd.checker.{name} is missing"
    assert name in cspmd.checker.__all__
    assert _documented(getattr(cspmd.checker, name))


@pytest.mark.parametrize("name", TYPES_MODULE)
def test_types_module(name):
    import cspmd.types
    assert _documented(getattr(cspmd.types, name))


@pytest.mark.parametrize("name", RUNTIME_MODULE)
def test_runtime_module(name):
    import cspmd.runtime
    assert _documented(getattr(cspmd.runtime, name))


def test_every_exported_callable_documented():
    missing = [n for n in cspmd.__all__ if n not in NO_DOC and callable(getattr(cspmd, n))
               and not _documented(getattr(cspmd, n))]
    assert not missing
