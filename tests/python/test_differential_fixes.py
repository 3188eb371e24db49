"""What the differential test against spmd_types 0.3.1 found, fixed in
cspmd, one test each (compared with the reference where it has an answer):
conversions that change nothing over a coerced input, a reduction's src=V
argument order, the gradient of a V input read as P, zero fills in
backward; and the limit it found (a typed Scalar in backward)."""

import pytest
import torch

import cspmd as spmd
import reference
from conftest import ltype
from cspmd import I, P, R, V


def _ref():
    ref = reference.load()
    reference.load("spmd_types.checker")
    return ref


def _letters(lib, x):
    return {str(a): repr(t).split(".")[-1] for a, t in lib.get_local_type(x).items()}


@pytest.mark.parametrize("case", ["V as P", "I as R", "R as I"])
def test_unchanged_conversion_of_a_coerced_input(mesh, case):
    """The result is typed dst on the axis, as in the reference; x keeps its
    own type (the reference retypes x itself)."""
    have, call = {
        "V as P": ("V", lambda l, x: l.redistribute(x, "tp", src=l.P, dst=l.P)),
        "I as R": ("I", lambda l, x: l.convert(x, "tp", src=l.R, dst=l.R)),
        "R as I": ("R", lambda l, x: l.reinterpret(x, "tp", src=l.I, dst=l.I)),
    }[case]
    results = []
    for lib in (spmd, _ref()):
        with lib.set_current_mesh(mesh), lib.checker.typecheck():
            x = lib.assert_type(torch.randn(4, 4), {"dp": lib.R, "tp": getattr(lib, have)})
            y = call(lib, x)
            results.append(_letters(lib, y))
            if lib is spmd:
                assert _letters(lib, x)["mesh_tp"] == have
                assert y is not x
    assert results[0] == results[1]
    assert results[0]["mesh_tp"] == case[-1]


@pytest.mark.parametrize("fn", ["all_reduce", "reduce_scatter"])
def test_reduction_src_v_checks_arguments_first(mesh, fn):
    """A bad dst is the ValueError whatever x's type; a wrongly typed x is
    reported under the reduction's own name, as in the reference."""
    bad_dst = {"all_reduce": "S0", "reduce_scatter": "P"}[fn]
    good_dst = {"all_reduce": "R", "reduce_scatter": "V"}[fn]
    for lib in (spmd, _ref()):
        with lib.set_current_mesh(mesh), lib.checker.typecheck():
            x = lib.assert_type(torch.randn(4, 4), {"dp": lib.R, "tp": lib.R})
            dst = lib.S(0) if bad_dst == "S0" else getattr(lib, bad_dst)
            with pytest.raises(ValueError, match=f"{fn} dst must be"):
                getattr(lib, fn)(x, "tp", src=lib.V, dst=dst)
            with pytest.raises(lib.SpmdTypeError,
                               match=f"{fn}: expected input type .*V.* on axis mesh_tp"):
                getattr(lib, fn)(x, "tp", src=lib.V, dst=getattr(lib, good_dst))


@pytest.mark.parametrize("call", [
    lambda x: spmd.all_reduce(x, "tp", src=P, dst=R),
    lambda x: spmd.all_reduce(x, "tp", src=P, dst=I),
    lambda x: spmd.reduce_scatter(x, "tp", src=P, dst=V),
    lambda x: spmd.redistribute(x, "tp", src=P, dst=R),
    lambda x: spmd.all_reduce(spmd.redistribute(x, "tp", src=P, dst=P), "tp", src=P, dst=R),
], ids=["all_reduce R", "all_reduce I", "reduce_scatter", "redistribute", "unchanged"])
def test_v_input_read_as_p_gets_a_v_gradient(checked, call):
    """src=P takes a V input as its pending sum; the gradient coming back
    is V, the dual of the input's own type (it was R, a false backward
    error)."""
    x = spmd.assert_type(torch.randn(4, 4, requires_grad=True), {"dp": R, "tp": V})
    y = call(x)
    t = spmd.get_local_type(y)[spmd.MeshAxis.of(4, 1)]
    loss = y.sum()
    loss = (spmd.reinterpret(loss, "tp", src=V, dst=P) if t is V else
            spmd.reinterpret(loss, "tp", src=t, dst=P, expert_mode=True))
    spmd.convert(loss, "dp", src=R, dst=P).backward()
    assert ltype(x.grad) == {"mesh_dp": "P", "mesh_tp": "V"}


@pytest.mark.parametrize("op", [
    lambda t: torch.maximum(t, t.detach() * 2),   # masked_fill_(g, mask, 0)
    lambda t: t.clamp(min=0),                     # where(mask, g, zeros)
    lambda t: torch.where(t > 0, t, 0.0),
])
def test_backward_zero_fills_keep_a_pending_gradient(checked, op):
    """Backward formulas fill a P gradient with zeros; zero is every type
    (it was "Partial type ... in a linear op" in backward)."""
    x = spmd.assert_type(torch.randn(4, 4, requires_grad=True), {"dp": R, "tp": I})
    loss = spmd.reinterpret(op(x).sum(), "dp", src=R, dst=P, expert_mode=True)
    loss.backward()
    assert ltype(x.grad) == {"mesh_dp": "P", "mesh_tp": "I"}


def test_backward_nonzero_fill_of_a_pending_gradient_is_still_an_error(checked):
    """Only zero is every type: a P gradient filled with another number
    is rejected in backward."""
    class Fill(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x > 0)
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            (mask,) = ctx.saved_tensors
            return g.masked_fill(mask, 1.0)

    x = spmd.assert_type(torch.randn(4, 4, requires_grad=True), {"dp": R, "tp": I})
    loss = spmd.reinterpret(Fill.apply(x).sum(), "dp", src=R, dst=P, expert_mode=True)
    with pytest.raises(spmd.SpmdTypeError, match="Partial type on axis mesh_dp in a linear op"):
        loss.backward()


def test_typed_scalar_type_is_not_seen_in_backward(checked):
    """The limit (docs/limits.md): the gradient through x * Scalar(P) is
    typed as through a plain number; with a P tensor instead it passes."""
    x = spmd.assert_type(torch.randn(4, 4, requires_grad=True), {"dp": R, "tp": R})
    y = x * spmd.Scalar(2.0, {"dp": R, "tp": P})
    assert ltype(y) == {"mesh_dp": "R", "mesh_tp": "P"}
    with pytest.raises(spmd.SpmdTypeError, match="Gradient type mismatch"):
        spmd.convert(y.sum(), "dp", src=R, dst=P).backward()
    x.grad = None
    with spmd.no_typecheck():
        s = torch.tensor(2.0)
    spmd.assert_type(s, {"dp": R, "tp": P})
    spmd.convert((x * s).sum(), "dp", src=R, dst=P).backward()
    assert ltype(x.grad) == {"mesh_dp": "P", "mesh_tp": "P"}


@pytest.mark.parametrize("combine", [lambda a, b: a + b, lambda a, b: a.clone().add_(b)],
                         ids=["add", "clone add_"])
def test_one_gradient_tensor_relabelled_for_one_leaf_only(checked, combine):
    """add's backward hands the same gradient tensor to both operands; the
    R leaf's accumulation reads its V gradient as P, and the V leaf still
    gets V (it got the relabelled P, a false backward error)."""
    x = spmd.assert_type(torch.randn(4, 4, requires_grad=True), {"dp": V, "tp": R})
    w = spmd.assert_type(torch.randn(4, 4, requires_grad=True), {"dp": R, "tp": R})
    loss = spmd.reinterpret(combine(x, w).sum(), "dp", src=V, dst=P, expert_mode=True)
    spmd.convert(loss, "tp", src=R, dst=P).backward()
    assert ltype(x.grad) == {"mesh_dp": "V", "mesh_tp": "P"}
    assert ltype(w.grad) == {"mesh_dp": "P", "mesh_tp": "P"}
