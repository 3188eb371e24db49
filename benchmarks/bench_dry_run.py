"""The 8B-shaped Llama dry run (examples/llama_dry_run.py: 32 layers, world
size 64 on the fake process group, meta tensors), one step unchecked, under
cspmd and under the reference spmd_types, each in its own process: the
step's wall time and the process's peak RSS.

    python benchmarks/bench_dry_run.py [--layers 32]

The reference runs the same module with its names swapped in. It types no
gradient, so its run annotates each gradient (P on dp, and on tp for the
RMSNorm weights) before the all-reduces, and assigns ``.grad`` once the
gradient is fully reduced (its checker treats the ``.grad`` setter as an op
on the parameter and the gradient).
"""

import argparse
import os
import resource
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(os.path.dirname(HERE), "examples")

CHILD = """
import contextlib, resource, sys, time
sys.path.insert(0, {examples!r})
sys.path.insert(0, {here!r})
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
import llama_dry_run as L
which = {which!r}
if which == "reference":
    from common import use_reference
    spmd = use_reference()
    L.spmd = spmd
    for name in "IPRSV":
        setattr(L, name, getattr(spmd, name))

    def reduce_gradients(model):
        dp, tp = model.cfg.dp, model.cfg.tp
        with torch.no_grad():
            for name, p in model.named_parameters():
                norm = name.endswith("norm")
                spmd.assert_type(p.grad, {{dp: spmd.P, tp: spmd.P if norm else spmd.V}})
                g = spmd.all_reduce(p.grad, dp, src=spmd.P, dst=spmd.R)
                if norm:
                    g = spmd.all_reduce(g, tp, src=spmd.P, dst=spmd.R)
                p.grad = g

    L.reduce_gradients = reduce_gradients
else:
    import cspmd as spmd
import importlib
dist.init_process_group("fake", rank=0, world_size=64)
mesh = init_device_mesh("cpu", (8, 8), mesh_dim_names=("dp", "tp"))
checking = (contextlib.nullcontext() if which == "plain"
            else importlib.import_module(spmd.__name__ + ".checker").typecheck())
start = time.perf_counter()
with spmd.set_current_mesh(mesh), checking:
    L.dry_run(mesh.get_group("dp"), mesh.get_group("tp"), layers={layers})
step = time.perf_counter() - start
print(step, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
dist.destroy_process_group()
"""


def _run(which, layers):
    code = CHILD.format(examples=EXAMPLES, here=HERE, which=which, layers=layers)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"{which} run failed:\n{out.stderr[-3000:]}")
    step, rss = out.stdout.split()[-2:]
    return float(step), float(rss)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    print(f"Llama 8B shapes, {args.layers} layers, dp=8 x tp=8 (64 fake ranks) on meta, "
          f"one forward + backward + AdamW step; best of {args.rounds}")
    best = {}
    for which in ("plain", "cspmd", "reference"):
        runs = [_run(which, args.layers) for _ in range(args.rounds)]
        best[which] = (min(r[0] for r in runs), max(r[1] for r in runs))
    for which, (step, rss) in best.items():
        print(f"  {which:10s} step {step:5.2f} s ({step / best['plain'][0]:.2f}x plain), "
              f"peak RSS {rss:.0f} MiB")


if __name__ == "__main__":
    main()
