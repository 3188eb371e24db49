"""spmd_types 0.3.1's type rules, each case run under cspmd and under the
installed reference: the R/I coercion of operands that take no gradient
(in ops and in collective inputs) and the typed-Scalar rules that follow
from it.  Outcome compared: the error class, or the output type per axis.
The backward of a coerced op is checked too (the reference runs it
unchecked): the gradients come out the dual of their tensors' types."""

import pytest
import torch
import torch.nn.functional as F

import cspmd as spmd
import reference


def _typed(lib, letter, grad=False, shape=(4, 4), dp="R"):
    x = torch.randn(*shape, requires_grad=grad)
    return lib.assert_type(x, {"tp": getattr(lib, letter), "dp": getattr(lib, dp)})


def _scalar(lib, letter):
    return lib.Scalar(2.0, {"tp": getattr(lib, letter), "dp": lib.R})


def _labels(lib, letter):
    return lib.assert_type(torch.randint(0, 4, (4,)), {"tp": getattr(lib, letter), "dp": lib.R})


CASES = {
    # ops: an operand that takes no gradient takes the others' flavour
    "I + V, no grad": lambda l: _typed(l, "I") + _typed(l, "V"),
    "I + R, no grad": lambda l: _typed(l, "I") + _typed(l, "R"),
    "I + R(grad)": lambda l: _typed(l, "I") + _typed(l, "R", True),
    "I(grad) + R": lambda l: _typed(l, "I", True) + _typed(l, "R"),
    "I(grad) + V": lambda l: _typed(l, "I", True) + _typed(l, "V"),
    "R(grad) + I(grad)": lambda l: _typed(l, "R", True) + _typed(l, "I", True),
    "I * P, no grad": lambda l: _typed(l, "I") * _typed(l, "P"),
    "I + P, no grad": lambda l: _typed(l, "I") + _typed(l, "P"),
    "I(grad) * P": lambda l: _typed(l, "I", True) * _typed(l, "P"),
    "I(grad) @ R": lambda l: _typed(l, "I", True) @ _typed(l, "R"),
    "where(R cond, I(grad), R)": lambda l: torch.where(
        _typed(l, "R") > 0, _typed(l, "I", True), _typed(l, "R")),
    "cross_entropy(R logits(grad), I labels)": lambda l: F.cross_entropy(
        _typed(l, "R", True), _labels(l, "I")),
    "cross_entropy(I logits(grad), R labels)": lambda l: F.cross_entropy(
        _typed(l, "I", True), _labels(l, "R")),
    # typed Scalars never take a gradient
    "P * Scalar(I)": lambda l: _typed(l, "P") * _scalar(l, "I"),
    "P + Scalar(I)": lambda l: _typed(l, "P") + _scalar(l, "I"),
    "I + Scalar(V)": lambda l: _typed(l, "I") + _scalar(l, "V"),
    "I(grad) + Scalar(V)": lambda l: _typed(l, "I", True) + _scalar(l, "V"),
    "R + Scalar(I)": lambda l: _typed(l, "R") + _scalar(l, "I"),
    "R(grad) + Scalar(I)": lambda l: _typed(l, "R", True) + _scalar(l, "I"),
    "V * Scalar(I)": lambda l: _typed(l, "V") * _scalar(l, "I"),
    "P * Scalar(P)": lambda l: _typed(l, "P") * _scalar(l, "P"),
    # collective inputs: R where I is declared (and I where R is)
    "convert(R, src=I, dst=V)": lambda l: l.convert(_typed(l, "R"), "tp", src=l.I, dst=l.V),
    "convert(I, src=R, dst=V)": lambda l: l.convert(_typed(l, "I"), "tp", src=l.R, dst=l.V),
    "convert(I(grad), src=R, dst=V)": lambda l: l.convert(
        _typed(l, "I", True), "tp", src=l.R, dst=l.V),
    "convert(R, src=I, dst=R)": lambda l: l.convert(_typed(l, "R"), "tp", src=l.I, dst=l.R),
    "all_gather(I, src=V)": lambda l: l.all_gather(_typed(l, "I"), "tp", src=l.V, dst=l.R),
    "all_reduce(I, src=P)": lambda l: l.all_reduce(_typed(l, "I"), "tp", src=l.P, dst=l.R),
}


def _outcome(lib, mesh, fn, grad_mode=True):
    with lib.set_current_mesh(mesh), lib.checker.typecheck(), torch.set_grad_enabled(grad_mode):
        try:
            out = fn(lib)
        except (lib.SpmdTypeError, ValueError) as e:
            return type(e).__name__
        return {str(a): repr(t).split(".")[-1] for a, t in lib.get_local_type(out).items()}


@pytest.mark.parametrize("name", list(CASES))
def test_same_outcome_as_reference(name, mesh):
    ref = reference.load()
    reference.load("spmd_types.checker")
    assert _outcome(spmd, mesh, CASES[name]) == _outcome(ref, mesh, CASES[name])


@pytest.mark.parametrize("name", ["I(grad) + V", "R(grad) + I(grad)", "I(grad) * P"])
def test_grad_mode_off_coerces_as_reference(name, mesh):
    """Under no_grad no operand can take a gradient: the mixes that need
    one to be I pass, in both."""
    ref = reference.load()
    reference.load("spmd_types.checker")
    mine = _outcome(spmd, mesh, CASES[name], grad_mode=False)
    assert mine == _outcome(ref, mesh, CASES[name], grad_mode=False)
    assert mine != "SpmdTypeError"


def test_messages_keep_the_operands_own_types(checked):
    x = _typed(spmd, "I", True)
    with pytest.raises(spmd.SpmdTypeError) as ei:
        x + _typed(spmd, "V")
    assert "Found types: [I, V]" in str(ei.value)
    # the fix suggestions are judged on the own types, as the reference does
    assert "convert(tensor, mesh_tp, src=I, dst=R)" in str(ei.value)


def _grad_types(checked_fn):
    return {repr(a): t.name for a, t in spmd.get_local_type(checked_fn()).items()}


def test_backward_of_coerced_ops_gives_dual_gradients(checked):
    """The backward ops mix the gradient with the saved no-grad operand; the
    gradient reaching each leaf is still the dual of the leaf's type."""
    x = spmd.assert_type(torch.randn(4, requires_grad=True), {"tp": spmd.I, "dp": spmd.I})
    w = spmd.assert_type(torch.randn(4), {"tp": spmd.R, "dp": spmd.I})
    (x * w).sum().backward()
    assert _grad_types(lambda: x.grad) == {"mesh_dp": "I", "mesh_tp": "I"}

    p = spmd.assert_type(torch.randn(4, requires_grad=True), {"tp": spmd.P, "dp": spmd.I})
    c = spmd.assert_type(torch.randn(4), {"tp": spmd.I, "dp": spmd.I})
    (p * c).sum().backward()
    assert _grad_types(lambda: p.grad) == {"mesh_dp": "I", "mesh_tp": "R"}

    logits = spmd.assert_type(torch.randn(8, 10, requires_grad=True), {"tp": spmd.I, "dp": spmd.V})
    labels = spmd.assert_type(torch.randint(0, 10, (8,)), {"tp": spmd.R, "dp": spmd.V})
    loss = spmd.reinterpret(F.cross_entropy(logits, labels), "dp", src=spmd.V, dst=spmd.P)
    loss.backward()
    assert _grad_types(lambda: logits.grad) == {"mesh_dp": "V", "mesh_tp": "I"}


def test_backward_still_catches_a_pending_gradient(checked):
    """The R/I leniency of gradients does not reach P: a replicated weight
    used with an I input still needs its pending gradient reduced."""
    w = spmd.assert_type(torch.randn(4, requires_grad=True), {"tp": spmd.R, "dp": spmd.I})
    x = spmd.assert_type(torch.randn(4), {"tp": spmd.I, "dp": spmd.I})
    y = (x * w).sum()  # x takes w's flavour: R, so y is R
    assert _grad_types(lambda: y) == {"mesh_dp": "I", "mesh_tp": "R"}
    with pytest.raises(spmd.SpmdTypeError, match="on a Replicate loss"):
        y.backward()
    loss = spmd.convert(y, "tp", src=spmd.R, dst=spmd.P)
    loss.backward()
    assert _grad_types(lambda: w.grad) == {"mesh_dp": "I", "mesh_tp": "P"}


@pytest.mark.parametrize("dst", ["V", "P"])
def test_reinterpret_invariant_bf16_needs_no_backward_options(dst, mesh):
    """reinterpret(I -> V|P) of a bf16 tensor that requires grad passes
    without backward_options, as in the reference (which runs no reduction
    of its own there); the gradient is reduced in bf16 and is I."""
    ref = reference.load()
    reference.load("spmd_types.checker")

    def forward(lib):
        x = lib.assert_type(torch.randn(4, dtype=torch.bfloat16, requires_grad=True),
                            {"tp": lib.I, "dp": lib.I})
        return x, lib.reinterpret(x, "tp", src=lib.I, dst=getattr(lib, dst))

    with ref.set_current_mesh(mesh), ref.checker.typecheck():
        want = {str(a): repr(t).split(".")[-1] for a, t in ref.get_local_type(forward(ref)[1]).items()}
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck():
        x, y = forward(spmd)
        assert {str(a): repr(t) for a, t in spmd.get_local_type(y).items()} == want
        if dst == "V":
            y = spmd.reinterpret(y, "tp", src=spmd.V, dst=spmd.P)
        y.sum().backward()
        assert x.grad.dtype == torch.bfloat16
        assert _grad_types(lambda: x.grad) == {"mesh_dp": "I", "mesh_tp": "I"}


FUSED = {  # (fused op, the same program as mm/bmm then add)
    "addmm(R bias, I(grad), I(grad))": (
        lambda l: torch.addmm(_typed(l, "R"), _typed(l, "I", True), _typed(l, "I", True)),
        lambda l: _typed(l, "R") + _typed(l, "I", True) @ _typed(l, "I", True)),
    "addmm(I bias, V(grad), V(grad))": (
        lambda l: torch.addmm(_typed(l, "I"), _typed(l, "V", True), _typed(l, "V", True)),
        lambda l: _typed(l, "I") + _typed(l, "V", True) @ _typed(l, "V", True)),
    "baddbmm(I bias, R(grad), R(grad))": (
        lambda l: torch.baddbmm(_typed(l, "I", shape=(2, 4, 4)),
                                _typed(l, "R", True, shape=(2, 4, 4)),
                                _typed(l, "R", True, shape=(2, 4, 4))),
        lambda l: _typed(l, "I", shape=(2, 4, 4)) + torch.bmm(
            _typed(l, "R", True, shape=(2, 4, 4)), _typed(l, "R", True, shape=(2, 4, 4)))),
}


@pytest.mark.parametrize("name", list(FUSED))
def test_fused_matmuls_coerce_like_mm_then_add(name, mesh):
    """A deliberate difference (docs/differences.md): cspmd types a fused
    matmul as the reference types the same program unfused; the reference's
    fused rule rejects it."""
    ref = reference.load()
    reference.load("spmd_types.checker")
    fused, unfused = FUSED[name]
    mine = _outcome(spmd, mesh, fused)
    assert mine == _outcome(spmd, mesh, unfused) == _outcome(ref, mesh, unfused)
    assert mine != "SpmdTypeError"
    assert _outcome(ref, mesh, fused) == "SpmdTypeError"


def test_two_axes_sharding_one_dim_same_message_as_reference(mesh):
    """S(0) on two axes without a PartitionSpec: the reference's error text."""
    ref = reference.load()
    reference.load("spmd_types.checker")

    def message(lib):
        with lib.set_current_mesh(mesh), lib.checker.typecheck():
            with pytest.raises(lib.SpmdTypeError) as ei:
                lib.assert_type(torch.randn(4, 4), {"dp": lib.S(0), "tp": lib.S(0)})
        return str(ei.value).splitlines()[0]

    assert message(spmd) == message(ref)
    assert message(spmd).startswith("Tensor dim 0 is sharded on multiple axes (")
