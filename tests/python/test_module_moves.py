"""Types survive module moves, copies, saving and loading (cspmd/carry.py,
csrc/core/type_carry.c, csrc/torch/type_saving.cpp).

A model is annotated once; moving it to another dtype or device, copying
it, saving and loading it must not drop the types (else the next checked
step fails with "no type", or worse, stops checking).
"""

import copy
import io
import os
import sys

import pytest
import torch

import cspmd as spmd
from cspmd import I, P, R, V, SpmdTypeError
from conftest import ltype
import time_limits

W = {"mesh_dp": "R", "mesh_tp": "V"}
B = {"mesh_dp": "R", "mesh_tp": "I"}


def typed_model(dp, tp, grads=False):
    m = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3))
    spmd.assert_type(m[0].weight, {dp: R, tp: V})
    spmd.assert_type(m[0].bias, {dp: R, tp: V})
    spmd.assert_type(m[1].weight, {dp: R, tp: I})
    spmd.assert_type(m[1].bias, {dp: R, tp: I})
    m.register_buffer("steps", spmd.assert_type(torch.zeros(3), {dp: R, tp: I}))
    if grads:
        for p in m.parameters():
            p.grad = torch.ones_like(p)
            spmd.assert_type(p.grad, {dp: P, tp: I})
    return m


def assert_types_kept(m):
    assert ltype(m[0].weight) == W and ltype(m[0].bias) == W
    assert ltype(m[1].weight) == B and ltype(m[1].bias) == B
    assert ltype(m.steps) == B


MOVES = {
    "to_float64": lambda m: m.to(torch.float64),
    "half": lambda m: m.half(),
    "bfloat16": lambda m: m.bfloat16(),
    "double_then_float": lambda m: m.double().float(),
    "cpu": lambda m: m.cpu(),
    "to_device": lambda m: m.to("cpu", torch.float64),
    "_apply": lambda m: m._apply(lambda t: t.clone()),
    "to_empty": lambda m: m.to_empty(device="cpu"),
}


@pytest.mark.parametrize("move", MOVES, ids=list(MOVES))
@pytest.mark.parametrize("swap", [False, True], ids=["assign_data", "swap_params"])
def test_moves_keep_parameter_buffer_and_grad_types(move, swap, dp, tp):
    old = torch.__future__.get_swap_module_params_on_conversion()
    torch.__future__.set_swap_module_params_on_conversion(swap)
    try:
        m = typed_model(dp, tp, grads=move != "to_empty")
        MOVES[move](m)
    finally:
        torch.__future__.set_swap_module_params_on_conversion(old)
    assert_types_kept(m)
    if move != "to_empty":
        assert all(ltype(p.grad) == {"mesh_dp": "P", "mesh_tp": "I"} for p in m.parameters())
    if move == "to_float64":
        assert m[0].weight.dtype == torch.float64


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_and_back(dp, tp):
    m = typed_model(dp, tp).cuda()
    assert_types_kept(m)
    assert_types_kept(m.cpu())


def test_move_under_typecheck_then_a_checked_step(mesh, dp, tp):
    m = typed_model(dp, tp)
    x = spmd.assert_type(torch.randn(2, 4, dtype=torch.float64), {dp: V, tp: I})
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck():
        m.double()
        h = spmd.convert(x, tp, src=I, dst=R)
        y = m[0](h)
        assert ltype(y) == {"mesh_dp": "V", "mesh_tp": "V"}
    assert_types_kept(m)


def test_parameter_of_a_typed_tensor(dp, tp):
    t = spmd.assert_type(torch.randn(3), {dp: R, tp: I})
    assert ltype(torch.nn.Parameter(t)) == B


# ---- deepcopy ------------------------------------------------------------------


@pytest.mark.parametrize("checking", [False, True])
def test_deepcopy_of_model_tensor_and_parameter(checking, mesh, dp, tp):
    m = typed_model(dp, tp)
    t = spmd.assert_type(torch.randn(3), {dp: R, tp: I})
    t.grad = spmd.assert_type(torch.ones(3), {dp: P, tp: I})
    ctx = spmd.checker.typecheck() if checking else spmd.no_typecheck()
    with spmd.set_current_mesh(mesh), ctx:
        m2, t2, p2 = copy.deepcopy(m), copy.deepcopy(t), copy.deepcopy(m[0].weight)
    assert_types_kept(m2)             # (a Parameter's deepcopy leaves .grad behind: torch's)
    assert ltype(t2) == B and ltype(p2) == W
    assert ltype(t2.grad) == {"mesh_dp": "P", "mesh_tp": "I"}
    assert isinstance(p2, torch.nn.Parameter) and torch.equal(p2, m[0].weight)
    assert m2[0].weight.data_ptr() != m[0].weight.data_ptr()


# ---- load_state_dict ---------------------------------------------------------------


@pytest.mark.parametrize("assign", [False, True])
def test_load_untyped_state_dict_keeps_types(assign, dp, tp):
    m = typed_model(dp, tp)
    src = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3))
    src.register_buffer("steps", torch.full((3,), 5.0))
    m.load_state_dict(src.state_dict(), assign=assign)
    assert_types_kept(m)
    assert torch.equal(m[0].weight, src[0].weight) and torch.equal(m.steps, src.steps)


@pytest.mark.parametrize("assign", [False, True])
def test_load_typed_state_dict_under_typecheck(assign, mesh, dp, tp):
    m, other = typed_model(dp, tp), typed_model(dp, tp)
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck():
        m.load_state_dict(other.state_dict(), assign=assign)
    assert_types_kept(m)


def test_load_state_dict_with_a_conflicting_type_raises_and_loads_nothing(dp, tp):
    m = typed_model(dp, tp)
    sd = {k: v.clone() for k, v in m.state_dict().items()}
    for v in sd.values():
        v.zero_()
    wrong = torch.zeros(3, 4)
    spmd.assert_type(wrong, {dp: R, tp: R})
    sd["0.weight"] = wrong
    before = m[0].bias.detach().clone()
    with pytest.raises(SpmdTypeError) as ei:
        m.load_state_dict(sd)
    assert str(ei.value).startswith(
        "load_state_dict: parameter '0.weight': the tensor is typed {mesh_dp: R, mesh_tp: V} "
        "but the tensor replacing it is typed {mesh_dp: R, mesh_tp: R}")
    assert torch.equal(m[0].bias, before)


# ---- torch.save / torch.load -----------------------------------------------------


def round_trip(obj, **load_kw):
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, **load_kw)


def test_save_load_typed_tensor_and_state_dict(dp, tp):
    t = spmd.assert_type(torch.randn(3), {dp: R, tp: I})
    assert ltype(round_trip(t)) == B
    sd = round_trip(typed_model(dp, tp).state_dict())          # weights_only (the default)
    assert ltype(sd["0.weight"]) == W and ltype(sd["steps"]) == B
    m = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3))
    m.register_buffer("steps", torch.zeros(3))
    m.load_state_dict(sd, assign=True)                          # an untyped model gets them
    assert_types_kept(m)


def test_save_load_partition_spec_and_whole_model(dp, tp):
    t = torch.randn(8, 2)
    spmd.assert_type(t, {dp: R, tp: spmd.S(0)})
    back = round_trip(t)
    assert ltype(back) == {"mesh_dp": "R", "mesh_tp": "V"}
    assert spmd.get_partition_spec(back) == spmd.get_partition_spec(t)
    assert_types_kept(round_trip(typed_model(dp, tp), weights_only=False))


def test_optimizer_state_keeps_types_through_save_and_load(mesh, dp, tp):
    m = typed_model(dp, tp)
    opt = torch.optim.Adam(m.parameters(), lr=0.1)
    x = spmd.assert_type(torch.randn(2, 4), {dp: V, tp: I})
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck():
        h = spmd.convert(x, tp, src=I, dst=R)
        y = m[0](h)
        loss = spmd.reinterpret(spmd.reinterpret(y.pow(2).sum(), dp, src=V, dst=P),
                                tp, src=V, dst=P)
        loss.backward()
        for p in m[0].parameters():
            p.grad = spmd.all_reduce(p.grad, dp, src=P, dst=R)
        m[1].weight.grad = None
        m[1].bias.grad = None
        opt.step()
    saved = round_trip(opt.state_dict())
    opt2 = torch.optim.Adam(m.parameters(), lr=0.1)
    opt2.load_state_dict(saved)
    st = opt2.state[m[0].weight]
    assert ltype(st["exp_avg"]) == W and ltype(st["exp_avg_sq"]) == W


_CHILD = r"""
import sys, torch, cspmd as spmd
t = torch.load(sys.argv[1])
print(sorted((a.layout(), v.name)
             for a, v in spmd.get_local_type(t).items()))
"""


def test_types_load_in_another_process(tmp_path, dp, tp):
    """The saved form names axes by rank layout, not by an id of this process."""
    t = spmd.assert_type(torch.randn(3), {dp: R, tp: V})
    path = tmp_path / "t.pt"
    torch.save(t, path)
    out = time_limits.run([sys.executable, "-c", _CHILD, str(path)], 120, text=True,
                          env=dict(os.environ))
    assert out.returncode == 0, out.stderr
    want = sorted((a.layout(), v.name)
                  for a, v in spmd.get_local_type(t).items())
    assert out.stdout.strip() == str(want)
