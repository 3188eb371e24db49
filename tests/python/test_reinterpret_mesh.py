"""reinterpret_mesh end to end; the algorithm's every message is
pinned in tests/c/test_compat.c."""

import os

import pytest
import torch

import cspmd as spmd
from cspmd import mesh as meshmod
from cspmd.reinterpret_mesh import reinterpret_mesh
from cspmd.types import I, P, PartitionSpec, R, S, V

from conftest import ltype

A = spmd.MeshAxis.of


@pytest.fixture
def axes():
    """A 16-rank presentation: dp 2:8, cp 2:4, tp 4:1, dp_cp 4:4; names are
    registered for the test and the registry restored afterwards."""
    saved = list(meshmod._names.items())
    meshmod._reset_names()
    ax = {"dp": A(2, 8), "cp": A(2, 4), "tp": A(4, 1), "dp_cp": A(4, 4), "ep": A(2, 2),
          "etp": A(2, 1)}
    for n, a in ax.items():
        meshmod.register_name(a, n)
    yield ax
    meshmod._reset_names()
    for n, a in saved:
        meshmod.register_name(a, n)


def test_flatten(axes):
    dp, cp, dp_cp = axes["dp"], axes["cp"], axes["dp_cp"]
    x = spmd.assert_type(torch.randn(4), {dp: V, cp: V})
    y = reinterpret_mesh(x, {dp_cp: V})
    assert y is not x and ltype(y) == {"dp_cp": "V"}
    assert ltype(x) == {"cp": "V", "dp": "V"}  # the source keeps its type
    assert y.data_ptr() == x.data_ptr()  # an alias: no data change
    z = reinterpret_mesh(x, {dp_cp: V}, inplace=True)
    assert z is x and ltype(x) == {"dp_cp": "V"}


def test_axes_only_forms(axes, mesh):
    dp, cp, tp, dp_cp = axes["dp"], axes["cp"], axes["tp"], axes["dp_cp"]
    x = spmd.assert_type(torch.randn(4), {dp: P, cp: P, tp: R})
    assert ltype(reinterpret_mesh(x, frozenset({dp_cp, tp}))) == {"dp_cp": "P", "tp": "R"}
    assert ltype(reinterpret_mesh(x, {dp_cp, tp})) == {"dp_cp": "P", "tp": "R"}
    # a DeviceMesh and a sequence of process groups
    mdp, mtp = A(mesh.get_group("dp")), A(mesh.get_group("tp"))
    whole = spmd.mesh.flatten_axes([mdp, mtp])
    w = spmd.assert_type(torch.randn(4), {whole: V})
    assert spmd.get_local_type(reinterpret_mesh(w, mesh)) == {mdp: V, mtp: V}
    groups = [mesh.get_group("dp"), mesh.get_group("tp")]
    assert spmd.get_local_type(reinterpret_mesh(w, groups)) == {mdp: V, mtp: V}


def test_parallel_folding(axes):
    dp, cp, tp = axes["dp"], axes["cp"], axes["tp"]
    x = spmd.assert_type(torch.randn(4), {dp: V, cp: V, tp: I})
    y = reinterpret_mesh(x, frozenset({axes["dp_cp"], axes["ep"], axes["etp"]}))
    assert ltype(y) == {"dp_cp": "V", "ep": "I", "etp": "I"}


def test_spec_remapped(axes):
    dp, cp, tp, dp_cp = axes["dp"], axes["cp"], axes["tp"], axes["dp_cp"]
    x = spmd.assert_type(torch.randn(4, 4), {dp: V, cp: V, tp: V},
                         PartitionSpec((tp, dp, cp), None))
    y = reinterpret_mesh(x, {dp_cp: V, tp: V})
    assert spmd.get_partition_spec(y) == PartitionSpec((tp, dp_cp), None)
    # (cp, dp) is no group of dp_cp: outside global checking the shards decay
    # (as in spmd_types 0.3.1; tests/python/test_cross_mesh_031.py)
    bad = spmd.assert_type(torch.randn(4, 4), {dp: V, cp: V}, PartitionSpec((cp, dp), None))
    decayed = reinterpret_mesh(bad, {dp_cp: V})
    assert ltype(decayed) == {"dp_cp": "V"}
    assert all(e is None for e in spmd.get_partition_spec(decayed) or ())


def test_errors(axes):
    dp, cp, dp_cp = axes["dp"], axes["cp"], axes["dp_cp"]
    with pytest.raises(spmd.SpmdTypeError) as e:
        reinterpret_mesh(torch.randn(2), {dp_cp: V})
    assert e.value.msg == "reinterpret_mesh requires a tensor with an existing local SPMD type."
    assert e.value.context.startswith("  In reinterpret_mesh(\n    tensor: f32[2] {}")
    x = spmd.assert_type(torch.randn(2), {dp: V, cp: R})
    with pytest.raises(spmd.SpmdTypeError) as e:
        reinterpret_mesh(x, {dp_cp: V})
    assert e.value.msg == ("Axes {dp, cp} would need to be flattened, but dp has type V while cp "
                           "has type R.")
    assert "type: {dp_cp: V}" in e.value.context
    # described by the core's error context, as an op's error is
    assert e.value.op == "reinterpret_mesh"
    assert e.value.site.startswith(os.path.abspath(__file__) + ":")
    assert e.value.context.endswith(f"\n  at {e.value.site}")
    tensor, type_ = e.value.operands
    assert (tensor.name, tensor.shape, tensor.type) == ("tensor", (2,), {dp: V, cp: R})
    assert (type_.name, type_.text) == ("type", "{dp_cp: V}")
    assert e.value.__suppress_context__ or e.value.__context__ is None
    assert ltype(x) == {"cp": "R", "dp": "V"}  # unchanged on error
    with pytest.raises(spmd.SpmdTypeError, match="flatten to different rank regions"):
        reinterpret_mesh(spmd.assert_type(torch.randn(2), {A(4, 1): V}), {A(4, 2): V})


def test_bad_arguments(axes):
    dp, cp, dp_cp = axes["dp"], axes["cp"], axes["dp_cp"]
    x = spmd.assert_type(torch.randn(2), {dp: V, cp: V})
    with pytest.raises(TypeError, match=r"Shard type S\(0\) on axis dp_cp cannot be stored as "
                       r"a local SPMD type"):
        reinterpret_mesh(x, {dp_cp: S(0)})
    with pytest.raises(TypeError, match=r"Expected PerMeshAxisLocalSpmdType \(R, I, V, or P\) "
                       r"on axis dp_cp, got .V."):
        reinterpret_mesh(x, {dp_cp: "V"})
    with pytest.raises(TypeError, match="type must be a dict"):
        reinterpret_mesh(x, 3)
    with pytest.raises(TypeError, match="expected a torch.Tensor"):
        reinterpret_mesh([1.0], {dp_cp: V})
    with pytest.raises(TypeError, match="inplace must be a bool"):
        reinterpret_mesh(x, {dp_cp: V}, inplace=1)


def test_debug_print_in_messages(axes):
    x = spmd.assert_type(torch.randn(2), {axes["tp"]: V})
    with spmd.mesh.set_printoptions(debug=True):
        with pytest.raises(spmd.SpmdTypeError, match=r"\{tp\{4:1\}\} and destination group "
                                                     r"\{\{cp,ep\}\{4:2\}\}"):
            reinterpret_mesh(x, {A(4, 2): V})


def test_autograd_flows(axes):
    x = torch.randn(3, requires_grad=True)
    spmd.assert_type(x, {axes["dp"]: V, axes["cp"]: V})
    y = reinterpret_mesh(x, {axes["dp_cp"]: V})
    y.sum().backward()
    assert torch.equal(x.grad, torch.ones(3))


def test_under_typecheck(axes, checked):
    x = spmd.assert_type(torch.randn(2), {axes["dp"]: V, axes["cp"]: V})
    # the alias is made unchecked: no mesh error from view_as
    with spmd.set_current_mesh(frozenset({axes["dp_cp"]})):
        y = reinterpret_mesh(x, frozenset({axes["dp_cp"]}))
    assert ltype(y) == {"dp_cp": "V"}
