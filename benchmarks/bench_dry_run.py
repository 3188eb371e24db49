"""The 8B-shaped Llama dry run (examples/llama_dry_run.py: 32 layers, world
size 64 on the fake process group, meta tensors): wall time of one step
checked and unchecked, and the peak RSS of a process that runs it checked.

    python benchmarks/bench_dry_run.py [--layers 32]

Not compared with spmd_types yet (see docs/performance.md).
"""

import argparse
import os
import resource
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "examples", "llama_dry_run.py")

CHILD = """
import sys, time, contextlib
sys.path.insert(0, {examples!r})
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
import cspmd as spmd, cspmd.checker
import llama_dry_run
dist.init_process_group("fake", rank=0, world_size=64)
mesh = init_device_mesh("cpu", (8, 8), mesh_dim_names=("dp", "tp"))
check = {checked!r}
start = time.perf_counter()
with spmd.set_current_mesh(mesh), (cspmd.checker.typecheck() if check else contextlib.nullcontext()):
    llama_dry_run.dry_run(mesh.get_group("dp"), mesh.get_group("tp"), layers={layers})
print(time.perf_counter() - start)
dist.destroy_process_group()
"""


def _child(checked, layers):
    code = CHILD.format(examples=os.path.dirname(EXAMPLE), checked=checked, layers=layers)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    return float(out.stdout.split()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=32)
    args = ap.parse_args()
    unchecked = min(_child(False, args.layers) for _ in range(2))
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    start = time.perf_counter()
    checked = min(_child(True, args.layers) for _ in range(2))
    wall = (time.perf_counter() - start) / 2
    rss = max(before, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 1024
    print(f"Llama 8B shapes, {args.layers} layers, dp=8 x tp=8 on meta, one step")
    print(f"  step unchecked {unchecked:.2f} s, checked {checked:.2f} s "
          f"(ratio {checked / unchecked:.2f}x)")
    print(f"  process wall time {wall:.1f} s, peak RSS of the runs {rss:.0f} MiB")


if __name__ == "__main__":
    main()
