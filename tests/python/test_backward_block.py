"""A Megatron-style block (examples/megatron_block.py) checked forward and
backward on the 2x4 dp x tp mesh, with and without sequence parallelism:
no error, and every parameter's gradient carries the dual of its type."""

import os
import sys

import pytest

import cspmd as spmd
import cspmd.checker
from conftest import ltype

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
from megatron_block import build_block, make_input, run_step  # noqa: E402

DUAL = {"R": "P", "I": "I", "V": "V", "P": "R"}


def dual(t):
    return {a: DUAL[v] for a, v in t.items()}


@pytest.mark.parametrize("sp", [False, True], ids=["tp", "tp+sp"])
def test_block_forward_backward_checked(checked, dp, tp, sp):
    block = build_block(dp, tp, sp=sp)
    x = make_input(block)
    loss = run_step(block, x)
    assert ltype(loss) == {"mesh_dp": "P", "mesh_tp": "P" if sp else "I"}
    for name, prm in block.named_parameters():
        assert prm.grad is not None, name
        assert ltype(prm.grad) == dual(ltype(prm)), name
        assert prm.grad.shape == prm.shape


@pytest.mark.parametrize("sp", [False, True], ids=["tp", "tp+sp"])
def test_parameter_types(dp, tp, sp):
    block = build_block(dp, tp, sp=sp)
    rep = "R" if sp else "I"
    expect = {"ln1_w": rep, "ln1_b": rep, "ln2_w": rep, "ln2_b": rep, "b_o": rep, "b2": rep,
              "w_qkv": "V", "b_qkv": "V", "w_o": "V", "w1": "V", "b1": "V", "w2": "V"}
    for name, prm in block.named_parameters():
        assert ltype(prm) == {"mesh_dp": "R", "mesh_tp": expect[name]}, name


@pytest.mark.parametrize("sp", [False, True], ids=["tp", "tp+sp"])
def test_varying_gradient_accepted_where_partial_is_due(checked, dp, tp, sp):
    """The gradient that *arrives* at an R parameter is V (a per-rank
    contribution computed by mm/sum over local data); the duality check
    accepts it and types it P.  A hook registered before the annotation sees
    the raw arriving type."""
    block = build_block(dp, tp, sp=sp, annotate=False)
    arriving = {}
    for name, prm in block.named_parameters():
        prm.register_hook(lambda g, name=name: arriving.__setitem__(name, ltype(g)))
    block.annotate()
    run_step(block, make_input(block))
    for name, prm in block.named_parameters():
        fwd = ltype(prm)
        # dp: every parameter is R on dp and every activation V on dp.
        assert arriving[name]["mesh_dp"] == "V", name
        assert ltype(prm.grad)["mesh_dp"] == "P", name
        if fwd["mesh_tp"] == "R":        # sp: layer norms, row-parallel biases
            assert arriving[name]["mesh_tp"] == "V", name
            assert ltype(prm.grad)["mesh_tp"] == "P", name
        else:
            assert arriving[name]["mesh_tp"] == fwd["mesh_tp"], name
            assert ltype(prm.grad) == dual(fwd), name


def test_backward_false_leaves_gradients_unchecked_and_untyped(mesh, dp, tp):
    block = build_block(dp, tp, sp=True)
    x = make_input(block)
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck(backward=False):
        loss = run_step(block, x)
    assert ltype(loss) == {"mesh_dp": "P", "mesh_tp": "P"}
    for name, prm in block.named_parameters():
        assert prm.grad is not None, name
        assert not spmd.has_local_type(prm.grad), name


def test_unchecked_step_runs(dp, tp):
    block = build_block(dp, tp, sp=False)
    run_step(block, make_input(block))
    assert all(p.grad is not None for p in block.parameters())


def test_two_steps_accumulate(checked, dp, tp):
    """A second backward without clearing: the accumulation (add) is checked
    too and keeps the dual type."""
    block = build_block(dp, tp, sp=True)
    x = make_input(block)
    run_step(block, x)
    from megatron_block import loss_of
    loss_of(block, block(x)).backward()
    for name, prm in block.named_parameters():
        assert ltype(prm.grad) == dual(ltype(prm)), name
