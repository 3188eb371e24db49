"""Types of the differentiable collectives on the fake backend.

Single process, the session's fake group of 8 ranks as a 2x4 mesh (dp, tp)
from conftest.  Numbers are not checked here (the fake backend moves no
data; see test_coll_numerics.py); types, shapes, dtypes and errors are.
"""

import pytest
import torch
import torch.nn.functional as F

import cspmd as spmd
from cspmd import I, P, R, S, V, SpmdTypeError
from cspmd.checker import typecheck
from conftest import ltype

LETTER = {t: t.name for t in (R, I, V, P)}  # messages print types as R/I/V/P
DUAL = {R: P, I: I, V: V, P: R}
TP_SIZE = 4


def base(t):
    return V if isinstance(t, S) else t


def make(types, shape, requires_grad=False, dtype=torch.float32):
    """A fresh tensor with ``types`` ({"dp": .., "tp": ..}); built unchecked."""
    with spmd.no_typecheck():
        x = torch.randn(*shape, dtype=dtype)
    if requires_grad:
        x.requires_grad_()
    if types is not None:
        spmd.assert_type(x, types)
    return x


def first_line(e):
    return str(e.value).split("\n")[0]


# ----------------------------------------------------------------------------------
# Every allowed (src, dst) pair: output type, shape, gradient type
# ----------------------------------------------------------------------------------

# name: (src, dst, local input shape, call(x, tp) -> y, expected local output shape)
PAIRS = {
    "all_reduce_P_R": (P, R, (2, 3), lambda x, g: spmd.all_reduce(x, g, src=P, dst=R), (2, 3)),
    "all_reduce_P_I": (P, I, (2, 3), lambda x, g: spmd.all_reduce(x, g, src=P, dst=I), (2, 3)),
    "all_reduce_V_R": (V, R, (2, 3), lambda x, g: spmd.all_reduce(x, g, src=V, dst=R), (2, 3)),
    "all_reduce_V_I": (V, I, (2, 3), lambda x, g: spmd.all_reduce(x, g, src=V, dst=I), (2, 3)),
    "all_gather_V_R": (V, R, (2, 3), lambda x, g: spmd.all_gather(x, g, src=V, dst=R), (4, 2, 3)),
    "all_gather_V_R_dim1": (V, R, (2, 3), lambda x, g: spmd.all_gather(
        x, g, src=V, dst=R, gather_dim=1), (2, 4, 3)),
    "all_gather_V_I": (V, I, (2, 3), lambda x, g: spmd.all_gather(x, g, src=V, dst=I), (4, 2, 3)),
    "all_gather_V_I_dim2": (V, I, (2, 3), lambda x, g: spmd.all_gather(
        x, g, src=V, dst=I, gather_dim=2), (2, 3, 4)),
    "all_gather_S0_R": (S(0), R, (2, 3), lambda x, g: spmd.all_gather(x, g, src=S(0), dst=R),
                        (8, 3)),
    "all_gather_S1_I": (S(1), I, (2, 3), lambda x, g: spmd.all_gather(x, g, src=S(1), dst=I),
                        (2, 12)),
    "all_gather_S0_R_uneven": (S(0), R, (2, 3), lambda x, g: spmd.all_gather(
        x, g, src=S(0), dst=R, split_sizes=[2, 1, 0, 3]), (6, 3)),
    "reduce_scatter_P_V": (P, V, (4, 3), lambda x, g: spmd.reduce_scatter(x, g, src=P, dst=V),
                           (3,)),
    "reduce_scatter_P_V_dim1": (P, V, (3, 4), lambda x, g: spmd.reduce_scatter(
        x, g, src=P, dst=V, scatter_dim=1), (3,)),
    "reduce_scatter_P_S0": (P, S(0), (8, 3), lambda x, g: spmd.reduce_scatter(
        x, g, src=P, dst=S(0)), (2, 3)),
    "reduce_scatter_P_S1": (P, S(1), (3, 8), lambda x, g: spmd.reduce_scatter(
        x, g, src=P, dst=S(1)), (3, 2)),
    "reduce_scatter_V_S0": (V, S(0), (8, 3), lambda x, g: spmd.reduce_scatter(
        x, g, src=V, dst=S(0)), (2, 3)),
    "reduce_scatter_P_S0_uneven": (P, S(0), (6, 3), lambda x, g: spmd.reduce_scatter(
        x, g, src=P, dst=S(0), split_sizes=[2, 1, 0, 3]), (2, 3)),
    "all_to_all_V_V": (V, V, (4, 3), lambda x, g: spmd.all_to_all(x, g, src=V, dst=V), (4, 3)),
    "all_to_all_S0_S1": (S(0), S(1), (2, 8), lambda x, g: spmd.all_to_all(
        x, g, src=S(0), dst=S(1)), (8, 2)),
    "all_to_all_S1_S0": (S(1), S(0), (8, 2), lambda x, g: spmd.all_to_all(
        x, g, src=S(1), dst=S(0)), (2, 8)),
    "all_to_all_S1_V": (S(1), V, (3, 8), lambda x, g: spmd.all_to_all(
        x, g, src=S(1), dst=V), (12, 2)),
    # V -> S(j): split on 0, concatenate on j
    "all_to_all_V_S1": (V, S(1), (8, 3), lambda x, g: spmd.all_to_all(
        x, g, src=V, dst=S(1)), (2, 12)),
    "reinterpret_R_V": (R, V, (2, 3), lambda x, g: spmd.reinterpret(
        x, g, src=R, dst=V, expert_mode=True), (2, 3)),
    "reinterpret_V_P": (V, P, (2, 3), lambda x, g: spmd.reinterpret(x, g, src=V, dst=P), (2, 3)),
    "reinterpret_R_P": (R, P, (2, 3), lambda x, g: spmd.reinterpret(
        x, g, src=R, dst=P, expert_mode=True), (2, 3)),
    "reinterpret_R_I": (R, I, (2, 3), lambda x, g: spmd.reinterpret(
        x, g, src=R, dst=I, expert_mode=True), (2, 3)),
    "reinterpret_I_R": (I, R, (2, 3), lambda x, g: spmd.reinterpret(
        x, g, src=I, dst=R, expert_mode=True), (2, 3)),
    "reinterpret_I_V": (I, V, (2, 3), lambda x, g: spmd.reinterpret(x, g, src=I, dst=V), (2, 3)),
    "reinterpret_I_P": (I, P, (2, 3), lambda x, g: spmd.reinterpret(x, g, src=I, dst=P), (2, 3)),
    "convert_I_R": (I, R, (2, 3), lambda x, g: spmd.convert(x, g, src=I, dst=R), (2, 3)),
    "convert_R_I": (R, I, (2, 3), lambda x, g: spmd.convert(
        x, g, src=R, dst=I, expert_mode=True), (2, 3)),
    "convert_R_V": (R, V, (4, 3), lambda x, g: spmd.convert(x, g, src=R, dst=V), (3,)),
    "convert_R_S0": (R, S(0), (8, 3), lambda x, g: spmd.convert(x, g, src=R, dst=S(0)), (2, 3)),
    "convert_R_S1": (R, S(1), (3, 8), lambda x, g: spmd.convert(x, g, src=R, dst=S(1)), (3, 2)),
    "convert_I_V": (I, V, (4, 3), lambda x, g: spmd.convert(x, g, src=I, dst=V), (3,)),
    "convert_I_S1": (I, S(1), (3, 8), lambda x, g: spmd.convert(x, g, src=I, dst=S(1)), (3, 2)),
    "convert_R_P": (R, P, (2, 3), lambda x, g: spmd.convert(x, g, src=R, dst=P), (2, 3)),
    "convert_I_P": (I, P, (2, 3), lambda x, g: spmd.convert(
        x, g, src=I, dst=P, expert_mode=True), (2, 3)),
    "convert_V_P": (V, P, (2, 3), lambda x, g: spmd.convert(
        x, g, src=V, dst=P, expert_mode=True), (4, 2, 3)),
    "convert_S0_P": (S(0), P, (2, 3), lambda x, g: spmd.convert(
        x, g, src=S(0), dst=P, expert_mode=True), (8, 3)),
    "convert_S1_P": (S(1), P, (3, 2), lambda x, g: spmd.convert(
        x, g, src=S(1), dst=P, expert_mode=True), (3, 8)),
    "redistribute_S0_S1": (S(0), S(1), (2, 8), lambda x, g: spmd.redistribute(
        x, g, src=S(0), dst=S(1)), (8, 2)),
    "redistribute_S0_R": (S(0), R, (2, 3), lambda x, g: spmd.redistribute(
        x, g, src=S(0), dst=R), (8, 3)),
    "redistribute_V_I": (V, I, (2, 3), lambda x, g: spmd.redistribute(
        x, g, src=V, dst=I), (4, 2, 3)),
    "redistribute_P_R": (P, R, (2, 3), lambda x, g: spmd.redistribute(
        x, g, src=P, dst=R), (2, 3)),
    "redistribute_P_I": (P, I, (2, 3), lambda x, g: spmd.redistribute(
        x, g, src=P, dst=I), (2, 3)),
    "redistribute_P_S1": (P, S(1), (3, 8), lambda x, g: spmd.redistribute(
        x, g, src=P, dst=S(1)), (3, 2)),
    "redistribute_P_V": (P, V, (4, 3), lambda x, g: spmd.redistribute(
        x, g, src=P, dst=V), (3,)),
    "redistribute_R_I": (R, I, (2, 3), lambda x, g: spmd.redistribute(
        x, g, src=R, dst=I), (2, 3)),
    "redistribute_I_R": (I, R, (2, 3), lambda x, g: spmd.redistribute(
        x, g, src=I, dst=R), (2, 3)),
    "redistribute_R_S0": (R, S(0), (8, 3), lambda x, g: spmd.redistribute(
        x, g, src=R, dst=S(0)), (2, 3)),
    "redistribute_I_V": (I, V, (4, 3), lambda x, g: spmd.redistribute(
        x, g, src=I, dst=V), (3,)),
    "redistribute_R_P": (R, P, (2, 3), lambda x, g: spmd.redistribute(
        x, g, src=R, dst=P), (2, 3)),
    "redistribute_I_P": (I, P, (2, 3), lambda x, g: spmd.redistribute(
        x, g, src=I, dst=P), (2, 3)),
    "redistribute_V_P": (V, P, (2, 3), lambda x, g: spmd.redistribute(
        x, g, src=V, dst=P), (4, 2, 3)),
    "redistribute_S0_P": (S(0), P, (2, 3), lambda x, g: spmd.redistribute(
        x, g, src=S(0), dst=P), (8, 3)),
    "shard_R_S0": (R, S(0), (8, 3), lambda x, g: spmd.shard(x, g, src=R, dst=S(0)), (2, 3)),
    "shard_I_S1": (I, S(1), (3, 8), lambda x, g: spmd.shard(x, g, src=I, dst=S(1)), (3, 2)),
    "unshard_S0_R": (S(0), R, (2, 3), lambda x, g: spmd.unshard(x, g, src=S(0), dst=R), (8, 3)),
    "unshard_S1_I": (S(1), I, (2, 3), lambda x, g: spmd.unshard(x, g, src=S(1), dst=I), (2, 12)),
    "invariant_to_replicate": (I, R, (2, 3), lambda x, g: spmd.invariant_to_replicate(x, g),
                               (2, 3)),
    "broadcast_V_R": (V, R, (2, 3), lambda x, g: spmd.broadcast(x, g, root=3, src=V, dst=R),
                      (2, 3)),
    "broadcast_V_I": (V, I, (2, 3), lambda x, g: spmd.broadcast(x, g, src=V, dst=I), (2, 3)),
}


@pytest.mark.parametrize("dp_type", [R, P], ids=["dpR", "dpP"])
@pytest.mark.parametrize("name", list(PAIRS))
def test_output_type_and_shape(name, dp_type, mesh, tp, checked):
    src, dst, shape, call, out_shape = PAIRS[name]
    x = make({"dp": dp_type, "tp": base(src)}, shape)
    y = call(x, tp)
    assert ltype(y) == {"mesh_dp": dp_type.name, "mesh_tp": base(dst).name}
    assert tuple(y.shape) == out_shape
    assert y.dtype == torch.float32
    # the input's own type is untouched
    assert ltype(x) == {"mesh_dp": dp_type.name, "mesh_tp": base(src).name}


@pytest.mark.parametrize("name", list(PAIRS))
def test_gradient_type_is_dual_of_input_type(name, tp, checked):
    """The backward collective runs under the checker: its output (x.grad) is
    typed, dual of x's type on both axes."""
    src, dst, shape, call, out_shape = PAIRS[name]
    dp_type = V
    x = make({"dp": dp_type, "tp": base(src)}, shape, requires_grad=True)
    y = call(x, tp)
    g = make({"dp": DUAL[dp_type], "tp": DUAL[base(dst)]}, out_shape)
    y.backward(g)
    assert x.grad is not None
    assert x.grad.shape == x.shape
    assert ltype(x.grad) == {"mesh_dp": DUAL[dp_type].name, "mesh_tp": DUAL[base(src)].name}


@pytest.mark.parametrize("name,src,dst", [
    ("reinterpret", V, V), ("convert", V, S(0)), ("convert", S(1), V), ("convert", R, R),
    ("convert", P, P), ("redistribute", S(0), V), ("redistribute", P, P),
    ("redistribute", I, I)])
def test_noop_returns_input_itself(name, src, dst, tp, checked):
    x = make({"dp": R, "tp": base(src)}, (4, 4))
    y = getattr(spmd, name)(x, tp, src=src, dst=dst)
    assert y is x
    assert ltype(x) == {"mesh_dp": "R", "mesh_tp": base(src).name}


def test_noop_backward_passes_typed_gradient(tp, checked):
    # convert(R, R) returns x itself: the explicit P gradient lands in x.grad
    # unchanged (autograd's AccumulateGrad copies it; that copy must type-check).
    x = make({"dp": R, "tp": R}, (4, 3), requires_grad=True)
    y = spmd.convert(x, tp, src=R, dst=R)
    assert y is x
    y.backward(make({"dp": P, "tp": P}, (4, 3)))
    assert ltype(x.grad) == {"mesh_dp": "P", "mesh_tp": "P"}


def test_collective_on_flattened_world_axis(checked):
    # the world group is flatten(dp, tp); both sub-axes resolve.
    import torch.distributed as dist
    x = make({"dp": P, "tp": P}, (2, 3))
    y = spmd.all_reduce(x, dist.group.WORLD, src=P, dst=R)
    assert ltype(y) == {"mesh_dp": "R", "mesh_tp": "R"}
    z = make({"dp": V, "tp": V}, (2, 3))
    w = spmd.all_gather(z, dist.group.WORLD, src=S(0), dst=I)
    assert ltype(w) == {"mesh_dp": "I", "mesh_tp": "I"}
    assert w.shape == (16, 3)
    q = make({"dp": P, "tp": R}, (2, 3))
    with pytest.raises(SpmdTypeError) as ei:
        spmd.all_reduce(q, dist.group.WORLD, src=P, dst=R)
    assert first_line(ei) == (f"all_reduce: expected input type {LETTER[P]} on axis mesh_tp, "
                              f"got {LETTER[R]}")


def test_axis_by_name_and_mesh_axis(tp, tp_axis, checked):
    x = make({"dp": R, "tp": P}, (2, 3))
    assert ltype(spmd.all_reduce(x, "tp", src=P, dst=R)) == {"mesh_dp": "R", "mesh_tp": "R"}
    assert ltype(spmd.all_reduce(x, tp_axis, src=P, dst=I)) == {"mesh_dp": "R", "mesh_tp": "I"}
    y = make({"dp": P, "tp": R}, (2, 3))
    assert ltype(spmd.all_reduce(y, "dp", src=P, dst=R)) == {"mesh_dp": "R", "mesh_tp": "R"}


def test_inplace_all_reduce_changes_input_type(tp, checked):
    x = make({"dp": V, "tp": P}, (2, 3))
    y = spmd.all_reduce(x, tp, src=P, dst=R, inplace=True)
    assert y is x
    assert ltype(x) == {"mesh_dp": "V", "mesh_tp": "R"}


# ----------------------------------------------------------------------------------
# Expert-mode gates (reinterpret and convert)
# ----------------------------------------------------------------------------------

GATES = [
    ("reinterpret", R, I, "reinterpret(R, I) requires expert_mode=True. This is rarely what you "
     "want in the forward pass; it exists as a backward for convert(I, P). Prefer convert(R, I) "
     "which is the primary API for R<->I transitions."),
    ("reinterpret", R, P, "reinterpret(R, P) requires expert_mode=True. This scales the semantic "
     "value by the mesh axis size, which is rarely intentional. If you want to preserve "
     "semantics, use convert(R, P) instead."),
    ("reinterpret", I, R, "reinterpret(I, R) requires expert_mode=True. Use convert(I, R) "
     "instead, which is the primary API for I<->R transitions."),
    ("reinterpret", R, V, "reinterpret(R, V) requires expert_mode=True. This makes N copies of "
     "the input, which is rarely what you want in the forward pass. If you want to shard a "
     "replicated value, use convert(R, V) or convert(R, S(i)) instead."),
    ("convert", R, I, "convert(R, I) requires expert_mode=True. This treats a replicate tensor "
     "as invariant, which is rarely what you want in the forward pass. It exists as a backward "
     "for convert(I, P)."),
    ("convert", I, P, "convert(I, P) requires expert_mode=True. This zeros out all non-rank-0 "
     "tensors, which is rarely what you want. It exists as a backward for convert(R, I)."),
    ("convert", V, P, "convert(V, P) requires expert_mode=True."),
    ("convert", S(0), P, "convert(S(0), P) requires expert_mode=True."),
    ("convert", S(1), P, "convert(S(1), P) requires expert_mode=True."),
]


@pytest.mark.parametrize("fn,src,dst,msg", GATES, ids=[f"{g[0]}_{g[1]!r}_{g[2]!r}" for g in GATES])
def test_expert_gate(fn, src, dst, msg, tp):
    x = torch.randn(4, 4)
    with pytest.raises(ValueError) as ei:
        getattr(spmd, fn)(x, tp, src=src, dst=dst)
    assert str(ei.value).startswith(msg)
    # with expert_mode=True the same call goes through
    y = getattr(spmd, fn)(x, tp, src=src, dst=dst, expert_mode=True)
    assert isinstance(y, torch.Tensor)


@pytest.mark.parametrize("fn,src,dst", [("reinterpret", V, P), ("reinterpret", I, V),
                                        ("reinterpret", I, P), ("convert", I, R),
                                        ("convert", R, V), ("convert", R, S(0)),
                                        ("convert", I, V), ("convert", R, P)])
def test_not_gated(fn, src, dst, tp):
    x = torch.randn(4, 4)
    assert isinstance(getattr(spmd, fn)(x, tp, src=src, dst=dst), torch.Tensor)


def test_redistribute_and_backwards_bypass_the_gate(tp, checked):
    x = make({"dp": R, "tp": V}, (2, 3), requires_grad=True)
    y = spmd.redistribute(x, tp, src=V, dst=P)  # convert(V, P) is gated; redistribute is not
    assert ltype(y) == {"mesh_dp": "R", "mesh_tp": "P"}
    z = make({"dp": R, "tp": R}, (4, 3), requires_grad=True)
    w = spmd.convert(z, tp, src=R, dst=V)  # backward: convert(V, P, expert)
    w.backward(make({"dp": P, "tp": V}, (3,)))
    assert ltype(z.grad) == {"mesh_dp": "P", "mesh_tp": "P"}


# ----------------------------------------------------------------------------------
# Bad (src, dst) -> ValueError, before any type check
# ----------------------------------------------------------------------------------

_AR_R = (f"all_reduce src must be P, got {LETTER[R]}. all_reduce on replicated/invariant data "
         f"is usually a bug. If you really want to scale by mesh size, use "
         f"reinterpret(src={LETTER[R]}, dst=P) first.")
BAD = [
    ("all_reduce", dict(src=R, dst=R), _AR_R),
    ("all_reduce", dict(src=I, dst=R), f"all_reduce src must be P, got {LETTER[I]}."),
    ("all_reduce", dict(src=S(0), dst=R), "all_reduce src must be P, got S(0)"),
    ("all_reduce", dict(src=P, dst=V), f"all_reduce dst must be R or I, got {LETTER[V]}"),
    ("all_reduce", dict(src=P, dst=P), f"all_reduce dst must be R or I, got {LETTER[P]}"),
    ("all_reduce", dict(src=P, dst=S(0)), "all_reduce dst must be R or I, got S(0)"),
    ("all_gather", dict(src=P, dst=R), f"all_gather src must be V or S(i), got {LETTER[P]}"),
    ("all_gather", dict(src=R, dst=R), f"all_gather src must be V or S(i), got {LETTER[R]}"),
    ("all_gather", dict(src=V, dst=V), f"all_gather dst must be R or I, got {LETTER[V]}"),
    ("all_gather", dict(src=V, dst=P), f"all_gather dst must be R or I, got {LETTER[P]}"),
    ("reduce_scatter", dict(src=R, dst=V), f"reduce_scatter src must be P, got {LETTER[R]}."),
    ("reduce_scatter", dict(src=S(0), dst=V), "reduce_scatter src must be P, got S(0)"),
    ("reduce_scatter", dict(src=P, dst=R), f"reduce_scatter dst must be V or S(i), got {LETTER[R]}"),
    ("reduce_scatter", dict(src=P, dst=P), f"reduce_scatter dst must be V or S(i), got {LETTER[P]}"),
    ("all_to_all", dict(src=R, dst=V), f"all_to_all src must be V or S(i), got {LETTER[R]}"),
    ("all_to_all", dict(src=P, dst=V), f"all_to_all src must be V or S(i), got {LETTER[P]}"),
    ("all_to_all", dict(src=V, dst=R), f"all_to_all dst must be V or S(i), got {LETTER[R]}"),
    ("all_to_all", dict(src=V, dst=I), f"all_to_all dst must be V or S(i), got {LETTER[I]}"),
    ("reinterpret", dict(src=P, dst=R),
     f"reinterpret({LETTER[P]}, {LETTER[R]}) is not supported; it is semantically ill-defined. "
     f"Call all_reduce(src=P, dst=R) first"),
    ("reinterpret", dict(src=P, dst=V), f"reinterpret({LETTER[P]}, {LETTER[V]}) is not supported;"),
    ("reinterpret", dict(src=P, dst=I), f"reinterpret({LETTER[P]}, {LETTER[I]}) is not supported;"),
    ("reinterpret", dict(src=V, dst=R),
     f"reinterpret({LETTER[V]}, {LETTER[R]}) is not supported. We cannot unsafely assert that "
     f"varying values on all ranks are actually the same."),
    ("reinterpret", dict(src=V, dst=I), f"reinterpret({LETTER[V]}, {LETTER[I]}) is not supported."),
    ("reinterpret", dict(src=S(0), dst=P), "reinterpret does not support S(i)."),
    ("reinterpret", dict(src=R, dst=S(0)), "reinterpret does not support S(i)."),
    ("reinterpret", dict(src=V, dst=S(1)), "reinterpret does not support S(i)."),
    ("convert", dict(src=P, dst=R),
     f"convert({LETTER[P]}, {LETTER[R]}) is not supported. Use all_reduce(src=P, dst="),
    ("convert", dict(src=P, dst=I), f"convert({LETTER[P]}, {LETTER[I]}) is not supported. Use "
                                    f"all_reduce(src=P"),
    ("convert", dict(src=P, dst=V), f"convert({LETTER[P]}, {LETTER[V]}) is not supported. Use "
                                    f"reduce_scatter(src=P"),
    ("convert", dict(src=P, dst=S(0)), f"convert({LETTER[P]}, S(0)) is not supported. Use "
                                       f"reduce_scatter(src=P, dst=S(0))"),
    ("convert", dict(src=V, dst=R), f"convert({LETTER[V]}, {LETTER[R]}) is not supported."),
    ("convert", dict(src=V, dst=I), f"convert({LETTER[V]}, {LETTER[I]}) is not supported."),
    ("convert", dict(src=S(0), dst=R), f"convert(S(0), {LETTER[R]}) is not supported."),
    ("convert", dict(src=S(0), dst=S(1)), "convert(S(0), S(1)) cannot change the shard dimension "
                                          "without communication. Use all_to_all() instead."),
    ("shard", dict(src=R, dst=V), "shard dst must be S(i), got V"),
    ("shard", dict(src=R, dst=R), "shard dst must be S(i)"),
    ("unshard", dict(src=V, dst=R), "unshard src must be S(i)"),
    ("unshard", dict(src=R, dst=R), "unshard src must be S(i)"),
]


@pytest.mark.parametrize("fn,kw,msg", BAD, ids=[f"{b[0]}-{b[1]['src']!r}-{b[1]['dst']!r}"
                                                for b in BAD])
def test_bad_src_dst(fn, kw, msg, tp, checked):
    # x is typed so that a type check, were it first, would raise SpmdTypeError.
    x = make({"dp": R, "tp": R if kw["src"] is not R else V}, (4, 4))
    before = ltype(x)
    with pytest.raises(ValueError) as ei:
        getattr(spmd, fn)(x, tp, **kw)
    assert str(ei.value).startswith(msg), str(ei.value)
    assert ltype(x) == before


def test_all_reduce_src_R_exact_message(tp):
    with pytest.raises(ValueError) as ei:
        spmd.all_reduce(torch.randn(4), tp, src=R, dst=R)
    assert str(ei.value) == _AR_R


def test_shard_dim_out_of_range(tp):
    x = torch.randn(4, 4)
    with pytest.raises(SpmdTypeError):
        spmd.all_gather(x, tp, src=S(2), dst=R)
    with pytest.raises(SpmdTypeError):
        spmd.convert(x, tp, src=R, dst=S(-3))
    with pytest.raises(SpmdTypeError):
        spmd.reduce_scatter(torch.tensor(1.0), tp, src=P, dst=S(0))


def test_dim_conflicts(tp):
    x = torch.randn(8, 8)
    with pytest.raises(ValueError, match="conflict"):
        spmd.all_gather(x, tp, src=S(0), dst=R, gather_dim=1)
    with pytest.raises(ValueError, match="conflict"):
        spmd.reduce_scatter(x, tp, src=P, dst=S(0), scatter_dim=1)
    with pytest.raises(ValueError):
        spmd.all_to_all(x, tp, src=S(0), dst=S(1), split_dim=0)
    with pytest.raises(ValueError):
        spmd.all_to_all(x, tp, src=S(0), dst=S(1), concat_dim=1)
    with pytest.raises(ValueError):
        spmd.all_to_all(x, tp, src=S(1), dst=V, split_dim=0)


def test_all_to_all_V_to_shard_dims(tp):
    # V -> S(j) concatenates on j (explicit concat_dim must agree) and
    # splits on dim 0 by default.
    x = torch.randn(8, 8)
    with pytest.raises(ValueError):
        spmd.all_to_all(x, tp, src=V, dst=S(1), concat_dim=0)
    y = spmd.all_to_all(torch.randn(8, 3), tp, src=V, dst=S(1))
    assert tuple(y.shape) == (2, 12)


# ----------------------------------------------------------------------------------
# Checker rule
# ----------------------------------------------------------------------------------

CHECKS = [
    ("all_reduce", dict(src=P, dst=R), R, P),
    ("all_reduce", dict(src=P, dst=I), I, P),
    ("all_gather", dict(src=V, dst=R), P, V),
    ("all_gather", dict(src=S(0), dst=I), R, V),
    ("reduce_scatter", dict(src=P, dst=S(0)), R, P),
    ("all_to_all", dict(src=V, dst=V), R, V),
    ("all_to_all", dict(src=S(0), dst=S(1)), P, V),
    ("reinterpret", dict(src=V, dst=P), R, V),
    ("reinterpret", dict(src=R, dst=V, expert_mode=True), V, R),
    ("convert", dict(src=R, dst=S(0)), I, R),
    ("convert", dict(src=I, dst=R), R, I),
    ("convert", dict(src=R, dst=P), V, R),
    ("redistribute", dict(src=S(0), dst=R), R, V),
    ("redistribute", dict(src=P, dst=R), R, P),
    ("invariant_to_replicate", dict(), R, I),
]


@pytest.mark.parametrize("fn,kw,have,want", CHECKS,
                         ids=[f"{c[0]}-{c[1].get('src')!r}-{c[1].get('dst')!r}-got{c[2]!r}"
                              for c in CHECKS])
def test_input_type_must_equal_src(fn, kw, have, want, tp, checked):
    # requires grad: R where I is due (or I where R is) passes for an input
    # that takes no gradient (test_rules_031.py)
    x = make({"dp": R, "tp": have}, (8, 8), requires_grad=True)
    with pytest.raises(SpmdTypeError) as ei:
        getattr(spmd, fn)(x, tp, **kw)
    assert first_line(ei) == (f"{fn}: expected input type {LETTER[want]} on axis mesh_tp, "
                              f"got {LETTER[have]}")
    assert ltype(x) == {"mesh_dp": "R", "mesh_tp": have.name}


def test_all_reduce_exact_type_error(tp, checked):
    x = make({"dp": R, "tp": R}, (4,))
    with pytest.raises(SpmdTypeError) as ei:
        spmd.all_reduce(x, tp, src=P, dst=R)
    assert first_line(ei) == ("all_reduce: expected input type P on "
                              "axis mesh_tp, got R")
    assert ltype(x) == {"mesh_dp": "R", "mesh_tp": "R"}


def test_shard_unshard_report_the_underlying_op(tp, checked):
    x = make({"dp": R, "tp": P}, (8, 8))
    with pytest.raises(SpmdTypeError, match=r"^convert: expected input type "
                                            r"R on axis mesh_tp"):
        spmd.shard(x, tp, src=R, dst=S(0))
    with pytest.raises(SpmdTypeError, match=r"^all_gather: expected input type "
                                            r"V on axis mesh_tp"):
        spmd.unshard(x, tp, src=S(0), dst=R)


def test_varying_accepted_for_reductions(tp, checked):
    # input V passes where src is P.
    x = make({"dp": R, "tp": V}, (8, 3))
    assert ltype(spmd.all_reduce(x, tp, src=P, dst=R)) == {"mesh_dp": "R", "mesh_tp": "R"}
    assert ltype(spmd.all_reduce(x, tp, dst=I)) == {"mesh_dp": "R", "mesh_tp": "I"}
    assert ltype(spmd.reduce_scatter(x, tp, src=P, dst=S(0))) == {"mesh_dp": "R",
                                                                   "mesh_tp": "V"}


def test_untyped_axis_strict(tp, typed, tp_axis, dp_axis, checked):
    x = make({"dp": R}, (4,))
    with pytest.raises(SpmdTypeError) as ei:
        spmd.all_reduce(x, tp, src=P, dst=R)
    assert first_line(ei) == ("all_reduce: tensor has no type for axis mesh_tp. Use "
                              "assert_type() to annotate the tensor on this axis before calling "
                              "collectives.")
    assert ltype(x) == {"mesh_dp": "R"}


def test_untyped_axis_strict_truly_untyped(tp, mesh):
    with spmd.set_current_mesh(mesh), typecheck():
        with spmd.no_typecheck():
            x = torch.randn(4, 4)
        with pytest.raises(SpmdTypeError, match="all_gather: tensor has no type for axis mesh_tp"):
            spmd.all_gather(x, tp, src=S(0), dst=R)
        assert not spmd.has_local_type(x)


def test_untyped_axis_permissive(tp, mesh):
    with spmd.set_current_mesh(mesh), typecheck(strict_mode="permissive"):
        x = make({"dp": V}, (4, 4))
        y = spmd.all_reduce(x, tp, src=P, dst=R)
        assert ltype(y) == {"mesh_dp": "V"}  # the axis is not added
        z = make({"dp": R, "tp": R}, (4, 4))
        with pytest.raises(SpmdTypeError, match="all_reduce: expected input type"):
            spmd.all_reduce(z, tp, src=P, dst=R)


def test_value_error_comes_before_type_check(tp, checked):
    x = make({"dp": R, "tp": R}, (4,))
    with pytest.raises(ValueError):
        spmd.all_reduce(x, tp, src=R, dst=R)
    with pytest.raises(ValueError):
        spmd.convert(x, tp, src=R, dst=I)  # gated, though x is R


def test_unchecked_outputs_are_untyped(tp, dp_axis, tp_axis):
    x = torch.randn(4, 4)
    spmd.assert_type(x, {dp_axis: R, tp_axis: P})
    y = spmd.all_reduce(x, tp, src=P, dst=R)
    assert not spmd.has_local_type(y)


# ----------------------------------------------------------------------------------
# Wrong group / axis
# ----------------------------------------------------------------------------------


def test_axis_name_needs_ambient_device_mesh(tp_axis, dp_axis):
    x = torch.randn(4)
    with pytest.raises(RuntimeError, match="requires an ambient DeviceMesh"):
        spmd.all_reduce(x, "tp", src=P, dst=R)
    with pytest.raises(RuntimeError, match="requires an ambient DeviceMesh"):
        spmd.convert(x, tp_axis, src=R, dst=P)
    with spmd.set_current_mesh({"tp": tp_axis, "dp": dp_axis}):  # axes, not a DeviceMesh
        with pytest.raises(RuntimeError, match="requires an ambient DeviceMesh"):
            spmd.all_gather(x, "tp", src=S(0), dst=R)


def test_axis_name_without_mesh_message_as_reference(tp):
    import reference
    ref = reference.load()
    texts = []
    for lib in (spmd, ref):
        x = lib.assert_type(torch.randn(6, 4), {tp: lib.R})
        with pytest.raises(RuntimeError) as e:
            lib.convert(x, "tp", src=lib.R, dst=lib.S(0))
        texts.append(str(e.value))
    assert texts[0] == texts[1]


def test_indivisible_reduce_scatter_is_a_value_error(mesh, tp):
    """Deliberate difference (docs/differences.md): cspmd checks the extent
    before the collective runs and raises ValueError, as for its other
    argument errors; the reference leaves it to torch's functional
    collective, whose assert raises AssertionError."""
    import reference
    ref = reference.load()
    reference.load("spmd_types.checker")
    for lib, exc in ((spmd, ValueError), (ref, AssertionError)):
        x = lib.assert_type(torch.randn(7), {tp: lib.P})
        with lib.checker.typecheck():
            with pytest.raises(exc, match=r"input dimension 0 \(7\)? must be a multiple of "
                               r"group_size 4"):
                lib.reduce_scatter(x, tp, src=lib.P, dst=lib.S(0))
        assert lib.get_local_type(x) == {lib.MeshAxis.of(tp): lib.P}


def test_unknown_axis_name(mesh):
    x = torch.randn(4)
    with spmd.set_current_mesh(mesh):
        with pytest.raises(RuntimeError, match="ep"):
            spmd.all_reduce(x, "ep", src=P, dst=R)
        with pytest.raises(RuntimeError):
            spmd.all_reduce(x, spmd.MeshAxis.of(2, 1), src=P, dst=R)


@pytest.mark.parametrize("bad", [42, object(), 3.5], ids=["int", "object", "float"])
def test_non_group_axis(bad):
    x = torch.randn(4)
    with pytest.raises(TypeError):
        spmd.all_reduce(x, bad, src=P, dst=R)
    with pytest.raises(TypeError):
        spmd.reinterpret(x, bad, src=V, dst=P)


def test_non_tensor_input(tp):
    with pytest.raises(TypeError):
        spmd.all_reduce([1.0, 2.0], tp, src=P, dst=R)
    with pytest.raises(TypeError):
        spmd.convert(3.0, tp, src=R, dst=P)


# ----------------------------------------------------------------------------------
# dtype options
# ----------------------------------------------------------------------------------

f32, f64, bf16, f16 = torch.float32, torch.float64, torch.bfloat16, torch.float16


@pytest.mark.parametrize("fn,kw,shape", [
    ("all_reduce", dict(src=P, dst=R), (4, 3)),
    ("all_reduce", dict(src=P, dst=I), (4, 3)),
    ("all_gather", dict(src=S(0), dst=R), (4, 3)),
    ("all_gather", dict(src=V, dst=I), (4, 3)),
    ("reduce_scatter", dict(src=P, dst=S(0)), (4, 3)),
    ("all_to_all", dict(src=S(0), dst=S(1)), (4, 4)),
    ("convert", dict(src=R, dst=V), (4, 3)),
    ("convert", dict(src=R, dst=P), (4, 3)),
    ("reinterpret", dict(src=V, dst=P), (4, 3)),
    ("reinterpret", dict(src=I, dst=V), (4, 3)),
    ("redistribute", dict(src=P, dst=S(1)), (3, 4)),
    ("invariant_to_replicate", dict(), (4, 3)),
], ids=lambda v: v if isinstance(v, str) else None)
@pytest.mark.parametrize("opts,want", [
    (dict(op_dtype=f64), f64),
    (dict(out_dtype=f64), f64),
    (dict(out_dtype=f16), f16),
    (dict(op_dtype=f16, out_dtype=f64), f64),
    (dict(op_dtype=f64, out_dtype=f16), f16),
    (dict(), f32),
], ids=["op64", "out64", "out16", "op16_out64", "op64_out16", "none"])
def test_result_dtype(fn, kw, shape, opts, want, tp):
    x = torch.randn(*shape)
    y = getattr(spmd, fn)(x, tp, **kw, **opts)
    assert y.dtype == want


def test_dtype_options_keep_type(tp, checked):
    x = make({"dp": R, "tp": P}, (4, 3))
    y = spmd.all_reduce(x, tp, src=P, dst=R, out_dtype=bf16)
    assert y.dtype == bf16 and ltype(y) == {"mesh_dp": "R", "mesh_tp": "R"}
    z = spmd.all_gather(make({"dp": R, "tp": V}, (4, 3)), tp, src=S(0), dst=I, op_dtype=f64)
    assert z.dtype == f64 and ltype(z) == {"mesh_dp": "R", "mesh_tp": "I"}


def test_noop_ignores_dtype_options(tp):
    x = torch.randn(4, 4)
    assert spmd.convert(x, tp, src=V, dst=S(0), op_dtype=f64, out_dtype=bf16) is x
    assert spmd.redistribute(x, tp, src=R, dst=R, out_dtype=f64) is x
    assert spmd.reinterpret(x, tp, src=P, dst=P, backward_options={"bogus": 1}) is x


REDUCED = "When using reduced precision with an operation whose backward involves a reduction"

# (fn, kwargs, input dtype, options): forward calls whose backward reduces
REDUCED_CASES = [
    ("all_reduce", dict(src=P, dst=R), bf16, {}),
    ("all_reduce", dict(src=P, dst=R), f16, {}),
    ("all_reduce", dict(src=P, dst=R), f32, dict(op_dtype=bf16)),
    ("all_reduce", dict(src=P, dst=R), f32, dict(out_dtype=bf16)),
    ("all_gather", dict(src=S(0), dst=R), bf16, {}),
    ("all_gather", dict(src=V, dst=R), f32, dict(op_dtype=bf16)),
    ("convert", dict(src=I, dst=R), bf16, {}),
    ("reinterpret", dict(src=I, dst=R, expert_mode=True), bf16, {}),
    ("invariant_to_replicate", dict(), bf16, {}),
    ("redistribute", dict(src=P, dst=R), bf16, {}),
    ("all_reduce", dict(src=P, dst=R), bf16, dict(backward_options={"out_dtype": f32})),
]


@pytest.mark.parametrize("fn,kw,dtype,opts", REDUCED_CASES,
                         ids=[f"{c[0]}-{c[2]}-{sorted(c[3])}" for c in REDUCED_CASES])
def test_reduced_precision_rule_raises(fn, kw, dtype, opts, tp):
    x = torch.randn(4, 3, dtype=dtype, requires_grad=True)
    with pytest.raises(ValueError) as ei:
        getattr(spmd, fn)(x, tp, **kw, **opts)
    assert str(ei.value).startswith(REDUCED)
    assert 'backward_options={"op_dtype": ...}' in str(ei.value)


@pytest.mark.parametrize("fn,kw,dtype,opts,grad", [
    # an explicit backward op_dtype satisfies the rule
    ("all_reduce", dict(src=P, dst=R), bf16, dict(backward_options={"op_dtype": f32}), True),
    ("all_gather", dict(src=S(0), dst=R), f32,
     dict(op_dtype=bf16, backward_options={"op_dtype": f32}), True),
    # no reduction in the backward
    ("all_reduce", dict(src=P, dst=I), bf16, {}, True),
    ("all_gather", dict(src=S(0), dst=I), bf16, {}, True),
    ("reduce_scatter", dict(src=P, dst=S(0)), bf16, {}, True),
    ("convert", dict(src=R, dst=V), bf16, {}, True),
    # fp64 / fp32 with no narrower option never triggers
    ("all_reduce", dict(src=P, dst=R), f64, {}, True),
    ("all_reduce", dict(src=P, dst=R), f32, dict(op_dtype=f64), True),
    # no gradient needed
    ("all_reduce", dict(src=P, dst=R), bf16, {}, False),
])
def test_reduced_precision_rule_allows(fn, kw, dtype, opts, grad, tp):
    x = torch.randn(4, 3, dtype=dtype, requires_grad=grad)
    y = getattr(spmd, fn)(x, tp, **kw, **opts)
    assert isinstance(y, torch.Tensor)


def test_reduced_precision_rule_off_under_no_grad(tp):
    x = torch.randn(4, 3, dtype=bf16, requires_grad=True)
    with torch.no_grad():
        y = spmd.all_reduce(x, tp, src=P, dst=R)
    assert y.dtype == bf16


def test_reduced_precision_gradient_in_input_dtype(tp, checked):
    x = make({"dp": R, "tp": P}, (4, 3), dtype=bf16, requires_grad=True)
    y = spmd.all_reduce(x, tp, src=P, dst=R, backward_options={"op_dtype": f32})
    assert y.dtype == bf16
    y.backward(make({"dp": P, "tp": P}, (4, 3), dtype=bf16))
    assert x.grad.dtype == bf16
    assert ltype(x.grad) == {"mesh_dp": "P", "mesh_tp": "R"}


def test_backward_out_dtype_option(tp):
    x = torch.randn(4, 3, requires_grad=True)
    y = spmd.all_gather(x, tp, src=S(0), dst=I, out_dtype=f64,
                        backward_options={"op_dtype": f64, "out_dtype": f32})
    assert y.dtype == f64
    y.backward(torch.ones(16, 3, dtype=f64))
    assert x.grad.dtype == f32


def test_reduced_precision_checked_before_unknown_keys(tp):
    x = torch.randn(4, 3, dtype=bf16, requires_grad=True)
    with pytest.raises(ValueError) as ei:
        spmd.all_reduce(x, tp, src=P, dst=R, backward_options={"bogus": f32})
    assert str(ei.value).startswith(REDUCED)


def test_unknown_backward_options_keys(tp):
    x = torch.randn(4, 3)
    with pytest.raises(ValueError) as ei:
        spmd.all_reduce(x, tp, src=P, dst=R, backward_options={"op_dtype": f32, "bogus": 1})
    assert str(ei.value).startswith("Unknown keys in backward_options: {'bogus'}. Valid keys "
                                    "are: ['async_op', 'backward_options', 'op_dtype', 'out_dtype']")
    with pytest.raises(ValueError, match="Unknown keys in backward_options"):
        spmd.all_gather(x, tp, src=S(0), dst=I, backward_options={"dtype": f32})
    with pytest.raises(ValueError, match="Unknown keys in backward_options"):  # nested level
        spmd.all_reduce(x, tp, src=P, dst=R,
                        backward_options={"op_dtype": f32, "backward_options": {"x": 1}})


def test_inplace_rejects_dtype_options(tp):
    x = torch.randn(4, 3)
    msg = "inplace=True does not support op_dtype or out_dtype"
    with pytest.raises(ValueError, match=msg):
        spmd.all_reduce(x, tp, src=P, dst=R, inplace=True, op_dtype=f64)
    with pytest.raises(ValueError, match=msg):
        spmd.all_reduce(x, tp, src=P, dst=R, inplace=True, out_dtype=f64)
    # checked first: before the unknown-keys check
    with pytest.raises(ValueError, match=msg):
        spmd.all_reduce(x, tp, src=P, dst=R, inplace=True, op_dtype=f64,
                        backward_options={"bogus": 1})


# ----------------------------------------------------------------------------------
# Backward: the backward collectives are type-checked
# ----------------------------------------------------------------------------------


def test_all_gather_gradient_type(tp, checked):
    x = make({"dp": R, "tp": V}, (2, 3), requires_grad=True)
    y = spmd.all_gather(x, tp, src=V, dst=R)
    assert ltype(y) == {"mesh_dp": "R", "mesh_tp": "R"}
    y.backward(make({"dp": P, "tp": P}, (4, 2, 3)))
    assert ltype(x.grad) == {"mesh_dp": "P", "mesh_tp": "V"}


def untyped_ones(*shape):
    with spmd.no_typecheck():
        return torch.ones(*shape)


def test_wrong_explicit_gradient_type_raises_in_backward(tp, checked):
    x = make({"dp": R, "tp": V}, (2, 3), requires_grad=True)
    y = spmd.all_gather(x, tp, src=V, dst=R)
    g = make({"dp": P, "tp": R}, (4, 2, 3))  # the gradient of an R tensor must be P
    # Given to backward(), the explicit-gradient rule rejects it up front ...
    with pytest.raises(SpmdTypeError, match="Explicit gradient type mismatch on axis mesh_tp"):
        y.backward(g)
    # ... and handed to the backward collective by a hook, that collective does.
    y.register_hook(lambda _: g)
    with pytest.raises(SpmdTypeError) as ei:
        y.backward(untyped_ones(4, 2, 3))
    assert first_line(ei) == ("reduce_scatter: expected input type P on "
                              "axis mesh_tp, got R")
    assert x.grad is None


@pytest.mark.parametrize("fn,kw,shape,gshape,gtype,bwd_fn,want", [
    ("all_reduce", dict(src=P, dst=R), (2, 3), (2, 3), I, "all_reduce", P),  # V would pass (3.10)
    ("reduce_scatter", dict(src=P, dst=S(0)), (8, 3), (2, 3), R, "all_gather", V),
    ("all_gather", dict(src=S(0), dst=I), (2, 3), (8, 3), V, "convert", I),
    ("invariant_to_replicate", dict(), (2, 3), (2, 3), R, "all_reduce", P),
    ("convert", dict(src=R, dst=S(0)), (8, 3), (2, 3), R, "convert", V),
    ("all_to_all", dict(src=S(0), dst=S(1)), (2, 8), (8, 2), P, "all_to_all", V),
])
def test_wrong_gradient_type_each_backward(fn, kw, shape, gshape, gtype, bwd_fn, want, tp,
                                            checked):
    src = kw.get("src", I)
    x = make({"dp": R, "tp": base(src)}, shape, requires_grad=True)
    y = getattr(spmd, fn)(x, tp, **kw)
    g = make({"dp": P, "tp": gtype}, gshape)
    y.register_hook(lambda _: g)  # the wrong gradient reaches the backward collective
    with pytest.raises(SpmdTypeError) as ei:
        y.backward(untyped_ones(*gshape))
    assert first_line(ei) == (f"{bwd_fn}: expected input type {LETTER[want]} on axis mesh_tp, "
                              f"got {LETTER[gtype]}")


def test_implicit_seed_through_collectives(tp, checked):
    # loss P on both axes: the seed is R (its dual); all_reduce(P->I)'s backward
    # is convert(I, R) and needs an I gradient, so go through R.
    x = make({"dp": V, "tp": P}, (4, 3), requires_grad=True)
    y = spmd.all_reduce(x, tp, src=P, dst=R)
    loss = spmd.reinterpret(y.sum(), "dp", src=V, dst=P)
    loss = spmd.convert(loss, tp, src=R, dst=P)
    assert ltype(loss) == {"mesh_dp": "P", "mesh_tp": "P"}
    loss.backward()
    assert ltype(x.grad) == {"mesh_dp": "V", "mesh_tp": "R"}


# ----------------------------------------------------------------------------------
# Megatron-style tensor parallelism, forward + backward under the checker
# ----------------------------------------------------------------------------------


def _params(hidden=16, ffn_local=8):
    return dict(
        w1=make({"dp": R, "tp": V}, (ffn_local, hidden), requires_grad=True),  # column
        b1=make({"dp": R, "tp": V}, (ffn_local,), requires_grad=True),
        w2=make({"dp": R, "tp": V}, (hidden, ffn_local), requires_grad=True),  # row
        b2=make({"dp": R, "tp": R}, (hidden,), requires_grad=True),
    )


def _check_param_grads(ps):
    for name, p in ps.items():
        assert p.grad is not None, name
        t = spmd.get_local_type(p)
        gt = ltype(p.grad)
        for axis, ty in t.items():
            got = gt[repr(axis)]
            if ty is V:
                assert got == "V", (name, axis, gt)
            else:  # R: P (dual), or V for a pending sum of local contributions
                assert ty is R and got in ("P", "V"), (name, axis, gt)


def test_megatron_column_then_row_parallel(checked):
    ps = _params()
    x = make({"dp": V, "tp": R}, (8, 16))
    h = F.linear(x, ps["w1"], ps["b1"])  # column parallel: out features sharded
    assert ltype(h) == {"mesh_dp": "V", "mesh_tp": "V"}
    h = torch.relu(h)
    o = F.linear(h, ps["w2"])  # row parallel: local partial sums
    o = spmd.all_reduce(o, "tp", src=P, dst=R) + ps["b2"]
    assert ltype(o) == {"mesh_dp": "V", "mesh_tp": "R"}
    loss = spmd.reinterpret(o.pow(2).sum(), "dp", src=V, dst=P)
    loss = spmd.convert(loss, "tp", src=R, dst=P)
    loss.backward()
    _check_param_grads(ps)


def test_megatron_column_parallel_gather_output(checked):
    ps = _params()
    x = make({"dp": V, "tp": R}, (8, 16))
    y = F.linear(x, ps["w1"], ps["b1"])  # (8, ffn_local), sharded on dim 1
    full = spmd.all_gather(y, "tp", src=S(1), dst=R)
    assert full.shape == (8, 32)
    assert ltype(full) == {"mesh_dp": "V", "mesh_tp": "R"}
    loss = spmd.reinterpret(full.sum(), "dp", src=V, dst=P)
    spmd.convert(loss, "tp", src=R, dst=P).backward()
    _check_param_grads({"w1": ps["w1"], "b1": ps["b1"]})


def test_megatron_row_parallel_scattered_input(checked):
    ps = _params()
    x = make({"dp": V, "tp": R}, (8, 32))
    xs = spmd.convert(x, "tp", src=R, dst=S(1))  # each rank keeps its in-feature slice
    assert xs.shape == (8, 8)
    o = spmd.all_reduce(F.linear(xs, ps["w2"]), "tp", src=P, dst=I)
    assert ltype(o) == {"mesh_dp": "V", "mesh_tp": "I"}
    loss = spmd.reinterpret(o.sum(), "dp", src=V, dst=P)
    loss.backward()
    _check_param_grads({"w2": ps["w2"]})


def test_megatron_sequence_parallel(checked):
    ps = _params()
    x = make({"dp": V, "tp": V}, (4, 16), requires_grad=True)  # sequence-sharded
    full = spmd.all_gather(x, "tp", src=S(0), dst=R)
    assert full.shape == (16, 16) and ltype(full) == {"mesh_dp": "V", "mesh_tp": "R"}
    h = torch.relu(F.linear(full, ps["w1"], ps["b1"]))
    o = spmd.reduce_scatter(F.linear(h, ps["w2"]), "tp", src=P, dst=S(0))
    assert o.shape == (4, 16) and ltype(o) == {"mesh_dp": "V", "mesh_tp": "V"}
    o = o + ps["b2"]
    assert ltype(o) == {"mesh_dp": "V", "mesh_tp": "V"}
    loss = spmd.reinterpret(o.sum(), "dp", src=V, dst=P)
    loss = spmd.reinterpret(loss, "tp", src=V, dst=P)
    loss.backward()
    assert ltype(x.grad) == {"mesh_dp": "V", "mesh_tp": "V"}
    _check_param_grads(ps)


# ----------------------------------------------------------------------------------
# Meta tensors (checking off)
# ----------------------------------------------------------------------------------


def test_meta_all_reduce(tp):
    y = spmd.all_reduce(torch.empty(4, device="meta"), tp, src=P, dst=R)
    assert y.device.type == "meta" and tuple(y.shape) == (4,)


@pytest.mark.parametrize("name", ["all_reduce_P_I", "all_gather_S0_R", "all_gather_V_I",
                                  "reduce_scatter_P_S0", "reduce_scatter_P_V",
                                  "all_to_all_S0_S1", "convert_R_S0", "convert_V_P",
                                  "broadcast_V_R"])
def test_meta_shapes(name, tp):
    _, _, shape, call, out_shape = PAIRS[name]
    y = call(torch.empty(*shape, device="meta"), tp)
    assert y.device.type == "meta" and tuple(y.shape) == out_shape


@pytest.mark.parametrize("dst", [V, P])
def test_composed_reinterpret_backward_options(dst, mesh, tp):
    # I -> V|P is two nodes: a nested level cannot be split between them
    # (the reference raises the same), and unknown keys are not dropped.
    x = spmd.assert_type(torch.randn(4, 3, requires_grad=True), {tp: I})
    with pytest.raises(NotImplementedError, match="nested backward_options"):
        spmd.reinterpret(x, tp, src=I, dst=dst,
                         backward_options={"op_dtype": f32, "backward_options": {}})
    with pytest.raises(ValueError, match="Unknown keys in backward_options: {'bogus'}"):
        spmd.reinterpret(x, tp, src=I, dst=dst, backward_options={"bogus": 1})
    with spmd.set_current_mesh({"tp": tp}), spmd.checker.typecheck():
        y = spmd.reinterpret(x, tp, src=I, dst=dst, backward_options={"op_dtype": f32})
    assert spmd.get_local_type(y) == {spmd.MeshAxis.of(tp): dst}


@pytest.mark.parametrize("call", [
    lambda x: spmd.all_reduce(x, "tp", src=P, dst=I),
    lambda x: spmd.convert(spmd.all_reduce(x, "tp", src=P, dst=R).sum(), "tp", src=R, dst=P),
    lambda x: spmd.reduce_scatter(x, "tp", src=P, dst=S(0)),
], ids=["all_reduce P->I", "all_reduce P->R", "reduce_scatter P->S(0)"])
def test_v_input_read_as_partial_gets_a_varying_gradient(mesh, call):
    # src=P reads a V input as its pending sum (a free reinterpret V -> P):
    # the gradient goes back through that reinterpret's backward, R|I -> V,
    # so the V input's gradient is V, as with src=V
    with spmd.set_current_mesh(mesh), typecheck():
        x = make({"dp": I, "tp": V}, (8, 4), requires_grad=True)
        y = call(x)
        loss = y.sum()
        if ltype(loss)["mesh_tp"] == "V":
            loss = spmd.reinterpret(loss, "tp", src=V, dst=P)
        loss.backward()
    assert ltype(x.grad) == {"mesh_dp": "I", "mesh_tp": "V"}
