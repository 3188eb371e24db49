"""SpmdTypeError carries the core's error fields as attributes (msg,
context, op, operands, hint, site, backward_node, forward_site): read
from the core one by one, never parsed back out of the text."""

import inspect
import os

import pytest
import torch

import cspmd as spmd
from cspmd import I, P, R, V, SpmdTypeError
from cspmd._errors import ErrorOperand


def _line_after():
    return inspect.currentframe().f_back.f_lineno + 2  # the line inside the next `with`


def test_op_error_fields(checked, typed, dp_axis, tp_axis):
    x, y = typed(P, 4, 3), typed(R, 4, 3)
    line = _line_after()
    with pytest.raises(SpmdTypeError) as ei:
        torch.add(x, y, alpha=2)
    e = ei.value
    assert e.op == "aten::add.Tensor"
    assert e.site == f"{os.path.abspath(__file__)}:{line}"
    assert e.backward_node is None and e.forward_site is None
    assert str(e) == f"{e.msg}\n\n{e.context}"
    assert e.context.startswith("  In aten::add.Tensor(\n    self: f32[4, 3] ")
    assert e.hint.startswith("Are you missing a collective or a reinterpret/convert call?")
    assert e.msg.endswith(e.hint) and e.hint not in e.context
    names = [o.name for o in e.operands]
    assert names == ["self", "other", "alpha"]
    self_, other, alpha = e.operands
    assert isinstance(self_, ErrorOperand)
    assert (self_.dtype, self_.shape, self_.index, self_.text) == ("f32", (4, 3), -1, None)
    assert self_.type == {dp_axis: P, tp_axis: P}
    assert other.type == {dp_axis: R, tp_axis: R}
    assert (alpha.dtype, alpha.shape, alpha.type, alpha.text) == (None, None, None, "2")


def test_list_operands_and_untyped(checked, typed, dp_axis, tp_axis):
    a, b = typed(P), typed(V)
    with spmd.no_typecheck():
        u = torch.ones(4, 4)
    with pytest.raises(SpmdTypeError) as ei:
        torch.cat([a, b, u])
    ops = ei.value.operands
    assert [o.index for o in ops if o.name == "tensors"] == [0, 1, 2]
    assert ops[1].type == {dp_axis: V, tp_axis: V}
    assert ops[2].type == {}  # an untyped tensor shows as {}


def test_collective_error_fields(checked, typed, tp_axis):
    x = typed(R)
    line = _line_after()
    with pytest.raises(SpmdTypeError) as ei:
        spmd.all_reduce(x, tp_axis, src=P, dst=R)
    e = ei.value
    assert e.op == "all_reduce"
    assert e.site.endswith(f":{line}")
    assert [(o.name, o.text) for o in e.operands] == [
        ("x", None), ("axis", repr(tp_axis)), ("src", "P"), ("dst", "R")]
    assert e.operands[0].shape == (4, 4)
    assert str(e) == f"{e.msg}\n\n{e.context}"


def test_backward_error_fields(typed, tp):
    class PartialGrad(torch.autograd.Function):
        """Hands mul's backward a P gradient where R is due: P * P there."""

        @staticmethod
        def forward(ctx, h):
            return h.view_as(h)

        @staticmethod
        def backward(ctx, g):
            return spmd.convert(g, tp, src=R, dst=P)

    axis = spmd.MeshAxis.of(tp)
    with spmd.set_current_mesh({"tp": tp}), spmd.checker.typecheck():
        w = typed({axis: R}, 4, requires_grad=True)
        z = typed({axis: P}, 4)
        with torch.autograd.set_detect_anomaly(True, check_nan=False):
            forward_line = _line_after() - 1
            h = torch.mul(w, z)
            loss = PartialGrad.apply(h).sum()
            line = _line_after()
            with pytest.raises(SpmdTypeError) as ei:
                loss.backward()
    e = ei.value
    assert e.backward_node == "MulBackward0"
    assert e.forward_site == f"{os.path.abspath(__file__)}:{forward_line}"
    assert e.site == f"{os.path.abspath(__file__)}:{line}"
    assert f"during backward, in MulBackward0" in e.context
    assert e.context.endswith(f"\n  backward() called at {e.site}")
    assert any(o.type == {axis: P} for o in e.operands)


def test_text_is_not_parsed():
    # a message that looks like a context stays the message
    e = SpmdTypeError("bad\n\n  In add(x)")
    assert e.msg == "bad\n\n  In add(x)" and e.context is None
    assert (e.op, e.hint, e.site, e.operands) == (None, None, None, ())
    # re-raised with another message, the fields stay (annotate_module does this)
    again = SpmdTypeError("prefix: " + e.msg, **SpmdTypeError("m", context="c", op="o").fields())
    assert (again.context, again.op) == ("c", "o")


@pytest.mark.parametrize("call,name,text", [
    (lambda p, r: torch.add(r, p, alpha=-0.1), "alpha", "-0.10000000000000001"),
    (lambda p, r: torch.add(r, p, alpha=2.0), "alpha", "2."),
    (lambda p, r: torch.add(r, p, alpha=-0.0), "alpha", "0."),
    (lambda p, r: torch.clamp(p, min=9.2e18), "min", "9200000000000000000."),
    (lambda p, r: torch.clamp(p, min=1e19), "min", "1e+19"),
    (lambda p, r: torch.clamp(p, min=0.1 + 0.2), "min", "0.30000000000000004"),
    (lambda p, r: torch.nan_to_num(p, nan=float("nan"), posinf=float("inf")), "posinf", "inf"),
    (lambda p, r: torch.add(r.to(torch.complex64), p.to(torch.complex64), alpha=1 - 2j),
     "alpha", "1.-2.j"),
    (lambda p, r: torch.div(p, r, rounding_mode="floor"), "rounding_mode", "'floor'"),
    (lambda p, r: torch.logsumexp(p, dim=[0, 1], keepdim=True), "dim", "[0, 1]"),
    (lambda p, r: torch.logsumexp(p, dim=[0, 1], keepdim=True), "keepdim", "True"),
    (lambda p, r: torch.std(p, dim=0, unbiased=False), "correction", "0"),
])
def test_scalar_arguments_print_as_torch_prints_them(checked, typed, call, name, text):
    """Non-tensor arguments are formatted in the shim without iostreams (a
    stream handed to libtorch crashed on a GPU image); the text is torch's:
    integral doubles as "2.", others with 17 significant digits."""
    with pytest.raises(SpmdTypeError) as ei:
        call(typed(P, 4, 4), typed(R, 4, 4))
    texts = {o.name: o.text for o in ei.value.operands}
    assert texts[name] == text, texts
    assert f"{name}: {text}" in ei.value.context


def test_a_long_argument_is_printed_whole(checked, typed):
    """The context holds an argument's whole text however long (the kernel
    takes a heap buffer past its 512-byte stack one): 100 scalars of 17
    digits each."""
    xs = [typed(P, 2) for _ in range(100)]
    scalars = [0.1 * (i + 1) for i in range(100)]
    with pytest.raises(SpmdTypeError) as ei:
        torch._foreach_add(xs, scalars)
    texts = {o.name: o.text for o in ei.value.operands}
    assert len(texts["scalars"]) > 1500, texts["scalars"]
    assert texts["scalars"].startswith("[0.10000000000000001, 0.20000000000000001, ")
    assert texts["scalars"].endswith(", 10.]")
