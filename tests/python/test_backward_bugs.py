"""Planted bugs that only backward checking catches.

Each bug is planted in the Megatron-style block of examples/megatron_block.py
(or a piece of it).  For each one the forward pass type-checks cleanly -- so
the reference, which checks the forward only, cannot see it, and neither can
``typecheck(backward=False)`` (test_forward_only_checking_misses_every_bug) --
and ``backward()`` raises SpmdTypeError naming the culprit.

A backward bug is caught in one of two ways:
* a backward op's local inference: the kernel checks every op autograd runs
  (``... during backward, in <Node>``), e.g. a V gradient meeting I operands
  in a layer norm's backward, or a backward collective given the wrong type;
* gradient duality: the gradient arriving at an annotated tensor (assert_type
  on a tensor that requires grad) must be the dual of its type -- R/I where P
  is due means reduced twice, P where R/I/V is due means a reduction missing.

Where the obvious formulation of a bug is type-correct, the test says so and
uses a realistic formulation that is caught; bugs cspmd cannot see by design
are shown as such (bug 3).
"""

import os
import sys

import pytest
import torch
import torch.nn.functional as F

import cspmd as spmd
import cspmd.checker
from cspmd import I, P, R, S, V, SpmdTypeError
from conftest import CopyToTP, CopyToTPNoReduce, ltype

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
from megatron_block import Block, build_block, loss_of, make_input  # noqa: E402


def forward_then_backward(block, x):
    """Forward must pass the checker; returns the error raised by backward()."""
    loss = loss_of(block, block(x))           # outside pytest.raises: forward is clean
    with pytest.raises(SpmdTypeError) as ei:
        loss.backward()
    return str(ei.value)


def make(cls, dp, tp, *, sp=False, annotate=True):
    block = cls(dp, tp, sp=sp)
    return block.annotate() if annotate else block


# ---------------------------------------------------------------------------
# (1) A custom autograd.Function whose backward skips the all-reduce.
#
# Megatron's "f" (copy to the tensor-parallel region): identity forward (I ->
# R on tp), all-reduce of the gradient in backward.  The column-parallel
# linear after it produces a V gradient (mm of V by V: each rank's piece of
# the pending sum); skipping the all-reduce hands that V gradient to the
# layer norm, whose every other operand is I: the layer norm's backward
# rejects it.  The correct Function (control) passes.
# ---------------------------------------------------------------------------

class CustomF(Block):
    fn = CopyToTP

    def enter_tp(self, h):
        return self.fn.apply(h, self.tp)


class CustomFSkipsReduce(CustomF):
    fn = CopyToTPNoReduce


def test_custom_f_with_all_reduce_is_fine(checked, dp, tp):
    block = make(CustomF, dp, tp)
    loss_of(block, block(make_input(block))).backward()
    assert ltype(block.ln1_w.grad) == {"mesh_dp": "P", "mesh_tp": "I"}


def test_bug1_custom_backward_skips_all_reduce(checked, dp, tp):
    block = make(CustomFSkipsReduce, dp, tp)
    msg = forward_then_backward(block, make_input(block))
    assert msg.startswith("Invariant type on axis mesh_tp cannot mix with other types. "
                          "Found types: [V, I, I, I, I, I]")
    assert "In aten::native_layer_norm_backward(" in msg
    assert "grad_out: f32[2, 16, 32] {mesh_dp: V, mesh_tp: V}" in msg
    assert "during backward, in NativeLayerNormBackward0" in msg


def test_bug1_anomaly_mode_names_the_forward_line(checked, dp, tp):
    block = make(CustomFSkipsReduce, dp, tp)
    with torch.autograd.set_detect_anomaly(True, check_nan=False):
        loss = loss_of(block, block(make_input(block)))
        with pytest.raises(SpmdTypeError) as ei:
            loss.backward()
    msg = str(ei.value)
    assert "during backward, in NativeLayerNormBackward0" in msg
    assert "forward op at " in msg and "megatron_block.py:" in msg


class AnnotatedEntry(CustomFSkipsReduce):
    keep_alive = False

    def enter_tp(self, h):
        spmd.assert_type(h, {self.dp: V, self.tp: I})    # boundary annotation
        if self.keep_alive:
            self.kept = getattr(self, "kept", []) + [h]
        return super().enter_tp(h)


BOUNDARY_MSG = ("Gradient type mismatch for tensor float32[2, 16, 32] on axis mesh_tp: the tensor "
                "is I, so its gradient must be I, but the gradient is V.")


def test_bug1_with_boundary_annotation_caught_by_duality(checked, dp, tp):
    """Annotating the activation that enters f (a common boundary assert)
    catches it one step earlier, at the tensor, by gradient duality.  (Here
    the tensor is kept alive; the next test frees it.)"""
    block = make(AnnotatedEntry, dp, tp)
    block.keep_alive = True
    msg = forward_then_backward(block, make_input(block))
    assert msg.startswith(BOUNDARY_MSG)


def test_bug1_boundary_annotation_on_freed_activation(checked, dp, tp):
    block = make(AnnotatedEntry, dp, tp)
    msg = forward_then_backward(block, make_input(block))
    assert msg.startswith(BOUNDARY_MSG)


# ---------------------------------------------------------------------------
# (2) A custom autograd.Function that all-reduces twice.
#
# (2a) Megatron's "g" (reduce from the tensor-parallel region) written with an
# all-reduce in both directions: the output is I, so its gradient is I, and
# the backward all_reduce rejects an I input.
# (2b) A hand-rolled data-parallel gradient sync (a Function that all-reduces
# a parameter's gradient over dp in backward) on top of the pending-sum
# semantics: the parameter is R on dp, so its gradient must stay a pending
# sum (P) for the reducer; arriving R means it is reduced twice.
# ---------------------------------------------------------------------------

class ReduceFromTPTwice(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, tp):
        ctx.tp = tp
        return spmd.all_reduce(x, tp, src=P, dst=I)

    @staticmethod
    def backward(ctx, g):
        return spmd.all_reduce(g, ctx.tp, src=P, dst=I), None   # BUG: g is I


class CustomGTwice(Block):
    def exit_tp(self, o):
        return ReduceFromTPTwice.apply(o, self.tp)


def test_bug2a_custom_backward_all_reduces_again(checked, dp, tp):
    block = make(CustomGTwice, dp, tp)
    msg = forward_then_backward(block, make_input(block))
    assert msg.startswith("all_reduce: expected input type P on axis "
                          "mesh_tp, got I")


def test_bug2a_message_names_the_custom_node(checked, dp, tp):
    block = make(CustomGTwice, dp, tp)
    msg = forward_then_backward(block, make_input(block))
    assert "during backward, in ReduceFromTPTwiceBackward" in msg


class SyncGradOverDP(torch.autograd.Function):
    """Identity forward; all-reduce of the gradient over dp in backward."""

    @staticmethod
    def forward(ctx, w, dp):
        ctx.dp = dp
        return w.view_as(w)

    @staticmethod
    def backward(ctx, g):
        return spmd.all_reduce(g, ctx.dp, src=P, dst=R), None   # BUG: reduces the pending sum


class SyncsW1(Block):
    def mlp(self, x):
        h = self.enter_tp(F.layer_norm(x, (self.hidden,), self.ln2_w, self.ln2_b))
        m = F.gelu(F.linear(h, SyncGradOverDP.apply(self.w1, self.dp), self.b1))
        return self.exit_tp(F.linear(m, self.w2)) + self.b2


@pytest.mark.parametrize("sp", [False, True], ids=["tp", "tp+sp"])
def test_bug2b_gradient_reduced_twice(checked, dp, tp, sp):
    block = make(SyncsW1, dp, tp, sp=sp)
    msg = forward_then_backward(block, make_input(block))
    assert msg.startswith("Gradient type mismatch for parameter float32[16, 32] on axis "
                          "mesh_dp: the tensor is R, so its gradient must be P (or V), but the "
                          "gradient is R.")
    assert "Hint: the gradient is already reduced (R/I)" in msg


# ---------------------------------------------------------------------------
# (3) A reinterpret where a convert was needed.
#
# NOT CATCHABLE BY DESIGN.  reinterpret(src, dst) and convert(src, dst) have
# the same type signature forward *and* backward for every (src, dst) pair:
# they differ in the data only (reinterpret keeps the local data,
# convert keeps the meaning).  Here the output of a non-sequence-
# parallel stage (I on tp) enters a sequence-parallel block: convert(I, S(1))
# keeps this rank's sequence chunk; reinterpret(I, V) keeps the whole
# sequence, which the SP block happily processes as a 4x longer "shard".
# Both check clean forward and backward with identical gradient types; the
# only symptom is the shape (and wrong numbers).
#
# The caught relative: a type-only change with *no* autograd node at all --
# mutate_type where convert(I, R) was needed -- leaves the backward
# without the all-reduce; the layer norm's backward rejects the V gradient.
# ---------------------------------------------------------------------------

def _sp_entry(dp, tp, how):
    upstream = spmd.assert_type(torch.randn(2, 16, 32, requires_grad=True), {dp: V, tp: I})
    block = build_block(dp, tp, sp=True)
    if how == "convert":
        x = spmd.convert(upstream, tp, src=I, dst=S(1))
    else:
        x = spmd.reinterpret(upstream, tp, src=I, dst=V)      # the bug
    loss_of(block, block(x)).backward()
    return x, upstream, block


def test_bug3_reinterpret_instead_of_convert_is_not_caught(checked, dp, tp):
    x_ok, up_ok, b_ok = _sp_entry(dp, tp, "convert")
    x_bad, up_bad, b_bad = _sp_entry(dp, tp, "reinterpret")   # no SpmdTypeError
    assert ltype(x_ok) == ltype(x_bad) == {"mesh_dp": "V", "mesh_tp": "V"}
    assert ltype(up_ok.grad) == ltype(up_bad.grad) == {"mesh_dp": "V", "mesh_tp": "I"}
    for (n, p_ok), p_bad in zip(b_ok.named_parameters(), b_bad.parameters()):
        assert ltype(p_ok.grad) == ltype(p_bad.grad), n
    assert x_ok.shape[1] == 4 and x_bad.shape[1] == 16       # the only symptom


class MutateInsteadOfConvert(Block):
    def enter_tp(self, h):
        return spmd.mutate_type(h, self.tp, src=I, dst=R)     # BUG: convert(h, I, R) needed


def test_bug3_type_only_change_instead_of_convert(checked, dp, tp):
    block = make(MutateInsteadOfConvert, dp, tp)
    msg = forward_then_backward(block, make_input(block))
    assert msg.startswith("Invariant type on axis mesh_tp cannot mix with other types.")
    assert "during backward, in NativeLayerNormBackward0" in msg


# ---------------------------------------------------------------------------
# (4) A gradient hook that turns a partial gradient into a replicate one.
#
# (4a) A module registers a gradient hook in __init__ (here: a dp all-reduce,
# "DDP in a hook"); the SPMD annotation pass runs afterwards.  The hook runs
# before the duality check and hands it an R gradient where P is due.
# (4b) A hook on the activation entering the tensor-parallel region that
# "finishes the reduction" itself: the backward of all_gather (SP) /
# convert(I, R) then meets an R gradient where it reduces a P one.
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("sp", [False, True], ids=["tp", "tp+sp"])
def test_bug4a_parameter_hook_reduces_gradient(checked, dp, tp, sp):
    block = make(Block, dp, tp, sp=sp, annotate=False)
    block.w2.register_hook(lambda g: spmd.all_reduce(g, dp, src=P, dst=R))   # BUG
    block.annotate()
    msg = forward_then_backward(block, make_input(block))
    assert msg.startswith("Gradient type mismatch for parameter float32[32, 16] on axis "
                          "mesh_dp: the tensor is R, so its gradient must be P (or V), but the "
                          "gradient is R.")
    assert "gradient type: {mesh_dp: R, mesh_tp: V}" in msg


class HookOnTPInput(Block):
    def enter_tp(self, h):
        h = super().enter_tp(h)
        h.register_hook(lambda g: spmd.all_reduce(g, self.tp, src=P, dst=R))   # BUG
        return h


@pytest.mark.parametrize("sp,coll", [(False, "all_reduce"), (True, "reduce_scatter")],
                         ids=["tp", "tp+sp"])
def test_bug4b_activation_hook_reduces_gradient(checked, dp, tp, sp, coll):
    block = make(HookOnTPInput, dp, tp, sp=sp)
    msg = forward_then_backward(block, make_input(block))
    assert msg.startswith(f"{coll}: expected input type P on axis "
                          "mesh_tp, got R")


def test_bug4_hook_registered_after_annotation(checked, dp, tp):
    block = build_block(dp, tp)
    block.w2.register_hook(lambda g: spmd.all_reduce(g, dp, src=P, dst=R))
    loss = loss_of(block, block(make_input(block)))
    with pytest.raises(SpmdTypeError):
        loss.backward()


# ---------------------------------------------------------------------------
# (5) A wrong backward_options dtype path.
#
# Dtypes are not part of an SPMD type, so no dtype choice can make a backward
# op's *type* wrong.  cspmd's design checks the dtype path of a collective
# whose backward reduces when the collective is called: a reduced
# precision forward without backward_options={"op_dtype": ...} is a
# ValueError at the forward call, and -- for double backward -- at the
# backward collective's own call during backward.  Both are ValueError, not
# SpmdTypeError, by design.  Both currently do not fire: cspmd
# bug, the rule reads GradMode inside the autograd Function's forward, where
# grad mode is always off (csrc/torch/collective_autograd.cpp resolve_dtypes).
# ---------------------------------------------------------------------------

REDUCED = "When using reduced precision with an operation whose backward involves a reduction"


class Bf16Gather(Block):
    def __init__(self, *a, backward_options=None, **k):
        super().__init__(*a, **k)
        self.backward_options = backward_options

    def enter_tp(self, h):
        opts = {} if self.backward_options is None else {"backward_options": self.backward_options}
        return spmd.all_gather(h, self.tp, src=S(1), dst=R, op_dtype=torch.bfloat16,
                               out_dtype=torch.float32, **opts)


def test_bug5_correct_dtype_path(checked, dp, tp):
    block = Bf16Gather(dp, tp, sp=True, backward_options={"op_dtype": torch.float32}).annotate()
    loss_of(block, block(make_input(block))).backward()
    assert block.ln1_w.grad.dtype == torch.float32
    assert ltype(block.ln1_w.grad) == {"mesh_dp": "P", "mesh_tp": "P"}


def test_bug5_bf16_gather_without_backward_op_dtype(checked, dp, tp):
    block = Bf16Gather(dp, tp, sp=True).annotate()
    x = make_input(block)
    with pytest.raises(ValueError, match=REDUCED):
        block(x)


def test_bug5_double_backward_path_missing(checked, dp, tp):
    x = spmd.assert_type(torch.randn(4, 8, requires_grad=True), {dp: V, tp: P})
    w = spmd.assert_type(torch.randn(8, 8, requires_grad=True), {dp: R, tp: R})
    # forward in bf16, backward all-reduce in f32 -- but no dtype for the
    # double backward, whose all_reduce again reduces (in bf16).
    y = spmd.all_reduce(x, tp, src=P, dst=R, op_dtype=torch.bfloat16,
                        backward_options={"op_dtype": torch.float32, "out_dtype": torch.bfloat16})
    loss = spmd.convert(spmd.reinterpret((y.float() @ w).sin().sum(), dp, src=V, dst=P),
                        tp, src=R, dst=P)
    with pytest.raises(ValueError, match=REDUCED):
        torch.autograd.grad(loss, x, create_graph=True)


# ---------------------------------------------------------------------------
# (6) A parameter used on two paths with different types.
#
# A tensor has one type, so "two types" can only come from re-annotating it:
# assert_type(V tensor, P) silently refines V to P *in place*, so
# a second path that annotates the shared column-parallel weight as a partial
# term retypes it for the first path as well.  Forward is clean (the MLP used
# it as V before the re-annotation); in backward the gradient (V from the
# MLP + R from the second path = V) is not the dual (R) of its new type P.
# (reinterpret(w, tp, src=V, dst=P) would have been correct: a new tensor.)
# ---------------------------------------------------------------------------

class SharedW1(Block):
    def forward(self, x):
        y = super().forward(x)
        # a second path reusing the MLP weight as a partial term of a sum
        w1 = spmd.assert_type(self.w1, {self.tp: P})                  # BUG: retypes self.w1
        h = self.enter_tp(F.layer_norm(y, (self.hidden,), self.ln2_w, self.ln2_b))
        aux = spmd.all_reduce(F.linear(h, w1), self.tp, src=P, dst=I)
        return y + aux.mean(-1, keepdim=True)


def test_bug6_parameter_retyped_by_second_path(checked, dp, tp):
    block = make(SharedW1, dp, tp)
    msg = forward_then_backward(block, make_input(block))
    assert msg.startswith("Gradient type mismatch for parameter float32[16, 32] on axis "
                          "mesh_tp: the tensor is P, so its gradient must be R, but the "
                          "gradient is V.")


class TiedLN(Block):
    """Not a bug: an R (sp) layer-norm weight used on the sequence shard (its
    gradient contribution is V) and on the gathered sequence (P).  Both are
    pieces of the pending sum; the engine's accumulation adds V + P."""

    def forward(self, x):
        y = super().forward(x)
        full = spmd.all_gather(y, self.tp, src=S(1), dst=R)
        z = F.layer_norm(full, (self.hidden,), self.ln1_w)         # R, gradient P for ln1_w
        z = spmd.convert(z, self.tp, src=R, dst=S(1))
        return y + z


def test_tied_replicate_parameter_two_paths_is_accepted(checked, dp, tp):
    block = make(TiedLN, dp, tp, sp=True)
    loss_of(block, block(make_input(block))).backward()
    assert ltype(block.ln1_w.grad) == {"mesh_dp": "P", "mesh_tp": "P"}


# ---------------------------------------------------------------------------
# Forward-only checking (the reference's coverage) misses all of them.
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("cls,sp", [
    (CustomFSkipsReduce, False), (CustomGTwice, False), (SyncsW1, True),
    (MutateInsteadOfConvert, False), (HookOnTPInput, True), (SharedW1, False),
], ids=["1-skip", "2a-twice", "2b-dp-twice", "3-mutate", "4b-hook", "6-retype"])
def test_forward_only_checking_misses_every_bug(mesh, dp, tp, cls, sp):
    block = make(cls, dp, tp, sp=sp)
    x = make_input(block)
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck(backward=False):
        loss_of(block, block(x)).backward()
    assert block.w1.grad is not None
