"""Explicit gradients: ``y.backward(g)``, ``autograd.grad(..., grad_outputs=)``
and ``autograd.backward(tensors, grad_tensors)``.

The rule (the core's ``cspmd_grad_seed``): an untyped gradient -- the
normal case: ``torch.ones_like(y)`` built outside the checker, a gradient
received from the next pipeline stage -- takes, per axis, the dual of its
output's type (what the implicit seed would have been); a typed gradient
must be that dual (V accepted where P is due), else SpmdTypeError naming the
output and its gradient with both types.  The caller's gradient tensor is
never retyped: the typed seed is an alias.
"""

import pytest
import torch

import cspmd as spmd
from cspmd import I, P, R, S, V, SpmdTypeError
from conftest import ltype

import gloo_harness

DP, TP = "mesh_dp", "mesh_tp"


def column_parallel(dp, tp):
    """w {dp: R, tp: V}, x {dp: V, tp: I} -> y = convert(x) @ w: {dp: V, tp: V}."""
    w = spmd.assert_type(torch.randn(4, 3, requires_grad=True), {dp: R, tp: V})
    x = spmd.assert_type(torch.randn(2, 4), {dp: V, tp: I})
    return w, x


def test_untyped_gradient_takes_the_dual(mesh, dp, tp):
    w, x = column_parallel(dp, tp)
    g = torch.ones(2, 3)                                   # built outside the checker
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck():
        y = spmd.convert(x, tp, src=I, dst=R) @ w          # {dp: V, tp: V}
        y.backward(g)
    assert ltype(w.grad) == {DP: "P", TP: "V"}
    assert not spmd.has_local_type(g)                      # the caller's tensor is untouched


def test_untyped_gradient_through_a_backward_collective(mesh, dp, tp):
    """The reported failure: an untyped gradient reached the backward
    all-reduce ('tensor has no type')."""
    w, x = column_parallel(dp, tp)
    g = torch.ones(2, 12)
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck():
        h = spmd.convert(x, tp, src=I, dst=R)
        y = spmd.all_gather(h @ w, tp, src=S(1), dst=R)
        assert ltype(y) == {DP: "V", TP: "R"}
        y.backward(g)
    assert ltype(w.grad) == {DP: "P", TP: "V"}


def test_autograd_grad_with_untyped_grad_outputs(mesh, dp, tp):
    w, x = column_parallel(dp, tp)
    g = torch.randn(2, 3)
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck():
        y = spmd.convert(x, tp, src=I, dst=R) @ w
        (gw,) = torch.autograd.grad(y, w, grad_outputs=g)
    assert ltype(gw) == {DP: "P", TP: "V"}
    assert not spmd.has_local_type(g)


def test_autograd_backward_mixed_typed_untyped_and_none(mesh, dp, tp):
    w, x = column_parallel(dp, tp)
    g2 = torch.ones(2, 12)                                   # untyped
    g1 = spmd.assert_type(torch.ones(2, 3), {dp: V, tp: V})       # typed, the dual
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck():
        h = spmd.convert(x, tp, src=I, dst=R)
        y1 = h @ w                                          # {dp: V, tp: V}
        y2 = spmd.all_gather(h @ w, tp, src=S(1), dst=R)   # {dp: V, tp: R}
        loss = spmd.reinterpret(spmd.reinterpret((h @ w).sum(), dp, src=V, dst=P),
                                tp, src=V, dst=P)          # {dp: P, tp: P}: implicit seed
        torch.autograd.backward([y1, y2, loss], [g1, g2, None])
    assert ltype(w.grad) == {DP: "P", TP: "V"}
    assert ltype(g1) == {DP: "V", TP: "V"} and not spmd.has_local_type(g2)


def test_typed_v_gradient_where_p_is_due_is_accepted(mesh, dp, tp):
    """An R output's gradient is a pending sum: a V gradient is this rank's
    piece of it (reinterpreting V as P is free)."""
    w = spmd.assert_type(torch.randn(4, 3, requires_grad=True), {dp: R, tp: R})
    x = spmd.assert_type(torch.randn(2, 4), {dp: R, tp: R})
    g = spmd.assert_type(torch.ones(2, 3), {dp: V, tp: P})
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck():
        y = x @ w                                             # {dp: R, tp: R}
        y.backward(g)
    assert ltype(w.grad) == {DP: "P", TP: "P"}
    assert ltype(g) == {DP: "V", TP: "P"}


def test_typed_gradient_of_the_wrong_type_names_output_and_types(mesh, dp, tp):
    """A gradient computed from typed values (here a copy of the output)
    has their type: for an R output that is a reduced gradient where a
    pending sum is due."""
    w = spmd.assert_type(torch.randn(4, 3, requires_grad=True), {dp: R, tp: I})
    x = spmd.assert_type(torch.randn(2, 4), {dp: V, tp: I})
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck():
        y = spmd.all_gather(x @ w, dp, src=S(0), dst=R)   # {dp: R, tp: I}
        g = y.detach().clone()                            # a computed value: R on dp
        with pytest.raises(SpmdTypeError) as ei:
            y.backward(g)
    msg = str(ei.value)
    assert ("Explicit gradient type mismatch on axis mesh_dp: the output is R, so its gradient "
            "(given to backward()) must be P (or V), but it is R.") in msg
    assert "output type:   {mesh_dp: R, mesh_tp: I}" in msg
    assert "gradient type: {mesh_dp: R, mesh_tp: I}" in msg
    assert "a factory's (torch.ones_like(output)) or an untyped one takes the dual" in msg
    assert w.grad is None                                     # nothing ran


def test_replicated_gradient_of_a_varying_output_is_rejected(mesh, dp, tp):
    """V's gradient is V: an R-typed gradient given for a V output is an
    error of the duality rule (not read as V)."""
    w, x = column_parallel(dp, tp)
    g = spmd.assert_type(torch.ones(2, 3), {dp: V, tp: R})
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck():
        y = spmd.convert(x, tp, src=I, dst=R) @ w             # {dp: V, tp: V}
        with pytest.raises(SpmdTypeError, match=r"on axis mesh_tp: outputs\[1\] is V, so its "
                                                r"gradient grad_outputs\[1\] must be V, but it "
                                                r"is R"):
            loss = spmd.reinterpret(spmd.reinterpret(y.sum(), dp, src=V, dst=P),
                                    tp, src=V, dst=P)
            torch.autograd.grad([loss, y], [w], grad_outputs=[None, g])


def test_pending_gradient_of_an_invariant_output_is_rejected(mesh, dp, tp):
    w = spmd.assert_type(torch.randn(4, 3, requires_grad=True), {dp: R, tp: I})
    x = spmd.assert_type(torch.randn(2, 4), {dp: V, tp: I})
    g = spmd.assert_type(torch.ones(2, 3), {dp: V, tp: P})
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck():
        y = x @ w                                             # {dp: V, tp: I}
        with pytest.raises(SpmdTypeError, match="still a pending sum"):
            torch.autograd.backward([y], [g])


def test_strict_missing_axis_in_a_typed_gradient(mesh, dp, tp):
    w, x = column_parallel(dp, tp)
    g = spmd.assert_type(torch.ones(2, 3), {dp: V})
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck():
        y = spmd.convert(x, tp, src=I, dst=R) @ w
        with pytest.raises(SpmdTypeError, match="but it is untyped"):
            y.backward(g)
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck("permissive"):
        y = spmd.convert(x, tp, src=I, dst=R) @ w
        y.backward(g)                                         # permissive: tp filled with V
    assert ltype(w.grad) == {DP: "P", TP: "V"}


def test_global_mode_completes_a_partly_typed_gradient_per_axis(mesh, dp, tp):
    """As it completes a wholly untyped one: strict or not, in global mode
    the axes a gradient lacks take the dual of the output's type there."""
    w = spmd.assert_type(torch.randn(4, 3, requires_grad=True), {dp: R, tp: I})
    x = spmd.assert_type(torch.randn(2, 4), {dp: S(0), tp: I})
    g = spmd.assert_type(torch.ones(2, 3), {dp: S(0)})       # typed on dp only
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck(local=False):
        y = x @ w                                             # {dp: S(0), tp: I}
        y.backward(g)
    assert ltype(w.grad) == {DP: "P", TP: "I"}
    w.grad = None
    bad = spmd.assert_type(torch.ones(2, 3), {dp: S(0), tp: P})   # a typed, wrong axis
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck(local=False):
        y = x @ w
        with pytest.raises(SpmdTypeError, match="on axis mesh_tp"):
            y.backward(bad)


def test_gradient_requiring_grad_keeps_its_graph(mesh, dp, tp):
    """create_graph: a gradient that itself requires grad is retyped on a
    differentiable alias."""
    w, x = column_parallel(dp, tp)
    g = torch.ones(2, 3, requires_grad=True)
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck():
        y = spmd.convert(x, tp, src=I, dst=R) @ w
        (gw,) = torch.autograd.grad(y, w, grad_outputs=g, create_graph=True)
    assert gw.requires_grad and ltype(gw) == {DP: "P", TP: "V"}
    assert not spmd.has_local_type(g)


def test_unchecked_backward_leaves_gradients_alone(mesh, dp, tp):
    w, x = column_parallel(dp, tp)
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck(backward=False):
        y = spmd.convert(x, tp, src=I, dst=R) @ w
        y.backward(torch.ones(2, 3))
    assert not spmd.has_local_type(w.grad)


# ---------------------------------------------------------------------------
# Two pipeline stages on Gloo: stage 1 sends its activation to stage 2, which
# sends the activation's gradient back; stage 1 calls y.backward(received).
# ---------------------------------------------------------------------------


def _pipeline_rank(rank, ws):
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    torch.manual_seed(0)
    w1 = torch.randn(4, 4)
    w2 = torch.randn(4, 4)
    x = torch.randn(3, 4)
    stage = rank * 2 // ws
    mesh = init_device_mesh("cpu", (2, ws // 2), mesh_dim_names=("pp", "dp"))
    dp = mesh.get_group("dp")
    sub = mesh["dp"]
    peer = rank + ws // 2 if stage == 0 else rank - ws // 2
    out = {}
    with spmd.set_current_mesh(sub), spmd.checker.typecheck():
        if stage == 0:
            w = spmd.assert_type(w1.clone().requires_grad_(), {dp: R})
            y = torch.tanh(spmd.assert_type(x, {dp: R}) @ w)            # {dp: R}
            with spmd.no_typecheck():
                dist.send(y.detach(), peer)
                g = torch.empty_like(y)
                dist.recv(g, peer)
            y.backward(g)                                               # untyped: P
            out["grad"] = w.grad.clone()
            out["type"] = ltype(w.grad)
        else:
            h = torch.empty(3, 4)
            with spmd.no_typecheck():
                dist.recv(h, peer)
            h = spmd.assert_type(h.requires_grad_(), {dp: R})
            w = spmd.assert_type(w2.clone().requires_grad_(), {dp: R})
            loss = spmd.convert(torch.tanh(h @ w).pow(2).sum(), dp, src=R, dst=P)
            loss.backward()
            with spmd.no_typecheck():
                dist.send(h.grad, peer)
            out["type"] = ltype(h.grad)
    return out


def _pipeline_reference():
    torch.manual_seed(0)
    w1 = torch.randn(4, 4, requires_grad=True)
    w2 = torch.randn(4, 4)
    x = torch.randn(3, 4)
    torch.tanh(torch.tanh(x @ w1) @ w2).pow(2).sum().backward()
    return w1.grad


@pytest.mark.parametrize("ws", [2])
def test_two_stage_pipeline_on_gloo(ws):
    """The gradient stage 2 sends back is untyped on arrival: stage 1's
    y.backward(received) types it as the dual of y ({dp: R} -> P).  The
    summed dp gradients equal the single-process gradient."""
    res = gloo_harness.run_world(ws, _pipeline_rank, timeout=90)
    want = {"mesh_dp": "P"} if ws == 4 else {}   # dp has size 1 at ws=2
    assert [out["type"] for out in res] == [want] * ws
    stage1 = [out["grad"] for out in res[:ws // 2]]
    assert torch.equal(sum(stage1[1:], stage1[0]), _pipeline_reference())


# ---- gradients a factory makes inside typecheck() -----------------------
# The user's data, not a value the program computed: whatever type its
# making gave it (torch.ones: R; randn: {}; ones_like(y): y's), it seeds as
# an untyped gradient does.  The reference accepts all of these too (it does
# not check backward()).

FACTORIES = {
    "ones": lambda y: torch.ones(y.shape),
    "zeros": lambda y: torch.zeros(y.shape),
    "full": lambda y: torch.full(y.shape, 0.5),
    "randn": lambda y: torch.randn(y.shape),
    "tensor": lambda y: torch.tensor([[1.0, 2.0, 3.0]] * y.shape[0]),
    "ones_like": lambda y: torch.ones_like(y),
    "randn_like": lambda y: torch.randn_like(y),
    "empty_like + fill_": lambda y: torch.empty_like(y).fill_(1.0),
    "ones / n (ops over data)": lambda y: torch.ones_like(y) / y.numel(),
    "ones[view]": lambda y: torch.ones(2 * y.shape[0], y.shape[1])[: y.shape[0]],
}


@pytest.mark.parametrize("make", FACTORIES.values(), ids=FACTORIES.keys())
@pytest.mark.parametrize("local", [True, False], ids=["local", "global"])
def test_a_factory_made_gradient_seeds_as_untyped(make, local, mesh, dp, tp):
    w = spmd.assert_type(torch.randn(4, 3, requires_grad=True), {dp: R, tp: I})
    x = spmd.assert_type(torch.randn(2, 4), {dp: S(0), tp: I})
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck(local=local):
        y = spmd.all_gather(x @ w, dp, src=S(0), dst=R)   # {dp: R, tp: I}: P due on dp
        g = make(y)
        y.backward(g)
    assert ltype(w.grad) == {DP: "P", TP: "I"}


def test_the_factory_mark_ends_where_a_type_is_declared_or_computed(mesh, dp, tp):
    w = spmd.assert_type(torch.randn(4, 3, requires_grad=True), {dp: R, tp: I})
    x = spmd.assert_type(torch.randn(2, 4), {dp: V, tp: I})
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck():
        y = spmd.all_gather(x @ w, dp, src=S(0), dst=R)   # {dp: R, tp: I}
        declared = spmd.assert_type(torch.ones_like(y), {dp: R, tp: I})  # the user says R
        with pytest.raises(SpmdTypeError, match="must be P \\(or V\\), but it is R"):
            y.backward(declared, retain_graph=True)
        computed = torch.ones_like(y) * y.detach()       # data times a computed value
        with pytest.raises(SpmdTypeError, match="must be P \\(or V\\), but it is R"):
            y.backward(computed, retain_graph=True)
        scaled = torch.ones_like(y)
        scaled.mul_(y.detach())                           # in place: no longer the user's data
        with pytest.raises(SpmdTypeError, match="must be P \\(or V\\), but it is R"):
            y.backward(scaled, retain_graph=True)
        y.backward(torch.ones_like(y) * 3)               # data times a number stays data
    assert ltype(w.grad) == {DP: "P", TP: "I"}


def test_a_factory_made_gradient_gives_the_gradient_an_unchecked_run_gives(mesh, dp, tp):
    torch.manual_seed(0)
    w0 = torch.randn(4, 3)
    x0 = torch.randn(2, 4)
    grads = []
    for checked in (False, True):
        w = spmd.assert_type(w0.clone().requires_grad_(), {dp: R, tp: I})
        x = spmd.assert_type(x0.clone(), {dp: V, tp: I})
        with spmd.set_current_mesh(mesh), spmd.checker.typecheck() if checked else \
                spmd.no_typecheck():
            y = torch.tanh(x @ w)                          # {dp: V, tp: I}
            y.backward(torch.full(y.shape, 0.25))
        grads.append(w.grad.clone())
    torch.testing.assert_close(grads[0], grads[1])


@pytest.mark.parametrize("make", ["ones", "randn_like", "tensor"])
def test_a_factory_made_gradient_is_accepted_as_by_the_reference(make, tp):
    import reference
    ref = reference.load()
    reference.load("spmd_types.checker")
    grads = {}
    for lib in (spmd, ref):
        torch.manual_seed(0)
        w = lib.assert_type(torch.randn(4, requires_grad=True), {tp: lib.R})
        with lib.checker.typecheck():
            y = w * 2                                       # {tp: R}
            g = {"ones": lambda: torch.ones(4), "randn_like": lambda: torch.randn_like(y),
                 "tensor": lambda: torch.tensor([1.0, 2.0, 3.0, 4.0])}[make]()
            y.backward(g)
        grads[lib] = w.grad
    torch.testing.assert_close(grads[spmd], grads[ref])
    assert ltype(grads[spmd]) == {"mesh_tp": "P"}            # the reference leaves it untyped
