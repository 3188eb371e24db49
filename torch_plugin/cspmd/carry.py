"""Types that survive moving, copying, saving and loading.

A type lives on a tensor's TensorImpl.  Several everyday operations put the
same values into a *new* TensorImpl that torch makes outside any op the
checker sees, and the type would be lost:

* ``Module.to/half/float/double/bfloat16/cpu/cuda/_apply`` (``param.data =
  converted`` replaces the impl's metadata; with
  ``torch.__future__.set_swap_module_params_on_conversion(True)`` the
  parameter object is swapped instead);
* ``copy.deepcopy`` of a tensor, a parameter or a module;
* ``Module.load_state_dict`` (``assign=True`` puts the loaded tensors in);
* ``Optimizer.load_state_dict`` (state tensors are cast to the parameter's
  dtype and device).

Each is wrapped, once, when cspmd is imported: the types before are read,
the original runs, and every replacement gets its predecessor's type as the
core decides (``cspmd_type_carry``: an untyped replacement takes the type,
two different types are an SpmdTypeError).  ``torch.save`` / ``torch.load``
need no wrapper: the shim registers a serializer for CPU and CUDA tensors'
metadata (csrc/torch/type_saving.cpp), so a saved typed tensor -- alone, in
a state_dict, in an optimizer's state -- loads typed.
"""

import functools
import itertools

import torch

from ._lib import ops

__all__ = ["type_saving_devices"]

_UNTYPED = 0

#: The device types whose tensors' types torch.save writes ("cpu", "cuda").
type_saving_devices = tuple(ops.register_type_saving())


def _carry(old_type, new, what):
    """Give ``new`` the type the tensor it replaces had (decided by the core)."""
    if old_type == _UNTYPED or not isinstance(new, torch.Tensor):
        return
    have = ops.get_type(new)
    want = ops.type_carry(old_type, have, new.dim(), what)
    if want != have:
        ops.set_type(new, want)


def _paused():
    from .checker import no_typecheck
    return no_typecheck()


# ---- Module._apply ------------------------------------------------------------

_original_apply = torch.nn.Module._apply


def _own_types(module):
    """[(dict, name, type, grad type)] of a module's own parameters and buffers."""
    out = []
    for table in (module._parameters, module._buffers):
        for name, t in table.items():
            if t is not None:
                g = t.grad if table is module._parameters else None
                out.append((table, name, ops.get_type(t),
                            ops.get_type(g) if g is not None else _UNTYPED))
    return out


@functools.wraps(_original_apply)
def _apply(self, fn, *args, **kwargs):
    saved = _own_types(self)  # children carry their own: their _apply is this one
    result = _original_apply(self, fn, *args, **kwargs)
    owner = type(self).__name__
    for table, name, t, g in saved:
        new = table.get(name)
        if new is None:
            continue
        _carry(t, new, f"{owner}.{name}")
        if g != _UNTYPED and new.grad is not None:
            _carry(g, new.grad, f"{owner}.{name}.grad")
    return result


# ---- copy.deepcopy -------------------------------------------------------------

def _deepcopy_carrying(original):
    @functools.wraps(original)
    def deepcopy(self, memo):
        # Copying is not SPMD computation: the copy is made unchecked and
        # then given the source's type.
        with _paused():
            new = original(self, memo)
        _carry(ops.get_type(self), new, "deepcopy")
        return new
    return deepcopy


_original_tensor_deepcopy = torch.Tensor.__deepcopy__
_original_parameter_deepcopy = torch.nn.Parameter.__deepcopy__


# ---- Module.load_state_dict ------------------------------------------------------

_original_load_state_dict = torch.nn.Module.load_state_dict


def _named_tensors(module):
    params = module.named_parameters(remove_duplicate=False)
    buffers = module.named_buffers(remove_duplicate=False)
    return itertools.chain((("parameter", n, t) for n, t in params),
                           (("buffer", n, t) for n, t in buffers))


@functools.wraps(_original_load_state_dict)
def _load_state_dict(self, state_dict, *args, **kwargs):
    before = {name: (kind, ops.get_type(t)) for kind, name, t in _named_tensors(self)}
    # A loaded tensor typed differently from the one it replaces is an error,
    # raised before anything is loaded.
    for name, t in state_dict.items():
        if name in before and isinstance(t, torch.Tensor):
            kind, ty = before[name]
            ops.type_carry(ty, ops.get_type(t), t.dim(), f"load_state_dict: {kind} '{name}'")
    with _paused():  # loading copies values; it is not SPMD computation
        result = _original_load_state_dict(self, state_dict, *args, **kwargs)
    for kind, name, t in _named_tensors(self):
        if name in before:
            _carry(before[name][1], t, f"load_state_dict: {kind} '{name}'")
    return result


# ---- Optimizer.load_state_dict --------------------------------------------------

_original_optim_load = torch.optim.Optimizer.load_state_dict


@functools.wraps(_original_optim_load)
def _optim_load_state_dict(self, state_dict):
    saved_ids = itertools.chain.from_iterable(g["params"] for g in state_dict["param_groups"])
    params = itertools.chain.from_iterable(g["params"] for g in self.param_groups)
    id_to_param = dict(zip(saved_ids, params))
    types = {(id_to_param[k], key): ops.get_type(v)
             for k, st in state_dict["state"].items() if k in id_to_param
             for key, v in st.items() if isinstance(v, torch.Tensor)}
    result = _original_optim_load(self, state_dict)
    for (param, key), ty in types.items():
        _carry(ty, self.state.get(param, {}).get(key), f"optimizer state '{key}'")
    return result


def _install():
    torch.nn.Module._apply = _apply
    torch.Tensor.__deepcopy__ = _deepcopy_carrying(_original_tensor_deepcopy)
    torch.nn.Parameter.__deepcopy__ = _deepcopy_carrying(_original_parameter_deepcopy)
    torch.nn.Module.load_state_dict = _load_state_dict
    torch.optim.Optimizer.load_state_dict = _optim_load_state_dict


_install()
