"""MeshAxis helpers and the current-mesh API."""

import os
import subprocess
import sys

import pytest

import cspmd as spmd
from cspmd import mesh as meshmod
from cspmd.mesh import MeshAxis, flatten_axes, set_printoptions

A = MeshAxis.of


@pytest.fixture
def names():
    """Register test names on a clean registry; restore it afterwards."""
    saved = list(meshmod._names.items())
    meshmod._reset_names()
    yield meshmod.register_name
    meshmod._reset_names()
    for n, a in saved:
        meshmod.register_name(a, n)


def test_size_and_layout():
    assert A(4, 1).size() == 4
    assert A([2, 3], [3, 1]).size() == 6 and A([2, 3], [3, 1]) == A(6, 1)
    assert A(1, 5).size() == 1 and A(1, 5) == A(1, 1)
    assert A([3, 2], [4, 1]).layout() == ((3, 2), (4, 1))
    with pytest.raises(TypeError, match="needs a stride"):
        A(4)
    with pytest.raises(TypeError, match="expected a ProcessGroup"):
        A("tp")


def test_names(names):
    tp = A(4, 1)
    assert tp.names == frozenset()
    names(tp, "TP")
    names(tp, "SP")
    assert tp.names == {"TP", "SP"}
    assert repr(tp) == "SP"
    triv = A(1, 1)
    names(triv, "one")
    assert triv.names == {"one"} and repr(triv) == "one(trivial)"
    # one base name for two axes: both are suffixed with their layouts
    names(A(2, 1), "ddp")
    names(A(4, 2), "ddp")
    assert A(2, 1).names == {"ddp[2:1]"} and A(4, 2).names == {"ddp[4:2]"}


def test_reset_names(names):
    names(A(4, 1), "tp")
    assert repr(A(4, 1)) == "tp"
    meshmod._reset_names()
    assert repr(A(4, 1)) == "MeshAxis(4:1)" and meshmod._names == {}
    assert A(4, 1).names == frozenset()


def test_isorthogonal():
    assert A(4, 1).isorthogonal(A(2, 4))
    assert not A(4, 1).isorthogonal(A(4, 1))
    assert A(2, 5).isorthogonal(A(2, 6)) and A(2, 6).isorthogonal(A(2, 7))
    assert not A(2, 5).isorthogonal(A(2, 6), A(2, 7))
    assert A(4, 1).isorthogonal()


def test_ordering():
    assert A(2, 2) <= A(4, 1) and A(2, 2) < A(4, 1)
    assert A(4, 1) >= A(2, 2) and A(4, 1) > A(2, 2)
    assert A(4, 1) <= A(4, 1) and not A(4, 1) < A(4, 1)
    assert not A(2, 1) <= A(2, 2) and not A(2, 2) <= A(2, 1)  # {0,1} vs {0,2}
    assert A(1, 1) <= A(2, 1)  # rank 0 is in every axis
    with pytest.raises(TypeError):
        A(4, 1) < 3


def test_flatten_axes():
    assert flatten_axes([A(2, 8), A(2, 4)]) == A(4, 4)
    assert flatten_axes((A(2, 8), A(2, 4), A(4, 1))) == A(16, 1)
    assert flatten_axes([A(4, 1)]) == A(4, 1)
    with pytest.raises(ValueError, match="at least one axis"):
        flatten_axes([])
    with pytest.raises(ValueError, match="orthogonal"):
        flatten_axes([A(4, 1), A(2, 1)])
    with pytest.raises(TypeError, match="sequence of mesh axes"):
        flatten_axes(A(4, 1))


def test_set_printoptions_statement_and_context(names):
    names(A(4, 1), "tp")
    assert repr(A(4, 1)) == "tp"
    with set_printoptions(debug=True):
        assert repr(A(4, 1)) == "tp{4:1}"
        assert repr(A(4, 3)) == "MeshAxis(4:3)"
        assert spmd._lib.ops.axis_print_debug()
    assert repr(A(4, 1)) == "tp" and not spmd._lib.ops.axis_print_debug()
    try:
        set_printoptions(debug=True)  # as a statement
        assert repr(A(4, 1)) == "tp{4:1}"
    finally:
        set_printoptions(debug=False)
    assert repr(A(4, 1)) == "tp"
    with pytest.raises(TypeError, match="debug must be a bool"):
        set_printoptions(debug="yes")


def test_env_var_debug():
    code = ("import cspmd; from cspmd.mesh import MeshAxis, register_name; a = MeshAxis.of(4, 1); "
            "register_name(a, 'tp'); print(repr(a), bool(cspmd._lib.ops.axis_print_debug()))")
    env = dict(os.environ, MESH_AXIS_DEBUG="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "tp{4:1} True"


def test_current_mesh_queries(mesh, dp_axis, tp_axis):
    assert spmd.current_mesh() is None
    assert spmd.current_mesh_names() == {} and spmd.current_mesh_all_names() == {}
    one = A(1, 1)
    with spmd.set_current_mesh({"dp": dp_axis, "tp": tp_axis, "pp": one}):
        assert spmd.current_mesh() == frozenset({dp_axis, tp_axis})
        assert spmd.current_mesh_names() == {"dp": dp_axis, "tp": tp_axis}
        assert spmd.current_mesh_all_names() == {"dp": dp_axis, "tp": tp_axis, "pp": one}
        with spmd.set_current_mesh(frozenset({tp_axis})):
            assert spmd.current_mesh() == frozenset({tp_axis})
            assert spmd.current_mesh_names() == {}
        assert spmd.current_mesh() == frozenset({dp_axis, tp_axis})
    with spmd.set_current_mesh(mesh):
        assert spmd.current_mesh_names() == {"dp": dp_axis, "tp": tp_axis}
    assert spmd.current_mesh() is None


def test_local_axes(mesh, dp_axis, tp_axis):
    with spmd.set_current_mesh(mesh, local_axes=("dp",)):
        assert meshmod.current_local_axes() == frozenset({dp_axis})
        with spmd.set_current_mesh(local_axes=(dp_axis, tp_axis)):  # re-push, all local
            assert meshmod.current_local_axes() == frozenset({dp_axis, tp_axis})
            assert spmd.current_mesh_names() == {"dp": dp_axis, "tp": tp_axis}
        with spmd.set_current_mesh(None):
            assert meshmod.current_local_axes() == frozenset()
            assert spmd.current_mesh() == frozenset({dp_axis, tp_axis})
        assert meshmod.current_local_axes() == frozenset({dp_axis})
    with spmd.set_current_mesh(mesh, local_axes=[mesh.get_group("dp")]):
        assert meshmod.current_local_axes() == frozenset({dp_axis})
    assert meshmod.current_local_axes() == frozenset()


def test_local_axes_errors(mesh, dp_axis, tp_axis):
    with pytest.raises(ValueError, match=r"local_axes contains names not present in this mesh: "
                                         r"\('x',\); available names: \('dp', 'tp'\)"):
        with spmd.set_current_mesh(mesh, local_axes=("x",)):
            pass
    with pytest.raises(ValueError, match="must not contain duplicate axes"):
        with spmd.set_current_mesh(mesh, local_axes=("dp", dp_axis)):
            pass
    with pytest.raises(ValueError, match=r"local_axes must come before all global axes in "
                                         r"outer-to-inner mesh order; got local_axes=\(mesh_tp\) "
                                         r"for mesh=\(mesh_dp, mesh_tp\)"):
        with spmd.set_current_mesh(mesh, local_axes=("tp",)):
            pass
    with pytest.raises(ValueError, match="local_axes contains axes outside this mesh"):
        with spmd.set_current_mesh(mesh, local_axes=(A(2, 1),)):
            pass
    with pytest.raises(TypeError, match="local_axes must be a tuple"):
        with spmd.set_current_mesh(mesh, local_axes="dp"):
            pass
    with pytest.raises(RuntimeError, match="without axes requires a current mesh"):
        with spmd.set_current_mesh(local_axes=("dp",)):
            pass
    with pytest.raises(RuntimeError, match="without axes requires a current mesh"):
        with spmd.set_current_mesh(None):
            pass
    assert spmd.current_mesh() is None


def test_a_group_resolved_after_a_reset_is_named_again(mesh, names):
    """Resolving a group inside a test whose fixture resets the registry
    must not leave the group's axis unnamed for the tests after it
    (test_messages_031 after test_reinterpret_mesh)."""
    tp = MeshAxis.of(mesh.get_group("tp"))
    assert repr(tp) == "mesh_tp"
    meshmod._reset_names()
    assert repr(tp) == "MeshAxis(4:1)"
    assert MeshAxis.of(mesh.get_group("tp")) is tp and repr(tp) == "mesh_tp"


@pytest.fixture
def fresh_names(mesh):
    """cspmd's and the reference's axis names and group caches emptied for
    the test (as in a fresh process with the 2x4 mesh), then restored."""
    import reference
    ref = reference.load()
    reference.load("spmd_types.checker")
    from spmd_types import _mesh_axis as refmesh
    saved = (list(meshmod._names.items()), dict(meshmod._group_axes),
             {a: set(n) for a, n in refmesh._mesh_axis_names.items()},
             set(refmesh._disambiguated_names), dict(refmesh._pg_to_mesh_axis))
    meshmod._reset_names()
    meshmod._group_axes.clear()
    refmesh._mesh_axis_names.clear()
    refmesh._disambiguated_names.clear()
    refmesh._pg_to_mesh_axis.clear()
    yield ref
    meshmod._reset_names()
    meshmod._group_axes.clear()
    for n, a in saved[0]:
        meshmod.register_name(a, n)
    meshmod._group_axes.update(saved[1])
    refmesh._mesh_axis_names.clear()
    refmesh._mesh_axis_names.update(saved[2])
    refmesh._disambiguated_names.clear()
    refmesh._disambiguated_names.update(saved[3])
    refmesh._pg_to_mesh_axis.clear()
    refmesh._pg_to_mesh_axis.update(saved[4])


def test_world_axis_named_when_its_group_is_used_as_reference(mesh, fresh_names):
    """The world axis prints as the flattening of the mesh's named axes
    until the program uses the world group (here a raw all_reduce on it):
    then the group's description, default_pg, names it.  Entering
    typecheck() names nothing."""
    import torch
    import torch.distributed as dist

    world_pg = dist.distributed_c10d._get_default_group()
    seen = []
    for lib in (spmd, fresh_names):
        for name in ("dp", "tp"):
            lib.MeshAxis.of(mesh.get_group(name))
        world = lib.MeshAxis.of(8, 1)
        steps = [repr(world)]
        x = lib.assert_type(torch.ones(2), {world: lib.P})
        with lib.set_current_mesh(mesh), lib.checker.typecheck():
            steps.append(repr(world))
            steps.append(str(lib.get_local_type(x)))
            dist.all_reduce(x, group=world_pg)
            steps.append(str(lib.get_local_type(x)))
        steps.append(repr(lib.MeshAxis.of(world_pg)))
        seen.append(steps)
    assert seen[0] == seen[1]
    assert seen[0] == ["{mesh_dp,mesh_tp}", "{mesh_dp,mesh_tp}", "{{mesh_dp,mesh_tp}: P}",
                       "{default_pg: R}", "default_pg"]
