"""A user's module written against the public API, checked by mypy --strict."""

import torch

import cspmd as spmd
from cspmd import I, P, PartitionSpec, R, S, SpmdType, V
from cspmd.checker import typecheck


def step(x: torch.Tensor, w: torch.Tensor, axis: spmd.MeshAxis) -> torch.Tensor:
    spmd.assert_type(x, {axis: S(0)})
    spmd.assert_type(w, R, partition_spec=None)
    y: torch.Tensor = x @ w
    z = spmd.all_reduce(y, axis, src=P, dst=R, async_op=False)
    spec: PartitionSpec = PartitionSpec(axis, None)
    merged: SpmdType = spmd.merge_types({axis: V}, spec)
    assert merged.partition_spec is not None
    local: dict[spmd.MeshAxis, spmd.PerMeshAxisLocalSpmdType] = spmd.get_local_type(z)
    assert local.get(axis) in (R, I)
    with typecheck(strict_mode="permissive"), spmd.no_typecheck():
        pass
    return spmd.reinterpret_no_grad(z.detach(), axis, dst=I)


@spmd.no_typecheck
def untouched(t: torch.Tensor) -> torch.Tensor:
    return t + 1


def mode_flags() -> bool:
    with typecheck() as mode:
        return mode.strict and spmd.is_type_checking()
