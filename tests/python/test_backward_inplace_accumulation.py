"""The autograd engine adds a tensor's second gradient contribution into the
first one in place (``add_`` on a buffer it owns, grad mode off).  The two
contributions may differ in ways that are sound for a gradient -- an R
contribution into an I buffer (both complete sums), a pending sum (P) into
a V buffer -- and the in-place check must not refuse them (found by the
long backward fuzz, seeds 1000510 and 2000611).  The buffer keeps its
letter on R/I and becomes P on V + P, so the leaf's gradient stays the
dual of its type.  Outside backward the same in-place adds are refused.
"""

import pytest
import torch

import cspmd as spmd
from cspmd import I, P, R, V, SpmdTypeError
from conftest import ltype

DP, TP = "mesh_dp", "mesh_tp"


def test_r_contribution_into_an_i_buffer(checked, dp, tp):
    # y gets I from y * 2 (a fresh buffer, first) and R from y @ w (I grad
    # times R weights, no operand takes a gradient: R) -- add_(I, R).
    x = spmd.assert_type(torch.randn(4, 4, requires_grad=True), {dp: I, tp: V})
    w = spmd.assert_type(torch.randn(4, 4), {dp: R, tp: R})
    y = torch.sigmoid(x)
    z = (y @ w) + (y * 2)
    spmd.reinterpret(z.sum(), tp, src=V, dst=P).backward()
    assert ltype(x.grad) == {DP: "I", TP: "V"}


def test_r_contribution_into_an_i_buffer_through_stack(checked, dp, tp):
    x = spmd.assert_type(torch.randn(4, 4, requires_grad=True), {dp: I, tp: V})
    w = spmd.assert_type(torch.randn(4, 4), {dp: R, tp: R})
    y = torch.sigmoid(x)
    z = torch.stack([y @ w, y * 2]).sum(0)
    spmd.reinterpret(z.sum(), tp, src=V, dst=P).backward()
    assert ltype(x.grad) == {DP: "I", TP: "V"}


def test_pending_sum_into_a_v_buffer(checked, dp, tp):
    # x is R on tp, so its gradient is due P: one contribution is V (y * v),
    # the other P (through convert R -> P); add_(V, P) gives P.
    x = spmd.assert_type(torch.randn(4, 4, requires_grad=True), {dp: I, tp: R})
    v = spmd.assert_type(torch.randn(4, 4), {dp: I, tp: V})
    y = torch.sigmoid(x)
    u, z = y * 2, y * v
    loss = (spmd.convert(u.sum(), tp, src=R, dst=P)
            + spmd.reinterpret(z.sum(), tp, src=V, dst=P))
    loss.backward()
    assert ltype(x.grad) == {DP: "I", TP: "P"}


def test_forward_in_place_adds_are_still_refused(checked, typed):
    buf = typed({"dp": I, "tp": V})
    with pytest.raises(SpmdTypeError, match="from I to R"):
        buf.add_(typed({"dp": R, "tp": V}))
    assert ltype(buf) == {DP: "I", TP: "V"}
    buf = typed({"dp": I, "tp": V})
    with pytest.raises(SpmdTypeError):
        buf.add_(typed({"dp": I, "tp": P}))
    assert ltype(buf) == {DP: "I", TP: "V"}
