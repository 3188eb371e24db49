"""Autograd Function registration, spmd_typecheck hooks, decompositions and
module backward hooks, end to end under the checker."""

import pytest
import torch

import cspmd as spmd
import cspmd.checker
from cspmd import I, P, R, V

from conftest import ltype


class Double(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2


def test_unregistered_function_checked_op_by_op(checked, typed):
    x = typed({"dp": R, "tp": V}, requires_grad=True)
    y = Double.apply(x)
    assert ltype(y) == {"mesh_dp": "R", "mesh_tp": "V"}

    class Relu(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return torch.relu(x)

        @staticmethod
        def backward(ctx, g):
            return g

    with pytest.raises(spmd.SpmdTypeError, match="Partial type on axis mesh_tp"):
        Relu.apply(typed({"dp": R, "tp": P}))


def test_apply_patched_only_while_checking(mesh):
    base = torch.autograd.Function.__dict__["apply"]
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck():
        assert torch.autograd.Function.__dict__["apply"] is not base
    assert torch.autograd.Function.__dict__["apply"] is base


class Scale(torch.autograd.Function):
    seen = []

    @staticmethod
    def forward(ctx, x, k=3.0):
        return x * k

    @staticmethod
    def backward(ctx, g):
        return g * 3.0, None

    @staticmethod
    def spmd_typecheck(outputs, *, x, k):
        Scale.seen.append((ltype(x), k))
        spmd.rules.ignore(x)
        # The forward ran unchecked: the hook's annotation is the type.
        spmd.assert_type(outputs, {"dp": R, "tp": P})


def test_spmd_typecheck_hook(checked, typed):
    Scale.seen.clear()
    x = typed({"dp": R, "tp": V})
    y = Scale.apply(x)
    assert Scale.seen == [({"mesh_dp": "R", "mesh_tp": "V"}, 3.0)]
    assert ltype(y) == {"mesh_dp": "R", "mesh_tp": "P"}
    with pytest.raises(TypeError, match=r"Scale.apply\(\) accepts positional arguments only"):
        Scale.apply(x, k=2.0)


def test_spmd_typecheck_hook_new_style_forward(checked, typed):
    class NewStyle(torch.autograd.Function):
        got = None

        @staticmethod
        def forward(x, y):
            return x + y

        @staticmethod
        def setup_context(ctx, inputs, output):
            pass

        @staticmethod
        def backward(ctx, g):
            return g, g

        @staticmethod
        def spmd_typecheck(out, *, x, y):
            NewStyle.got = ltype(y)
            spmd.rules.einsum("...,...->...", x, y, out=out)

    NewStyle.apply(typed({"dp": R, "tp": R}), typed({"dp": R, "tp": V}))
    assert NewStyle.got == {"mesh_dp": "R", "mesh_tp": "V"}


def test_spmd_typecheck_not_called_off_checking(typed):
    Scale.seen.clear()
    Scale.apply(torch.randn(2))
    assert Scale.seen == []


def test_non_callable_hook(checked, typed):
    class Bad(Double):
        spmd_typecheck = 3

    with pytest.raises(TypeError, match="spmd_typecheck must be callable"):
        Bad.apply(typed({"dp": R, "tp": R}))


def test_register_autograd_function_legacy(checked, typed):
    calls = []

    @spmd.register_autograd_function
    class Legacy(Double):
        @staticmethod
        def typecheck_forward(x):
            calls.append(ltype(x))
            out = Legacy.apply(x)  # the real apply, checked
            return spmd.assert_type(out, {"dp": R, "tp": P})

    y = Legacy.apply(typed({"dp": R, "tp": V}))
    assert calls == [{"mesh_dp": "R", "mesh_tp": "V"}]
    assert ltype(y) == {"mesh_dp": "R", "mesh_tp": "P"}


def test_register_autograd_function_errors():
    with pytest.raises(TypeError, match="requires a callable typecheck_forward or "
                       "spmd_typecheck"):
        spmd.register_autograd_function(Double)

    class Both(Double):
        @staticmethod
        def typecheck_forward(x):
            return x

        @staticmethod
        def spmd_typecheck(out):
            pass

    with pytest.raises(TypeError, match="cannot define typecheck_forward together with "
                       "spmd_typecheck"):
        spmd.register_autograd_function(Both)
    for fn in (spmd.register_autograd_function, spmd.register_local_autograd_function,
               spmd.register_decomposition):
        with pytest.raises(TypeError, match="torch.autograd.Function subclass"):
            fn(int)


def test_register_local_autograd_function(checked, typed):
    class Loc(Double):
        pass

    assert spmd.register_local_autograd_function(Loc) is Loc
    assert ltype(Loc.apply(typed({"dp": R, "tp": I}))) == {"mesh_dp": "R", "mesh_tp": "I"}


class FusedGelu(torch.autograd.Function):
    """Stands for an opaque fused kernel: its forward is not type-visible."""

    @staticmethod
    def forward(ctx, x):
        return torch.nn.functional.gelu(x)

    @staticmethod
    def backward(ctx, g):
        return g


def test_register_decomposition_forms():
    def ref(x):
        return torch.nn.functional.gelu(x)

    assert spmd.register_decomposition(FusedGelu, ref) is ref

    class Other(FusedGelu):
        pass

    deco = spmd.register_decomposition(Other)

    @deco
    def ref2(x):
        return x

    assert ref2(1) == 1
    with pytest.raises(TypeError, match="ref_impl must be callable"):
        spmd.register_decomposition(Other, 3)


def test_register_decomposition_types_and_errors(checked, typed):
    class Fused(FusedGelu):
        pass

    spmd.register_decomposition(Fused, lambda x: (torch.nn.functional.gelu(x), x.sum()))

    class FusedPair(FusedGelu):
        @staticmethod
        def forward(ctx, x):
            return torch.nn.functional.gelu(x), x.sum()

    spmd.register_decomposition(FusedPair, lambda x: (torch.nn.functional.gelu(x), x.sum()))
    x = typed({"dp": R, "tp": V})
    y, s = FusedPair.apply(x)
    assert ltype(y) == ltype(s) == {"mesh_dp": "R", "mesh_tp": "V"}
    assert torch.allclose(y, torch.nn.functional.gelu(x))
    with pytest.raises(spmd.SpmdTypeError, match="Partial type on axis mesh_tp"):
        FusedPair.apply(typed({"dp": R, "tp": P}))
    with pytest.raises(spmd.SpmdTypeError, match="Fused: decomposition output tree does not "
                       "match"):
        Fused.apply(x)


def test_module_backward_hook_unregistered(checked, typed):
    lin = torch.nn.Linear(4, 4)
    for p in lin.parameters():
        spmd.assert_type(p, {"dp": R, "tp": R})

    def my_hook(module, grad_in, grad_out):
        return None

    handle = lin.register_full_backward_hook(my_hook)
    x = typed({"dp": R, "tp": V}, 2, 4, requires_grad=True)
    with pytest.raises(spmd.SpmdTypeError) as e:
        lin(x)
    assert str(e.value) == (
        "Backward hook 'test_module_backward_hook_unregistered.<locals>.my_hook' attached to "
        "nn.Module is not registered for SPMD type propagation.  Call "
        "register_local_backward_hook(fn) if the hook does not alter gradient SPMD types.")
    handle.remove()

    def pre(module, grad_out):
        return None

    lin.register_full_backward_pre_hook(pre)
    with pytest.raises(spmd.SpmdTypeError, match="Backward hook '.*pre' attached"):
        lin(x)


def test_module_backward_hook_registered(checked, typed):
    seen = []

    @spmd.register_local_backward_hook
    def hook(module, grad_in, grad_out):
        seen.append(ltype(grad_out[0]))

    lin = torch.nn.Linear(4, 4)
    for p in lin.parameters():
        spmd.assert_type(p, {"dp": R, "tp": R})
    lin.register_full_backward_hook(hook)
    x = typed({"dp": V, "tp": V}, 2, 4, requires_grad=True)
    y = lin(x)
    assert ltype(y) == {"mesh_dp": "V", "mesh_tp": "V"}
    loss = spmd.reinterpret(y.sum(), "tp", src=V, dst=P)
    loss = spmd.reinterpret(loss, "dp", src=V, dst=P)
    loss.backward()
    assert seen == [{"mesh_dp": "V", "mesh_tp": "V"}]  # ran in the checked backward


def test_hooks_off_checking_not_validated(typed):
    lin = torch.nn.Linear(4, 4)
    lin.register_full_backward_hook(lambda m, gi, go: None)
    lin(torch.randn(2, 4, requires_grad=True))


def test_register_local_backward_hook_bad_input():
    with pytest.raises(TypeError, match="expected a callable"):
        spmd.register_local_backward_hook(3)
