"""The DTensor bridge on the fake process group."""

import pytest
import torch
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard

import cspmd as spmd
from cspmd.checker import typecheck
from cspmd.dtensor import (DimSharding, TensorSharding, dtensor_placement_to_spmd_type,
                           spmd_redistribute, spmd_type_to_dtensor_placement)
from cspmd.types import I, P, R, S, V

from conftest import ltype


def test_placement_to_type():
    assert dtensor_placement_to_spmd_type(Replicate()) is I
    assert dtensor_placement_to_spmd_type(Replicate(), Replicate()) is I
    assert dtensor_placement_to_spmd_type(Replicate(), Partial()) is R
    assert dtensor_placement_to_spmd_type(Shard(1)) == S(1)
    assert dtensor_placement_to_spmd_type(Partial()) is P
    with pytest.raises(ValueError, match="unknown DTensor placement"):
        dtensor_placement_to_spmd_type("Shard(0)")


def test_type_to_placement():
    assert spmd_type_to_dtensor_placement(R) == Replicate()
    assert spmd_type_to_dtensor_placement(I) == Replicate()
    assert spmd_type_to_dtensor_placement(S(2)) == Shard(2)
    assert spmd_type_to_dtensor_placement(P) == Partial()
    with pytest.raises(ValueError, match=r"Use S\(dim\)"):
        spmd_type_to_dtensor_placement(V)
    with pytest.raises(ValueError, match="expected R, I, V, P"):
        spmd_type_to_dtensor_placement("R")


def test_tensor_sharding():
    ts = TensorSharding("tp", None, ("dp", "tp"))
    assert ts == ("tp", None, ("dp", "tp")) and ts != ("tp",)
    assert ts == TensorSharding("tp", None, ("dp", "tp"))
    assert len(ts) == 3 and ts[0] == "tp" and list(ts)[1] is None
    assert repr(TensorSharding("tp")) == "TensorSharding('tp')"
    assert repr(TensorSharding()) == "TensorSharding()"
    assert TensorSharding("dp") + TensorSharding(None) == ("dp", None)
    assert isinstance(TensorSharding("dp") + ("tp",), TensorSharding)
    assert ("x",) + TensorSharding("dp") == ("x", "dp")
    assert hash(TensorSharding("a")) == hash(("a",))
    # a pytree leaf
    leaves = torch.utils._pytree.tree_leaves({"w": TensorSharding("tp", None)})
    assert leaves == [TensorSharding("tp", None)]
    with pytest.raises(TypeError, match="entry 0"):
        TensorSharding(3)
    with pytest.raises(AttributeError):
        ts._values = ()
    assert DimSharding is not None


def test_to_local_types(mesh):
    x = torch.randn(4, 4)
    d = DTensor.from_local(x, mesh, [Replicate(), Shard(0)])
    with typecheck():
        assert ltype(d.to_local()) == {"mesh_dp": "I", "mesh_tp": "V"}
        assert ltype(d.to_local(grad_placements=[Partial(), Shard(0)])) == {
            "mesh_dp": "R", "mesh_tp": "V"}
        dp_ = DTensor.from_local(torch.randn(4), mesh, [Partial(), Replicate()], run_check=False)
        assert ltype(dp_.to_local()) == {"mesh_dp": "P", "mesh_tp": "I"}
        assert spmd.get_partition_spec(d.to_local()) is None
    # outside typecheck: not typed
    assert not spmd.has_local_type(d.to_local())


def test_from_local_types(mesh, dp_axis, tp_axis):
    x = torch.randn(4, 4)
    with typecheck():
        DTensor.from_local(x, mesh, [Replicate(), Shard(0)])
        assert ltype(x) == {"mesh_dp": "I", "mesh_tp": "V"}
        y = spmd.assert_type(torch.randn(4), {dp_axis: R, tp_axis: R})
        with pytest.raises(spmd.SpmdTypeError, match="SPMD type mismatch on axis mesh_dp"):
            DTensor.from_local(y, mesh, [Replicate(), Replicate()])
        z = spmd.assert_type(torch.randn(4), {dp_axis: P, tp_axis: V})
        DTensor.from_local(z, mesh, [Partial(), Shard(0)])  # consistent: no error
        assert ltype(z) == {"mesh_dp": "P", "mesh_tp": "V"}
    w = torch.randn(4)
    DTensor.from_local(w, mesh, [Replicate(), Shard(0)])
    assert not spmd.has_local_type(w)


def test_dtensor_op_in_typecheck(mesh):
    a = DTensor.from_local(torch.randn(4, 4, requires_grad=True), mesh, [Replicate(), Shard(0)])
    with spmd.set_current_mesh(mesh), typecheck():
        b = (a * 2 + a).sum(0)
        assert isinstance(b, DTensor)
        c = torch.matmul(a, a.t())
        assert isinstance(c, DTensor)
        b.to_local().sum().backward()


def test_spmd_redistribute(mesh):
    x = torch.randn(4, 4)
    d = DTensor.from_local(x, mesh, [Replicate(), Shard(0)])
    g = spmd_redistribute(d, TensorSharding("tp"), TensorSharding())
    assert g.placements == (Replicate(), Replicate())
    assert g.to_local().shape == (16, 4)
    assert spmd_redistribute(d, ("tp",), ("tp",)) is d  # no change
    s = spmd_redistribute(g, TensorSharding(), TensorSharding(None, "tp"))
    assert s.placements == (Replicate(), Shard(1)) and s.to_local().shape == (16, 1)
    with typecheck():
        g2 = spmd_redistribute(d, TensorSharding("tp"), TensorSharding(None, ("tp",)))
        assert g2.placements == (Replicate(), Shard(1))


def test_spmd_redistribute_backward(mesh):
    x = torch.randn(4, 4, requires_grad=True)
    d = DTensor.from_local(x, mesh, [Replicate(), Shard(0)])
    g = spmd_redistribute(d, TensorSharding("tp"), TensorSharding())
    g.to_local().sum().backward()
    assert x.grad is not None and x.grad.shape == (4, 4)


def test_spmd_redistribute_errors(mesh):
    d = DTensor.from_local(torch.randn(4, 4), mesh, [Shard(0), Shard(0)])
    with pytest.raises(NotImplementedError, match="Tensor dim 0 changes from"):
        spmd_redistribute(d, TensorSharding(("dp", "tp")), TensorSharding("dp"))
    # an unchanged multi-axis entry is fine
    assert spmd_redistribute(d, TensorSharding(("dp", "tp")), (("dp", "tp"),)) is d
    with pytest.raises(TypeError, match="x must be a DTensor"):
        spmd_redistribute(torch.randn(2), (), ())
    with pytest.raises(TypeError, match="src must be a TensorSharding"):
        spmd_redistribute(d, "tp", ())
    with pytest.raises(ValueError, match="not in the DTensor's mesh dims"):
        spmd_redistribute(d, ("ep",), ())
