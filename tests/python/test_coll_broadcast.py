"""broadcast: cspmd's own collective (spmd_types has none), on the fake backend.

Types, shapes and errors here; the values, forward and backward, are
test_coll_numerics' broadcast cases (Gloo, 2 and 4 ranks) and the same
cases per simulated rank in test_local_tensor.
"""

import pytest
import torch

import cspmd as spmd
from cspmd import I, P, R, S, V, PartitionSpec as PS, SpmdTypeError
from cspmd.checker import typecheck
from conftest import ltype

import reference


def make(types, shape=(2, 3), requires_grad=False):
    with spmd.no_typecheck():
        x = torch.randn(*shape)
    if requires_grad:
        x.requires_grad_()
    return spmd.assert_type(x, types)


@pytest.mark.parametrize("dst", [R, I])
def test_varying_becomes_dst_and_gradient_comes_back_varying(dst, tp, checked):
    x = make({"dp": R, "tp": V}, requires_grad=True)
    y = spmd.broadcast(x, tp, root=2, src=V, dst=dst)
    assert ltype(y) == {"mesh_dp": "R", "mesh_tp": dst.name}
    assert y.shape == x.shape and y.dtype == x.dtype
    # the backward is broadcast's own pair (P -> V summing onto root, or
    # I -> V keeping root's), checked like any collective
    y.backward(make({"dp": P, "tp": {R: P, I: I}[dst]}))
    assert ltype(x.grad) == {"mesh_dp": "P", "mesh_tp": "V"}
    assert ltype(x) == {"mesh_dp": "R", "mesh_tp": "V"}


def test_defaults_are_root_0_from_v_to_r(tp, checked):
    y = spmd.broadcast(make({"dp": R, "tp": V}), tp)
    assert ltype(y) == {"mesh_dp": "R", "mesh_tp": "R"}


@pytest.mark.parametrize("t", [R, I])
def test_replicated_input_is_returned_itself(t, tp, checked):
    # an R or I value is the same on every rank: broadcast changes nothing
    x = make({"dp": R, "tp": t}, requires_grad=True)
    assert spmd.broadcast(x, tp, root=3, src=t, dst=t) is x
    with pytest.raises(SpmdTypeError, match="broadcast: expected input type R on axis "
                                            "mesh_tp, got V"):
        spmd.broadcast(make({"dp": R, "tp": V}), tp, src=R, dst=R)


@pytest.mark.parametrize("src,dst,msg", [
    (P, R, "broadcast src must be V, got P. A partial value is summed with "
           "all_reduce(src=P, dst=R), not broadcast."),
    (P, V, "broadcast src must be V, got P"),    # broadcast's backward pair, not for users
    (I, V, "broadcast dst must be R or I, got V"),  # the other one
    (V, V, "broadcast dst must be R or I, got V"),
    (V, P, "broadcast dst must be R or I, got P"),
    (V, S(0), "broadcast dst must be R or I, got S(0)"),
    (S(1), R, "broadcast src must be V, got S(1): a broadcast copies root's shard, not the "
              "whole tensor. Use all_gather(src=S(1), dst=R) to gather the shards."),
    (R, I, "broadcast(R, I) is not supported: an R value is the same on every rank "
           "already, and broadcast keeps R and I as they are. Use convert(src=R, dst=I) to "
           "change between R and I."),
])
def test_rejected_pairs(src, dst, msg, tp, checked):
    t = V if isinstance(src, S) else src
    x = make({"dp": R, "tp": t}, (2, 4))
    with pytest.raises(ValueError) as e:
        spmd.broadcast(x, tp, src=src, dst=dst)
    assert str(e.value).split("\n")[0].startswith(msg)
    assert ltype(x) == {"mesh_dp": "R", "mesh_tp": t.name}  # bad input changes nothing


@pytest.mark.parametrize("root", [4, -1, 100])
def test_root_out_of_range_names_root_and_group_size(root, tp, checked):
    x = make({"dp": R, "tp": V})
    with pytest.raises(ValueError, match=rf"broadcast: root={root} is out of range for an axis "
                                         r"group of 4 ranks \(expected 0\.\.3"):
        spmd.broadcast(x, tp, root=root)
    # the no-op pairs check it too
    with pytest.raises(ValueError, match=rf"root={root} is out of range"):
        spmd.broadcast(make({"dp": R, "tp": R}), tp, root=root, src=R, dst=R)


def test_root_out_of_range_without_checking(tp):
    # the kernel asks the core again, so no call reaches c10d with a bad root
    with pytest.raises(ValueError, match="root=8 is out of range for an axis group of 4"):
        spmd.broadcast(torch.randn(3), tp, root=8)


def test_root_must_be_an_int(tp, checked):
    x = make({"dp": R, "tp": V})
    for bad in (1.0, True, "0", None):
        with pytest.raises(TypeError, match="broadcast: root must be an int"):
            spmd.broadcast(x, tp, root=bad)


def test_axis_errors(mesh, tp, checked):
    x = make({"dp": R, "tp": V})
    with pytest.raises(SpmdTypeError, match="No mesh axis named 'nope' in the current mesh"):
        spmd.broadcast(x, "nope")
    with pytest.raises(TypeError, match="expected a ProcessGroup"):
        spmd.broadcast(x, 3)
    y = make({"dp": V})  # no type on tp, strict mode
    with pytest.raises(SpmdTypeError, match="broadcast: tensor has no type for axis mesh_tp"):
        spmd.broadcast(y, tp)
    with pytest.raises(TypeError, match="expected a torch.Tensor"):
        spmd.broadcast([1.0], tp)


def test_by_axis_name_and_on_dp(mesh, dp, checked):
    x = make({"dp": V, "tp": R})
    y = spmd.broadcast(x, "dp", root=1, src=V, dst=I)
    assert ltype(y) == {"mesh_dp": "I", "mesh_tp": "R"}


def test_reduced_precision_needs_a_backward_dtype(tp, checked):
    # V -> R's backward sums the gradient: the reference's rule for
    # reductions in backward applies; V -> I's backward sums nothing
    x = make({"dp": R, "tp": V}).to(torch.bfloat16).requires_grad_()
    with pytest.raises(ValueError, match="backward_options"):
        spmd.broadcast(x, tp, dst=R)
    y = spmd.broadcast(x, tp, dst=R, backward_options={"op_dtype": torch.float32})
    assert y.dtype == torch.bfloat16
    assert spmd.broadcast(x, tp, dst=I).dtype == torch.bfloat16


def test_meta_backward_shapes(tp):
    x = torch.empty(2, 3, device="meta", requires_grad=True)
    y = spmd.broadcast(x, tp, root=1)
    y.backward(torch.empty(2, 3, device="meta"))
    assert x.grad.device.type == "meta" and x.grad.shape == (2, 3)


def test_global_axis_is_refused(mesh, dp, tp):
    # a global axis' V is a shard of one global tensor: broadcasting root's
    # shard would make another tensor of it
    with spmd.set_current_mesh(mesh), typecheck(local=False):
        x = spmd.assert_type(torch.randn(4, 8), {dp: R, tp: S(0)})
        with pytest.raises(SpmdTypeError, match="broadcast: axis mesh_tp is global"):
            spmd.broadcast(x, tp, src=V, dst=R)
        r = spmd.assert_type(torch.randn(4, 8), {dp: R, tp: R})
        assert spmd.broadcast(r, tp, src=R, dst=R) is r  # the no-op is fine there
    with spmd.set_current_mesh(mesh, local_axes=("dp",)), typecheck(local=False):
        x = spmd.assert_type(torch.randn(4, 8), {dp: V, tp: S(1)})
        y = spmd.broadcast(x, dp, root=1)  # a local axis: fine, the spec carried
        assert spmd.get_local_type(y)[spmd.MeshAxis.of(dp)] is R
        assert spmd.get_partition_spec(y) == PS(None, spmd.MeshAxis.of(tp))


def test_not_a_rules_transition():
    # cspmd.rules is the reference's namespace: it has no broadcast
    import cspmd.rules
    assert not hasattr(cspmd.rules, "broadcast")


def test_reference_has_no_broadcast():
    # docs/differences.md: broadcast is cspmd's own addition
    ref = reference.load()
    assert not hasattr(ref, "broadcast")
    assert not hasattr(reference.load("spmd_types._collectives"), "broadcast")
    assert "broadcast" in spmd.__all__
