"""Shared fixtures: one fake process group for the whole session, a 2x4 mesh.

Axis display names of the DeviceMesh groups are ``mesh_dp`` and ``mesh_tp``.
``MeshAxis.of(4, 1)`` is the tp axis and ``MeshAxis.of(2, 4)`` the dp axis of
this mesh (rank layout of a row-major 2x4 grid).
"""

import os
import re
import sys

import pytest
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

import cspmd as spmd
import cspmd.checker  # noqa: F401  (loads the checker)

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

def key_included():
    """True if cspmd's dispatch key (``cspmd._lib.ops.checker_key()``, a key
    torch's Python bindings do not name) is in this thread's included set."""
    key = spmd._lib.ops.checker_key()
    return re.search(rf"\b{key}\b", str(torch._C._dispatch_tls_local_include_set())) is not None


@pytest.fixture(scope="session")
def mesh():
    if not dist.is_initialized():
        dist.init_process_group(backend="fake", rank=0, world_size=8)
    m = init_device_mesh("cpu", (2, 4), mesh_dim_names=("dp", "tp"))
    yield m
    # The session ends here; leave the group for the interpreter to clean up
    # only if another test destroyed it already.
    if dist.is_initialized():
        dist.destroy_process_group()


@pytest.fixture(scope="session")
def dp(mesh):
    return mesh.get_group("dp")


@pytest.fixture(scope="session")
def tp(mesh):
    return mesh.get_group("tp")


@pytest.fixture(scope="session")
def dp_axis(dp):
    return spmd.MeshAxis.of(dp)


@pytest.fixture(scope="session")
def tp_axis(tp):
    return spmd.MeshAxis.of(tp)


@pytest.fixture
def typed():
    """``typed(type, *shape, requires_grad=False)``: a fresh randn tensor
    annotated with ``type`` (a dict or a bare R/I/V/P)."""

    def make(type_, *shape, requires_grad=False):
        x = torch.randn(*(shape or (4, 4)))
        if requires_grad:
            x.requires_grad_()
        spmd.assert_type(x, type_)
        return x

    return make


@pytest.fixture
def checked(mesh):
    """Checking on (strict) under the 2x4 mesh for the whole test."""
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck():
        yield


@pytest.fixture(autouse=True)
def _checker_off_between_tests():
    """Every test starts and ends with checking off and no current mesh."""
    assert not spmd.is_type_checking()
    assert not key_included()
    assert spmd.current_mesh() is None
    yield
    assert not spmd.is_type_checking(), "a test left typecheck() on"
    assert not key_included(), "a test left the dispatch key on"
    assert spmd.current_mesh() is None, "a test left a current mesh"


def ltype(x):
    """get_local_type as {display name: letter} for easy comparison."""
    return {repr(a): t.name for a, t in spmd.get_local_type(x).items()}


class CopyToTP(torch.autograd.Function):
    """Megatron's "f": identity forward (I -> R on tp), all-reduce of the
    gradient in backward (P -> I)."""

    @staticmethod
    def forward(ctx, x, tp):
        ctx.tp = tp
        return spmd.convert(x, tp, src=spmd.I, dst=spmd.R)  # no autograd inside: type only

    @staticmethod
    def backward(ctx, g):
        return spmd.all_reduce(g, ctx.tp, src=spmd.P, dst=spmd.I), None


class CopyToTPNoReduce(CopyToTP):
    """The classic bug: the backward's all-reduce is missing."""

    @staticmethod
    def backward(ctx, g):
        return g, None
