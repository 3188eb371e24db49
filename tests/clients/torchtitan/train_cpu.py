"""torchtitan's own trainer (``torchtitan.train.main``), on CPU over Gloo.

Run by ``check.py`` under ``torchrun ... -m cspmd.run``, so torchtitan's
``import spmd_types`` gives cspmd.  Arguments are torchtitan's.  What
differs from ``python -m torchtitan.train``, all set before torchtitan is
imported (none of it in what cspmd checks):

- torchtitan picks its device type once, at import, and falls back to
  CUDA when torch finds no accelerator; here it finds CPU, so its process
  group is Gloo and its tensors are on the CPU.
- torch.cpu lacks a few of the device-module calls torchtitan's memory
  monitor makes; they get stand-ins that report no memory statistics.
- torchtitan passes ``device_ids=[current_device()]`` to barrier; on the
  CPU that is ``["cpu"]``, which torch refuses, and Gloo uses no device ids.
- FSDP reduce-scatters with PREMUL_SUM once a gradient divide factor is
  set (torchtitan sets 1.0), which Gloo lacks; it is told to sum instead
  (``set_force_sum_reduction_for_comms``), the same numbers for a factor 1.
- FlexAttention has no backward on CPU: its kernel (which torchtitan runs
  with checking off and types by its query) is replaced by
  scaled_dot_product_attention under the same mask, made dense.
- ``CSPMD_TT_PLANT=missing_reduction`` plants a bug: the first
  redistribution that would reduce a Partial tensor (the vocab-parallel
  token embedding's output, reduce-scattered for sequence parallelism)
  returns it unreduced, as if the collective had been forgotten.  The
  checker must stop the step at the first op that uses it (the first
  layer's RMSNorm).
"""

import os
import sys

import torch
import torch._utils

torch._utils._get_available_device_type = lambda: "cpu"


class _CpuProperties:
    total_memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


_CPU_STAND_INS = {
    "get_device_name": lambda device=None: "cpu",
    "get_device_properties": lambda device=None: _CpuProperties(),
    "reset_peak_memory_stats": lambda device=None: None,
    "empty_cache": lambda: None,
    "memory_stats": lambda device=None: {},
}
for _name, _stand_in in _CPU_STAND_INS.items():
    if not hasattr(torch.cpu, _name):
        setattr(torch.cpu, _name, _stand_in)

_barrier = torch.distributed.barrier


def _gloo_barrier(*args, device_ids=None, **kwargs):
    return _barrier(*args, **kwargs)


torch.distributed.barrier = _gloo_barrier


def _sum_instead_of_premul_sum():
    from torch.distributed.fsdp import FSDPModule

    set_factor = FSDPModule.set_gradient_divide_factor

    def set_gradient_divide_factor(self, factor):
        set_factor(self, factor)
        self.set_force_sum_reduction_for_comms(True)

    FSDPModule.set_gradient_divide_factor = set_gradient_divide_factor


def _cpu_flex_attention(q, k, v, *, score_mod=None, block_mask=None, scale=None,
                        enable_gqa=False, return_aux=None, kernel_options=None):
    from torch.nn.attention.flex_attention import AuxOutput, create_mask

    if score_mod is not None or (return_aux is not None and (return_aux.lse or
                                                             return_aux.max_scores)):
        raise NotImplementedError("train_cpu.py: the CPU attention has no score_mod or aux")
    mask = None
    if block_mask is not None:
        mask = create_mask(block_mask.mask_mod, q.shape[0], 1, q.shape[-2], k.shape[-2],
                           q.device)
    out = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, scale=scale, enable_gqa=enable_gqa)
    return out, AuxOutput()


def _plant_missing_reduction():
    import spmd_types as spmd
    from torchtitan.distributed import spmd_types as tt_spmd

    redistribute = tt_spmd.spmd_redistribute_per_axis
    planted = []

    def forgetful(x, mesh, src_types, dst_types):
        if not planted and any(t is spmd.P for t in src_types.values()):
            planted.append(True)
            print(f"[plant] rank {os.environ.get('RANK')}: the reduction "
                  f"{dict(src_types)} -> {dict(dst_types)} left out", flush=True)
            return x
        return redistribute(x, mesh, src_types, dst_types)

    # Every module that took the function by name gets the forgetful one.
    for module in list(sys.modules.values()):
        if getattr(module, "spmd_redistribute_per_axis", None) is redistribute:
            module.spmd_redistribute_per_axis = forgetful


def main():
    from torchtitan.models.common.attention import FlexAttention
    from torchtitan.train import main as torchtitan_main

    FlexAttention._compiled_flex_attn = staticmethod(_cpu_flex_attention)
    _sum_instead_of_premul_sum()

    plant = os.environ.get("CSPMD_TT_PLANT", "")
    if plant == "missing_reduction":
        import torchtitan.protocols.module  # noqa: F401  (binds the name)
        _plant_missing_reduction()
    elif plant:
        raise SystemExit(f"train_cpu.py: unknown CSPMD_TT_PLANT={plant!r} "
                         "(known: missing_reduction)")
    torchtitan_main()


if __name__ == "__main__":
    main()
