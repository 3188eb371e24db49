"""Meta tensors and FakeTensorMode are checked as CPU tensors are.

cspmd's kernel sits on a functionality key above every backend key and the
Python key, so the `meta` backend and FakeTensorMode (which works at the
Python key) are reached only after the check: same rules, same errors, same
user line, and collectives produce outputs of the right shape and type
without communicating.
"""

import contextlib
import warnings

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

import cspmd as spmd
from conftest import ltype

R, I, V, P = spmd.R, spmd.I, spmd.V, spmd.P
S = spmd.S


def _make(where, shape, type_, requires_grad=False):
    """A tensor on CPU, on meta, or a FakeTensor (created under the mode
    that ``where`` names; the caller keeps the mode open)."""
    device = "meta" if where == "meta" else "cpu"
    x = torch.empty(*shape, device=device)
    if requires_grad:
        x.requires_grad_()
    return spmd.assert_type(x, type_)


def _on(where, fn):
    """fn(where), under FakeTensorMode for "fake" (the mode stays open while
    fn builds and uses its tensors)."""
    with FakeTensorMode() if where == "fake" else contextlib.nullcontext():
        return fn(where)


def _relu_of_partial(where):
    x = _make(where, (4, 3), {"dp": R, "tp": P})
    with pytest.raises(spmd.SpmdTypeError) as e:
        torch.relu(x)
    return str(e.value)


@pytest.mark.parametrize("where", ["meta", "fake"])
def test_relu_of_partial_same_error_and_line_as_cpu(checked, where):
    want = _relu_of_partial("cpu")
    got = _on(where, _relu_of_partial)
    assert got == want
    assert "aten::relu" in got and "test_meta_fake.py" in got


def _collectives(where):
    """Every collective kind on one operand each; (shape, type) of each."""
    out = []
    x = _make(where, (4, 8), {"dp": R, "tp": P})
    out.append(spmd.all_reduce(x, "tp", src=P, dst=R))
    out.append(spmd.reduce_scatter(x, "tp", src=P, dst=V))
    v = _make(where, (4, 8), {"dp": R, "tp": V})
    out.append(spmd.all_gather(v, "tp", src=V, dst=R))
    out.append(spmd.all_to_all(v, "tp", src=V, dst=V))
    r = _make(where, (4, 8), {"dp": R, "tp": R})
    out.append(spmd.convert(r, "tp", src=R, dst=V))
    out.append(spmd.reinterpret(r, "tp", src=R, dst=P, expert_mode=True))
    return [(tuple(y.shape), y.device.type, type(y), ltype(y)) for y in out]


@pytest.mark.parametrize("where", ["meta", "fake"])
def test_collectives_shapes_and_types_as_cpu(checked, where):
    want = _collectives("cpu")
    got = _on(where, _collectives)
    if where == "fake":
        assert all(kind is FakeTensor for _, _, kind, _ in got)
    else:
        assert all(dev == "meta" for _, dev, _, _ in got)
    assert [(s, t) for s, _, _, t in got] == [(s, t) for s, _, _, t in want]


def _train_step(where):
    """A column+row parallel MLP forward and backward; the grads' types."""
    w1 = _make(where, (4, 8), {"dp": R, "tp": V}, requires_grad=True)
    w2 = _make(where, (8, 4), {"dp": R, "tp": V}, requires_grad=True)
    x = _make(where, (2, 8), {"dp": V, "tp": R}, requires_grad=True)
    h = torch.relu(x @ w1.t())
    partial = spmd.reinterpret(h @ w2.t(), "tp", src=V, dst=P)
    y = spmd.all_reduce(partial, "tp", src=P, dst=I)
    loss = spmd.reinterpret(y.sum(), "dp", src=V, dst=P)
    loss.backward()
    return [ltype(t.grad) for t in (w1, w2, x)]


@pytest.mark.parametrize("where", ["meta", "fake"])
def test_backward_grad_types_as_cpu(checked, where):
    want = _train_step("cpu")
    got = _on(where, _train_step)
    assert got == want
    assert want[0] == {"mesh_dp": "P", "mesh_tp": "V"}


def _missing_all_reduce(where):
    """The row-parallel output used without its all-reduce: caught."""
    w2 = _make(where, (8, 4), {"dp": R, "tp": V}, requires_grad=True)
    h = _make(where, (2, 4), {"dp": V, "tp": V}, requires_grad=True)
    partial = spmd.reinterpret(h @ w2.t(), "tp", src=V, dst=P)
    with pytest.raises(spmd.SpmdTypeError) as e:
        torch.nn.functional.gelu(partial)
    return str(e.value)


@pytest.mark.parametrize("where", ["meta", "fake"])
def test_missing_all_reduce_caught_as_on_cpu(checked, where):
    assert _on(where, _missing_all_reduce) == _missing_all_reduce("cpu")


def test_meta_construction_then_to_empty_keeps_types(mesh):
    with torch.device("meta"):
        lin = torch.nn.Linear(4, 8)
    with spmd.set_current_mesh(mesh):
        spmd.assert_type(lin.weight, {"dp": R, "tp": S(0)})
        spmd.assert_type(lin.bias, {"dp": R, "tp": S(0)})
    lin.to_empty(device="cpu")
    assert lin.weight.device.type == "cpu" and not lin.weight.is_meta
    assert ltype(lin.weight) == {"mesh_dp": "R", "mesh_tp": "V"}
    assert ltype(lin.bias) == {"mesh_dp": "R", "mesh_tp": "V"}
    # and the materialized module is checked with those types
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck():
        x = spmd.assert_type(torch.empty(2, 4), {"dp": V, "tp": R})
        assert ltype(lin(x)) == {"mesh_dp": "V", "mesh_tp": "V"}


def test_construction_under_meta_device_inside_typecheck(checked):
    # init_empty_weights-style: the module is built on meta while checking
    # is on; its parameters come out untyped (empty) or {} (random init),
    # never rejected, and can be annotated afterwards.
    with torch.device("meta"):
        lin = torch.nn.Linear(4, 4)
    assert lin.weight.is_meta
    for p in lin.parameters():
        spmd.assert_type(p, {"dp": R, "tp": R})
    x = spmd.assert_type(torch.empty(2, 4, device="meta"), {"dp": V, "tp": P})
    with pytest.raises(spmd.SpmdTypeError, match="Partial"):
        torch.relu(lin(x))


def _layouts():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {
            "sparse_coo": torch.eye(3).to_sparse(),
            "sparse_csr": torch.eye(3).to_sparse_csr(),
            "quantized": torch.quantize_per_tensor(torch.ones(3), 0.1, 0, torch.qint8),
            "nested": torch.nested.nested_tensor([torch.ones(2), torch.ones(3)]),
            "mkldnn": torch.ones(3).to_mkldnn(),
        }


@pytest.mark.parametrize("kind", sorted(_layouts()))
def test_other_tensor_kinds_are_checked(mesh, kind):
    # Sparse, quantized, nested and mkldnn tensors reach the same kernel:
    # a P operand of a non-linear op is rejected, an R one is typed.
    p, r = _layouts()[kind], _layouts()[kind]
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck():
        spmd.assert_type(p, {"dp": R, "tp": P})
        with pytest.raises(spmd.SpmdTypeError, match="Partial type on axis mesh_tp"):
            torch.relu(p)
        spmd.assert_type(r, {"dp": R, "tp": R})
        assert ltype(torch.relu(r)) == {"mesh_dp": "R", "mesh_tp": "R"}
