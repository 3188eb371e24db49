"""What a registered autograd Function's typecheck_forward declares of its
own outputs (spmd_types 0.2.x's register_autograd_function, as torchtitan's
vocabulary-parallel cross-entropy uses it).

The body of forward is checked op by op.  Where the body computes R and the
Function declares I (or the reverse), the declaration is taken: the two
differ only in the gradient the output receives, and that gradient goes to
the Function's own backward.  Every other difference is still refused.
"""

import pytest
import torch
import torch.distributed._functional_collectives as funcol

import cspmd as spmd
from cspmd import I, P, R, S, V, SpmdTypeError
from cspmd.checker import typecheck
from conftest import ltype


def row_max_function(declared, body=None):
    """A Function whose forward all-reduces each row's local maximum (V -> R
    by the raw max rule) and whose typecheck_forward declares `declared`."""

    @spmd.register_autograd_function
    class RowMax(torch.autograd.Function):
        @staticmethod
        def typecheck_forward(logits, group):
            spmd.assert_type(logits, {group: S(logits.dim() - 1)})
            out = RowMax.apply(logits, group)
            spmd.assert_type(out, {group: declared})
            return out

        @staticmethod
        def forward(ctx, logits, group):
            ctx.save_for_backward(logits)
            if body is not None:
                return body(logits, group)
            m = logits.amax(-1)
            return funcol.all_reduce(m, "max", group) + 0  # ops on the result: plain tensor

        @staticmethod
        def backward(ctx, grad):
            (logits,) = ctx.saved_tensors
            # a stand-in for the softmax gradient: V logits times the I grad
            return logits * grad.unsqueeze(-1), None

    return RowMax


def test_checked_body_r_declared_i_takes_the_declaration(tp):
    fn = row_max_function(I)
    logits = torch.randn(3, 5, requires_grad=True)
    with typecheck():
        out = fn.apply(logits, tp)
        assert list(spmd.get_local_type(out).values()) == [I]
        out.sum().backward()  # an I loss: its implicit gradient is I
    assert logits.grad is not None


def test_checked_body_r_declared_r(tp):
    fn = row_max_function(R)
    with typecheck():
        out = fn.apply(torch.randn(3, 5), tp)
    assert list(spmd.get_local_type(out).values()) == [R]


def test_checked_body_i_declared_r_takes_the_declaration(tp):
    def body(logits, group):
        local = spmd.reinterpret(logits.amax(-1), group, src=V, dst=P)
        return spmd.all_reduce(local, group, src=P, dst=I)

    fn = row_max_function(R, body)
    with typecheck():
        out = fn.apply(torch.randn(3, 5), tp)
    assert list(spmd.get_local_type(out).values()) == [R]


@pytest.mark.parametrize("declared", [I, R])
def test_a_varying_body_is_refused_as_r_or_i(tp, declared):
    # Forgot the all-reduce: each rank's local max is V, which no declaration
    # of R or I can fix.  (Declaring P is assert_type's usual V -> P.)
    fn = row_max_function(declared, lambda logits, group: logits.amax(-1))
    with typecheck():
        with pytest.raises(SpmdTypeError, match=r"SPMD type mismatch on axis mesh_tp: tensor "
                           r"has V, expected " + declared.name):
            fn.apply(torch.randn(3, 5), tp)


def test_a_partial_body_declared_i_is_refused(tp):
    fn = row_max_function(I, lambda logits, group: spmd.reinterpret(logits.amax(-1), group,
                                                                   src=V, dst=P))
    with typecheck():
        with pytest.raises(SpmdTypeError, match="tensor has P, expected I"):
            fn.apply(torch.randn(3, 5), tp)


def test_only_the_functions_outputs_are_declarations(tp):
    # Inside typecheck_forward, a tensor that is not an output of the
    # Function's apply follows the usual assert_type rule.
    @spmd.register_autograd_function
    class Other(torch.autograd.Function):
        @staticmethod
        def typecheck_forward(x, group):
            r = spmd.assert_type(torch.randn(2), {group: R})
            spmd.assert_type(r, {group: I})
            return Other.apply(x, group)

        @staticmethod
        def forward(ctx, x, group):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2, None

    x = spmd.assert_type(torch.randn(2), {tp: V})
    with typecheck():
        with pytest.raises(SpmdTypeError, match="tensor has R, expected I"):
            Other.apply(x, tp)


def test_plain_assert_type_still_refuses_r_as_i(tp):
    r = spmd.assert_type(torch.randn(2), {tp: R})
    with pytest.raises(SpmdTypeError, match="tensor has R, expected I"):
        spmd.assert_type(r, {tp: I})
    assert list(spmd.get_local_type(r).values()) == [R]


def test_after_typecheck_forward_the_output_is_an_ordinary_tensor(tp):
    fn = row_max_function(I)
    with typecheck():
        out = fn.apply(torch.randn(3, 5), tp)
        with pytest.raises(SpmdTypeError, match="tensor has I, expected R"):
            spmd.assert_type(out, {tp: R})


def test_a_dict_naming_an_axis_twice_takes_the_later_entry(tp):
    # torchtitan: t = dict(get_local_type(x)); t[group] = I -- the MeshAxis
    # key from get_local_type and the group name the same axis.
    x = spmd.assert_type(torch.randn(2), {tp: V})
    t = dict(spmd.get_local_type(x))
    t[tp] = I
    y = spmd.assert_type(torch.randn(2), t)
    assert ltype(y) == {"mesh_tp": "I"}


def test_a_functional_collectives_result_declared_i(tp):
    # forward returns funcol's AsyncCollectiveTensor itself; the declared I
    # reaches the tensor it wraps, which the ops after the wait read.
    fn = row_max_function(I, lambda logits, group: funcol.all_reduce(logits.amax(-1), "max",
                                                                     group))
    with typecheck():
        out = fn.apply(torch.randn(3, 5), tp)
        assert list(spmd.get_local_type(out).values()) == [I]
        assert list(spmd.get_local_type(out * 2).values()) == [I]


def test_assert_type_on_a_functional_collectives_result(tp):
    x = spmd.assert_type(torch.randn(4), {tp: V})
    with typecheck():
        y = funcol.all_reduce(x, "max", tp)
        spmd.assert_type(y, {tp: R})
        with pytest.raises(SpmdTypeError, match="tensor has R, expected V"):
            spmd.assert_type(y, {tp: V})
        assert list(spmd.get_local_type(y + 1).values()) == [R]
