"""Optimizers are checked: _foreach_* list ops and the fused kernels are
typed element by element with their single-tensor rules.

The classic data-parallel bug -- stepping with the gradient's pending sum
(P) because the all-reduce was forgotten -- must be caught by SGD, Adam and
AdamW in each of their implementations (for-loop, foreach, fused), and the
correct program must pass in all of them with the same numbers as
unchecked.
"""

import pytest
import torch

import cspmd as spmd
from cspmd import P, R, V, SpmdTypeError
from cspmd.checker import typecheck
from conftest import ltype

OPTIMIZERS = {
    "sgd": lambda ps, **kw: torch.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.01, **kw),
    "adam": lambda ps, **kw: torch.optim.Adam(ps, lr=0.01, **kw),
    "adamw": lambda ps, **kw: torch.optim.AdamW(ps, lr=0.01, **kw),
}
IMPLS = {"for-loop": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}


def train(dp, opt_name, impl, *, reduce, checked=True, steps=3):
    """Data-parallel steps of a tiny linear model; returns the parameters."""
    torch.manual_seed(0)
    w = torch.randn(4, 3, requires_grad=True)
    b = torch.zeros(3, requires_grad=True)
    xs = [torch.randn(5, 4) for _ in range(steps)]
    opt = OPTIMIZERS[opt_name]([w, b], **IMPLS[impl])

    def run():
        spmd.assert_type(w, {dp: R})
        spmd.assert_type(b, {dp: R})
        for x in xs:
            spmd.assert_type(x, {dp: V})
            opt.zero_grad()
            loss = (x @ w + b).square().mean()
            spmd.reinterpret(loss, dp, src=V, dst=P).backward()
            assert not checked or ltype(w.grad) == {"mesh_dp": "P"}
            if reduce:
                for p in (w, b):
                    p.grad = spmd.all_reduce(p.grad, dp, src=P, dst=R)
            opt.step()

    if checked:
        with spmd.set_current_mesh({dp}), typecheck():
            run()
    else:
        run()
    return w.detach().clone(), b.detach().clone()


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("opt_name", OPTIMIZERS)
def test_missing_all_reduce_is_caught(dp, opt_name, impl):
    with pytest.raises(SpmdTypeError, match="Partial"):
        train(dp, opt_name, impl, reduce=False)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("opt_name", OPTIMIZERS)
def test_correct_step_passes_and_matches_unchecked(dp, opt_name, impl):
    got = train(dp, opt_name, impl, reduce=True)
    # The fake backend's all_reduce leaves the data as it is, so the
    # unchecked run without the (then type-only) reduction is the reference.
    want = train(dp, opt_name, impl, reduce=False, checked=False)
    for g, w in zip(got, want):
        assert torch.equal(g, w)


def test_optimizer_state_takes_the_parameter_type(dp):
    w = torch.randn(4, 3, requires_grad=True)
    opt = torch.optim.Adam([w], lr=0.01, foreach=True)
    with spmd.set_current_mesh({dp}), typecheck():
        spmd.assert_type(w, {dp: R})
        w.grad = spmd.assert_type(torch.randn(4, 3), {dp: R})
        opt.step()
        state = opt.state[w]
        assert ltype(state["exp_avg"]) == {"mesh_dp": "R"}
        assert ltype(state["exp_avg_sq"]) == {"mesh_dp": "R"}
        assert ltype(w) == {"mesh_dp": "R"}


# ---- _foreach_* ops, element by element ------------------------------------------


@pytest.fixture
def each(dp, tp):
    def make(*lts):
        out = []
        for lt in lts:
            x = torch.randn(3)
            spmd.assert_type(x, {dp: R, tp: lt})
            out.append(x)
        return out
    return make


def tp_types(xs):
    return [ltype(x)["mesh_tp"] for x in xs]


def test_foreach_out_of_place_types_each_element(each, checked):
    assert tp_types(torch._foreach_add(each(R, V, P), each(R, V, P))) == ["R", "V", "P"]
    assert tp_types(torch._foreach_mul(each(R, V, P), each(R, R, R))) == ["R", "V", "P"]
    assert tp_types(torch._foreach_sqrt(each(R, V))) == ["R", "V"]
    assert tp_types(torch._foreach_norm(each(R, V))) == ["R", "V"]


def test_foreach_error_names_the_index(each, checked):
    with pytest.raises(SpmdTypeError, match=r"^list element \[2\]: Partial type on axis "
                                            r"mesh_tp in a linear op") as e:
        torch._foreach_add(each(R, V, P), each(R, V, R))
    assert "aten::_foreach_add.List" in str(e.value)
    with pytest.raises(SpmdTypeError, match=r"list element \[1\]: Partial type .* non-linear"):
        torch._foreach_exp(each(R, P))


def test_foreach_scalar_forms(dp, tp, each, checked):
    torch._foreach_mul_(each(R, P), 2.0)             # scaling a partial sum: fine
    with pytest.raises(SpmdTypeError, match=r"list element \[1\]"):
        torch._foreach_add_(each(R, P), 1.0)         # adding a constant to it: affine
    with pytest.raises(SpmdTypeError, match=r"list element \[1\]"):
        torch._foreach_add_(each(R, P), [1.0, 2.0])  # ScalarList: the same
    xs = each(R, P)
    coef = torch.tensor(0.5)
    spmd.assert_type(coef, {dp: R, tp: R})
    torch._foreach_mul_(xs, coef)                    # one Tensor for every element
    assert tp_types(xs) == ["R", "P"]


def test_foreach_in_place_checks_before_running(each, checked):
    xs, ys = each(R, R), each(R, P)
    before = [x.clone() for x in xs]
    with pytest.raises(SpmdTypeError, match=r"list element \[1\]"):
        torch._foreach_add_(xs, ys)
    assert all(torch.equal(a, b) for a, b in zip(xs, before))  # nothing ran
    assert tp_types(xs) == ["R", "R"]


def test_foreach_in_place_mutation_rule(dp, tp, checked):
    w = torch.randn(3, requires_grad=True)
    spmd.assert_type(w, {dp: R, tp: R})
    v = torch.randn(3)
    spmd.assert_type(v, {dp: R, tp: V})
    with torch.no_grad(), pytest.raises(SpmdTypeError, match=r"list element \[0\]"):
        torch._foreach_add_([w], [v])                # R -> V on a tensor that requires grad


def test_foreach_untyped_elements_stay_unchecked(each, checked):
    with spmd.no_typecheck():
        plain = torch.randn(3)
    xs = each(R) + [plain]
    out = torch._foreach_add(xs, xs)
    assert tp_types(out[:1]) == ["R"]
    assert spmd.get_local_type(out[1]) == {}


def test_foreach_over_ten_thousand_tensors(each, checked):
    xs = each(*([R] * 10_000))
    ys = each(*([V] * 10_000))
    out = torch._foreach_add(xs, ys)
    assert len(out) == 10_000 and all(t == "V" for t in tp_types(out))
    ys[9_999] = each(P)[0]
    with pytest.raises(SpmdTypeError, match=r"list element \[9999\]"):
        torch._foreach_add(xs, ys)


# ---- clip_grad_norm_ --------------------------------------------------------------


def grads(dp, tp, *lts):
    ps = []
    for lt in lts:
        p = torch.randn(4, requires_grad=True)
        spmd.assert_type(p, {dp: R, tp: lt})
        p.grad = torch.randn(4)
        spmd.assert_type(p.grad, {dp: R, tp: lt})
        ps.append(p)
    return ps


@pytest.mark.parametrize("foreach", [False, True])
def test_clip_grad_norm_replicated(dp, tp, checked, foreach):
    ps = grads(dp, tp, R, R)
    norm = torch.nn.utils.clip_grad_norm_(ps, 1.0, foreach=foreach)
    assert ltype(norm) == {"mesh_dp": "R", "mesh_tp": "R"}
    assert all(ltype(p.grad)["mesh_tp"] == "R" for p in ps)


@pytest.mark.parametrize("foreach", [False, True])
def test_clip_grad_norm_over_sharded_params_needs_the_reduction(dp, tp, checked, foreach):
    # A V-sharded parameter's local norm is not the global norm: clipping
    # the replicated parameters' gradients with it makes them V, and the
    # step that follows is rejected.
    ps = grads(dp, tp, R, V)
    torch.nn.utils.clip_grad_norm_(ps, 1.0, foreach=foreach)
    assert ltype(ps[0].grad)["mesh_tp"] == "V"
    opt = torch.optim.SGD(ps, lr=0.1, foreach=foreach)
    with pytest.raises(SpmdTypeError):
        opt.step()


@pytest.mark.parametrize("foreach", [False, True])
def test_clip_by_the_reduced_norm_passes(dp, tp, checked, foreach):
    # The right way: sum the squared local norms of the shards over tp.
    ps = grads(dp, tp, R, V)
    sq_r = ps[0].grad.pow(2).sum()
    sq_v = spmd.all_reduce(ps[1].grad.pow(2).sum(), tp, src=V, dst=R)
    coef = (1.0 / (torch.sqrt(sq_r + sq_v) + 1e-6)).clamp(max=1.0)
    if foreach:
        torch._foreach_mul_([p.grad for p in ps], coef)
    else:
        for p in ps:
            p.grad.mul_(coef)
    assert [ltype(p.grad)["mesh_tp"] for p in ps] == ["R", "V"]
    torch.optim.SGD(ps, lr=0.1, foreach=foreach).step()
    assert [ltype(p)["mesh_tp"] for p in ps] == ["R", "V"]
