"""Tensor kinds and modes where the checker's key sits differently per torch
minor (docs/dev/architecture.md, "The dispatch key"): the same program gives
the same answer on every torch, and what cannot be seen is refused."""

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode

import cspmd as spmd
import cspmd._handlers as handlers
from conftest import ltype

R, I, V, P = spmd.R, spmd.I, spmd.V, spmd.P
BELOW_PYTHON = int(torch.__version__.split(".")[1]) >= 13


class PassThrough(TorchDispatchMode):
    """A mode that forwards every op, as CommDebugMode and profilers do."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def _aten_lines(caplog, op):
    return [r.getMessage() for r in caplog.records if op in r.getMessage()]


def _mlp_step(relu_of_partial):
    """Row-parallel MLP step on the current device; with the bug, a P
    activation goes through relu before its all-reduce."""
    w = spmd.assert_type(torch.empty(8, 4).requires_grad_(), {"dp": R, "tp": V})
    h = spmd.assert_type(torch.empty(2, 4).requires_grad_(), {"dp": V, "tp": V})
    partial = spmd.reinterpret(h @ w.t(), "tp", src=V, dst=P)
    if relu_of_partial:
        partial = torch.relu(partial)  # the planted bug
    y = torch.relu(spmd.all_reduce(partial, "tp", src=P, dst=I))
    spmd.reinterpret(y.sum(), "dp", src=V, dst=P).backward()
    return ltype(w.grad), ltype(h.grad)


@pytest.mark.parametrize("mode", [FakeTensorMode, PassThrough])
def test_training_step_under_a_mode(checked, mode):
    with mode():
        grads = _mlp_step(relu_of_partial=False)
        with pytest.raises(spmd.SpmdTypeError) as e:
            _mlp_step(relu_of_partial=True)
    assert grads == ({"mesh_dp": "P", "mesh_tp": "V"}, {"mesh_dp": "V", "mesh_tp": "V"})
    line = next(i for i, text in enumerate(open(__file__), 1) if "# the planted bug" in text)
    assert "aten::relu" in str(e.value) and f"test_tensor_kinds.py:{line}" in str(e.value)


@pytest.mark.parametrize("mode", [FakeTensorMode, PassThrough])
def test_an_op_under_a_mode_is_checked_once(mesh, caplog, mode):
    with mode(), spmd.set_current_mesh(mesh):
        x = spmd.assert_type(torch.ones(2, 3), {"dp": R, "tp": V})
        with caplog.at_level("INFO", logger="cspmd.runtime.trace"), spmd.trace():
            with spmd.checker.typecheck():
                y = x * 2
    assert ltype(y) == {"mesh_dp": "R", "mesh_tp": "V"}
    assert len(_aten_lines(caplog, "aten::mul")) == 1, caplog.records


def test_handled_classes_agree_with_the_wrapped_handlers():
    wrapped = sorted({cls.__name__.replace("Mode", "") for cls, _ in handlers._handlers()})
    assert wrapped == sorted(spmd._lib.ops.handled_classes())
    assert spmd._lib.ops.checker_below_python() == BELOW_PYTHON


def test_other_subclass_is_checked_where_the_key_sits(mesh):
    """A tensor subclass cspmd does not know: above the Python key (torch
    2.10-2.12) the op on the wrapper is checked with the wrapper's type;
    below it (2.13+) only its inner tensors can be typed, and typing the
    wrapper is a TypeError that names the class and the torch."""
    from torch.testing._internal.two_tensor import TwoTensor

    with spmd.set_current_mesh(mesh):
        a, b = torch.ones(3), torch.ones(3)
        t = TwoTensor(a, b)
        if BELOW_PYTHON:
            minor = ".".join(torch.__version__.split(".")[:2])
            with pytest.raises(TypeError, match=rf"cannot type a TwoTensor on torch {minor}: "
                               r"from torch 2.13 a tensor subclass's __torch_dispatch__ runs"):
                spmd.assert_type(t, {"dp": R, "tp": P})
            assert not spmd.has_local_type(t)
            spmd.assert_type(a, {"dp": R, "tp": P})
            spmd.assert_type(b, {"dp": R, "tp": P})
        else:
            spmd.assert_type(t, {"dp": R, "tp": P})
        with spmd.checker.typecheck():
            with pytest.raises(spmd.SpmdTypeError, match="non-linear"):
                torch.relu(t)
            t * 2  # linear: fine either way


def test_a_handler_that_declines_passes_the_op_on(mesh):
    """LocalTensorMode returns NotImplemented for a tensor subclass it does
    not know; the check at its handler hands that back, and torch asks the
    next handler (here the subclass's own), as without cspmd."""
    from torch.distributed._local_tensor import LocalTensorMode

    class Declining(torch.Tensor):
        @staticmethod
        def __new__(cls, elem):
            return torch.Tensor._make_wrapper_subclass(cls, elem.shape, dtype=elem.dtype)

        def __init__(self, elem):
            self.elem = elem

        @classmethod
        def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
            seen.append(func)
            return args[0].elem + 1

    def run():
        with LocalTensorMode(8):
            return torch.add(Declining(torch.ones(2)), 1)

    seen = []
    plain = run()
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck():
        checked = run()
    assert seen == [torch.ops.aten.add.Tensor] * 2
    assert type(checked) is type(plain) and str(checked) == str(plain)
