"""Calls that the annotations reject: mypy --strict must report each line
marked ``# wrong``."""

import torch

import cspmd as spmd
from cspmd import P, R


def bad(axis: spmd.MeshAxis) -> None:
    spmd.all_reduce("not a tensor", axis, src=P, dst=R)  # wrong
    spmd.all_gather(torch.zeros(2), axis, dst=R, gather_dim="0")  # wrong
    n: str = spmd.has_local_type(torch.zeros(2))  # wrong
    spmd.S("0")  # wrong
