"""The per-axis inference rule through real torch ops under typecheck()."""

import inspect
import os

import pytest
import torch
import torch.nn.functional as F

import cspmd as spmd
from cspmd import I, P, R, V, SpmdTypeError
from conftest import ltype

ERR = None  # marker: the combination is a type error

MSG_I_MIX = "Invariant type on axis mesh_dp cannot mix with other types"
MSG_PV = "Partial type on axis mesh_dp cannot combine with Varying"
MSG_NONLIN = "Partial type on axis mesh_dp cannot propagate through non-linear ops"
MSG_LINEAR = "Partial type on axis mesh_dp in a linear op requires all operands to be Partial"
MSG_MULTI = "Partial in multiple factors of multilinear op on axis mesh_dp is forbidden"
HINT = "Are you missing a collective or a reinterpret/convert call? e.g.,"
FIX_I_R = ("  convert(tensor, mesh_dp, src=I, dst=R) on the Invariant operand "
           "(no-op forward, all-reduce in backward)")
FIX_I_P = ("  convert(tensor, mesh_dp, src=I, dst=P) on the Invariant operand "
           "(zeros non-rank-0 in forward, no-op backward)")
FIX_P_R = ("  all_reduce(tensor, mesh_dp, src=P, dst=R) on the Partial operand "
           "(all-reduce in forward, all-reduce in backward)")
FIX_P_I = ("  all_reduce(tensor, mesh_dp, src=P, dst=I) on the Partial operand "
           "(all-reduce in forward, no-op backward)")
FIX_R_P = ("  convert(tensor, mesh_dp, src=R, dst=P) on the Replicate operand "
           "(zeros non-rank-0 in forward, zeros non-rank-0 in backward)")

# (a, b) -> result, or (ERR, message)
LINEAR_TABLE = {
    (R, R): R, (I, I): I, (V, V): V, (P, P): P,
    (R, V): V, (V, R): V,
    (I, R): (ERR, MSG_I_MIX), (R, I): (ERR, MSG_I_MIX), (I, V): (ERR, MSG_I_MIX),
    (I, P): (ERR, MSG_I_MIX),
    (P, R): (ERR, MSG_LINEAR), (R, P): (ERR, MSG_LINEAR),
    (P, V): (ERR, MSG_PV), (V, P): (ERR, MSG_PV),
}
MULTILINEAR_TABLE = {
    (R, R): R, (I, I): I, (V, V): V, (R, V): V, (V, R): V,
    (P, R): P, (R, P): P,
    (P, P): (ERR, MSG_MULTI),
    (P, V): (ERR, MSG_PV), (V, P): (ERR, MSG_PV),
    (I, R): (ERR, MSG_I_MIX), (P, I): (ERR, MSG_I_MIX),
}
NONLINEAR_BINARY_TABLE = {
    (R, R): R, (I, I): I, (V, V): V, (R, V): V,
    (P, R): (ERR, MSG_NONLIN), (P, P): (ERR, MSG_NONLIN),
    (P, V): (ERR, MSG_PV), (I, V): (ERR, MSG_I_MIX),
}


def _check(op, a, b, expected, typed):
    # Operands that take a gradient: the tables are the strict rule (an
    # operand that takes none may have R and I coerced: test_rules_031.py).
    x, y = typed(a, requires_grad=True), typed(b, requires_grad=True)
    if isinstance(expected, tuple):
        with pytest.raises(SpmdTypeError) as ei:
            op(x, y)
        assert expected[1] in str(ei.value)
    else:
        out = op(x, y)
        assert ltype(out) == {"mesh_dp": expected.name, "mesh_tp": expected.name}


def _ids(table):
    return [f"{a.name}{b.name}" for a, b in table]


LINEAR_OPS = {
    "add": torch.add,
    "dunder_add": lambda x, y: x + y,
    "sub": torch.sub,
}
MULTI_OPS = {
    "mul": torch.mul,
    "dunder_mul": lambda x, y: x * y,
    "mm": torch.mm,
    "matmul": torch.matmul,
    "at": lambda x, y: x @ y,
}


@pytest.mark.parametrize("opname", list(LINEAR_OPS))
@pytest.mark.parametrize("a,b", list(LINEAR_TABLE), ids=_ids(LINEAR_TABLE))
def test_linear_rule(checked, typed, opname, a, b):
    _check(LINEAR_OPS[opname], a, b, LINEAR_TABLE[(a, b)], typed)


@pytest.mark.parametrize("opname", list(MULTI_OPS))
@pytest.mark.parametrize("a,b", list(MULTILINEAR_TABLE), ids=_ids(MULTILINEAR_TABLE))
def test_multilinear_rule(checked, typed, opname, a, b):
    _check(MULTI_OPS[opname], a, b, MULTILINEAR_TABLE[(a, b)], typed)


@pytest.mark.parametrize("a,b", list(NONLINEAR_BINARY_TABLE), ids=_ids(NONLINEAR_BINARY_TABLE))
def test_nonlinear_binary_rule(checked, typed, a, b):
    _check(torch.maximum, a, b, NONLINEAR_BINARY_TABLE[(a, b)], typed)


@pytest.mark.parametrize("op", [torch.relu, torch.exp, torch.tanh], ids=["relu", "exp", "tanh"])
@pytest.mark.parametrize("t", [R, I, V])
def test_nonlinear_unary_keeps_type(checked, typed, op, t):
    assert ltype(op(typed(t))) == {"mesh_dp": t.name, "mesh_tp": t.name}


@pytest.mark.parametrize("op", [torch.relu, torch.exp, F.gelu], ids=["relu", "exp", "gelu"])
def test_nonlinear_unary_rejects_partial(checked, typed, op):
    with pytest.raises(SpmdTypeError, match=MSG_NONLIN):
        op(typed(P))


def test_linear_unary_ops_keep_partial(checked, typed):
    p = typed(P)
    for out in (-p, p.sum(), p.mean(dim=0), p.clone(), torch.cat([p, p]), p.cumsum(0)):
        assert ltype(out) == {"mesh_dp": "P", "mesh_tp": "P"}


def test_per_axis_independent(checked, typed, dp_axis, tp_axis):
    # dp: R+V -> V, tp: P+P -> P
    out = typed({dp_axis: R, tp_axis: P}) + typed({dp_axis: V, tp_axis: P})
    assert ltype(out) == {"mesh_dp": "V", "mesh_tp": "P"}
    # the error names the failing axis
    with pytest.raises(SpmdTypeError, match="on axis mesh_tp in a linear op"):
        typed({dp_axis: R, tp_axis: P}) + typed({dp_axis: R, tp_axis: R})


def test_axes_checked_in_name_order(checked, typed, dp_axis, tp_axis):
    # both axes fail; mesh_dp sorts first
    with pytest.raises(SpmdTypeError) as ei:
        typed({dp_axis: I, tp_axis: P}, requires_grad=True) + typed({dp_axis: R, tp_axis: R},
                                                                    requires_grad=True)
    assert "on axis mesh_dp" in str(ei.value).splitlines()[0]


# ---- fix suggestions -------------------------------------------------------------------

def _suggestions(msg):
    lines = msg.splitlines()
    assert HINT in lines, msg
    out = []
    for line in lines[lines.index(HINT) + 1:]:
        if not line.strip():
            break
        out.append(line)
    return out


def test_suggestions_i_plus_r(checked, typed):
    with pytest.raises(SpmdTypeError) as ei:
        typed(I, requires_grad=True) + typed(R, requires_grad=True)
    msg = str(ei.value)
    assert "Found types: [I, R]" in msg
    assert _suggestions(msg) == [FIX_I_R]


def test_suggestions_p_plus_r_linear(checked, typed):
    with pytest.raises(SpmdTypeError) as ei:
        typed(P) + typed(R)
    msg = str(ei.value)
    assert "Found types: [P, R]" in msg
    assert _suggestions(msg) == [FIX_P_R, FIX_R_P]


def test_suggestions_p_r_nonlinear(checked, typed):
    with pytest.raises(SpmdTypeError) as ei:
        torch.maximum(typed(P), typed(R))
    assert _suggestions(str(ei.value)) == [FIX_P_R]


def test_suggestions_relu_p(checked, typed):
    with pytest.raises(SpmdTypeError) as ei:
        torch.relu(typed(P))
    msg = str(ei.value)
    assert "Found types: [P]" in msg
    assert _suggestions(msg) == [FIX_P_R, FIX_P_I]


def test_suggestions_p_i_multilinear(checked, typed):
    with pytest.raises(SpmdTypeError) as ei:
        torch.mul(typed(P), typed(I, requires_grad=True))
    assert _suggestions(str(ei.value)) == [FIX_I_R, FIX_P_I]


def test_suggestions_p_times_p(checked, typed):
    with pytest.raises(SpmdTypeError) as ei:
        typed(P) * typed(P)
    assert _suggestions(str(ei.value)) == [FIX_P_R]


def test_no_i_to_p_suggestion_for_p_plus_v(checked, typed):
    with pytest.raises(SpmdTypeError) as ei:
        typed(P) + typed(V)
    assert FIX_I_P not in str(ei.value)


# ---- division --------------------------------------------------------------------------

def test_div_partial_numerator_ok(checked, typed):
    assert ltype(typed(P) / typed(R)) == {"mesh_dp": "P", "mesh_tp": "P"}
    assert ltype(typed(P) / 2.0) == {"mesh_dp": "P", "mesh_tp": "P"}
    assert ltype(torch.div(typed(P), 2)) == {"mesh_dp": "P", "mesh_tp": "P"}
    assert ltype(typed(R) / typed(V)) == {"mesh_dp": "V", "mesh_tp": "V"}


@pytest.mark.parametrize("num", [R, P], ids=["R", "P"])
def test_div_partial_divisor_rejected(checked, typed, num):
    with pytest.raises(SpmdTypeError) as ei:
        typed(num) / typed(P)
    msg = str(ei.value)
    assert "Partial type in nonlinear argument on axis mesh_dp is not allowed" in msg


def test_scalar_over_partial_rejected(checked, typed):
    with pytest.raises(SpmdTypeError, match="Partial type on axis mesh_dp"):
        2.0 / typed(P)


# ---- addmm decomposition (F.linear with bias) ------------------------------------------

def test_linear_without_bias_allows_one_partial_factor(checked, typed):
    # aten sees t + mm: P in one factor flows (cspmd differs from the reference's
    # Python-level F.linear on purpose).
    out = F.linear(typed(P), typed(R))
    assert ltype(out) == {"mesh_dp": "P", "mesh_tp": "P"}


def test_linear_bias_partial_with_replicate_factors(checked, typed):
    with pytest.raises(SpmdTypeError) as ei:
        F.linear(typed(R), typed(R), typed(P, 4))
    msg = str(ei.value)
    assert MSG_LINEAR in msg
    assert "Found types: [R, P]" in msg   # [mm_result, self]
    assert "In aten::addmm(" in msg


@pytest.mark.parametrize("self_t,a,b,expected", [
    (P, R, R, (ERR, MSG_LINEAR)),
    (P, P, R, P),
    (R, P, P, (ERR, MSG_MULTI)),
    (V, R, R, V),
    (R, R, R, R),
    (R, R, V, V),
    (I, R, R, (ERR, MSG_I_MIX)),
], ids=["PRR", "PPR", "RPP", "VRR", "RRR", "RRV", "IRR"])
def test_addmm_decomposition(checked, typed, self_t, a, b, expected):
    args = tuple(typed(t, requires_grad=True) for t in (self_t, a, b))
    if isinstance(expected, tuple):
        with pytest.raises(SpmdTypeError) as ei:
            torch.addmm(*args)
        assert expected[1] in str(ei.value)
    else:
        assert ltype(torch.addmm(*args)) == {"mesh_dp": expected.name, "mesh_tp": expected.name}


def test_linear_with_bias_varying_input(checked, typed):
    out = F.linear(typed(V, 3, 4), typed(R, 5, 4), typed(R, 5))
    assert ltype(out) == {"mesh_dp": "V", "mesh_tp": "V"}


# ---- error context ---------------------------------------------------------------------

def test_error_context(checked, typed):
    x, y = typed(I, requires_grad=True), typed(R, requires_grad=True)
    line = inspect.currentframe().f_lineno + 2
    with pytest.raises(SpmdTypeError) as ei:
        torch.add(x, y)
    msg = str(ei.value)
    assert "In aten::add.Tensor(" in msg
    assert "self: f32[4, 4] {mesh_dp: I, mesh_tp: I}" in msg
    assert "other: f32[4, 4] {mesh_dp: R, mesh_tp: R}" in msg
    assert "under mesh {mesh_dp, mesh_tp}" in msg
    assert f"at {os.path.abspath(__file__)}:{line}" in msg
    # the message comes first, the context after a blank line
    assert msg.startswith(MSG_I_MIX)
    assert "\n\n  In aten::add.Tensor(" in msg


def test_error_context_without_mesh(typed, tp_axis):
    with spmd.checker.typecheck():
        with pytest.raises(SpmdTypeError) as ei:
            typed({tp_axis: P}) + typed({tp_axis: R})
    msg = str(ei.value)
    assert "In aten::add.Tensor(" in msg
    assert "under mesh" not in msg


def test_error_context_is_separate_attribute(checked, typed):
    # the checker fills SpmdTypeError.context with the operator
    # description; .msg is the bare message and str() joins them with "\n\n".
    with pytest.raises(SpmdTypeError) as ei:
        typed(P) + typed(R)
    e = ei.value
    assert e.context is not None
    assert "In aten::add.Tensor(" in e.context
    assert "In aten::add.Tensor(" not in e.msg
    assert e.msg.startswith(MSG_LINEAR)
    assert str(e) == f"{e.msg}\n\n{e.context}"


# ---- aten-level choices documented in csrc/rules.c -------------------------------------

def test_dtype_cast_keeps_partial(checked, typed):
    out = typed(P).to(torch.float64)
    assert out.dtype == torch.float64
    assert ltype(out) == {"mesh_dp": "P", "mesh_tp": "P"}


def test_gather_index_is_a_coefficient(checked, typed):
    idx = spmd.assert_type(torch.zeros(4, 2, dtype=torch.int64), R)
    out = torch.gather(typed(P), 1, idx)
    assert ltype(out) == {"mesh_dp": "P", "mesh_tp": "P"}
    with pytest.raises(SpmdTypeError):
        torch.gather(typed(R), 1, spmd.assert_type(torch.zeros(4, 2, dtype=torch.int64), P))


def test_integer_and_float_operands(checked, typed):
    n = spmd.assert_type(torch.ones(4, 4, dtype=torch.int64), R)
    out = n + typed(V)
    assert out.dtype == torch.float32
    assert ltype(out) == {"mesh_dp": "V", "mesh_tp": "V"}


def test_einsum_bmm_dot(checked, typed):
    assert ltype(torch.einsum("ij,jk->ik", typed(P), typed(R))) == {"mesh_dp": "P", "mesh_tp": "P"}
    assert ltype(torch.bmm(typed(R, 2, 3, 4), typed(P, 2, 4, 5))) == \
        {"mesh_dp": "P", "mesh_tp": "P"}
    with pytest.raises(SpmdTypeError, match="cannot combine with Varying"):
        torch.dot(typed(P, 4), typed(V, 4))
