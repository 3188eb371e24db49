"""A torch.compile'd tensor-parallel MLP step (forward + backward, inductor)
on the fake process group: unchecked, checked (the captured graph checked
once per input types, then compiled code runs) and checked with the
compiler stance force_eager (every op checked eagerly), µs per step.

    python benchmarks/bench_compile.py [--steps 200] [--rounds 3] [--backend inductor]
"""

import argparse
import time

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

import cspmd as spmd
import cspmd.checker

R, V, P = spmd.R, spmd.V, spmd.P


def mlp(x, w1, w2):
    """Column- then row-parallel linear: x R on tp, w1 and w2 V on tp."""
    h = torch.nn.functional.gelu(x @ w1)
    return spmd.all_reduce(h @ w2, "tp", src=V, dst=R)


def step(fn, x, w1, w2, g):
    y = fn(x, w1, w2)
    y.backward(g)
    w1.grad = w2.grad = None
    return y


def bench(label, fn, args, steps, rounds):
    step(fn, *args)  # compile, and the first check
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(steps):
            step(fn, *args)
        best = min(best, (time.perf_counter() - t0) / steps)
    print(f"{label:<40} {best * 1e6:10.1f} us/step")
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--backend", default="inductor")
    a = ap.parse_args()
    torch.set_num_threads(1)  # steadier on a shared machine
    dist.init_process_group("fake", rank=0, world_size=8)
    mesh = init_device_mesh("cpu", (2, 4), mesh_dim_names=("dp", "tp"))
    compiled = torch.compile(mlp, backend=a.backend)
    with spmd.set_current_mesh(mesh):
        x = spmd.assert_type(torch.randn(64, 256), {"dp": V, "tp": R})
        w1 = spmd.assert_type(torch.randn(256, 256, requires_grad=True), {"dp": R, "tp": V})
        w2 = spmd.assert_type(torch.randn(256, 256, requires_grad=True), {"dp": R, "tp": V})
        g = spmd.assert_type(torch.ones(64, 256), {"dp": V, "tp": P})
        args = (x, w1, w2, g)
        print(f"torch {torch.__version__}, backend {a.backend}, MLP 64x256x256, "
              f"forward + backward")
        base = bench("eager, unchecked", mlp, args, a.steps, a.rounds)
        unchecked = bench("compiled, unchecked", compiled, args, a.steps, a.rounds)
        with spmd.checker.typecheck():
            checked = bench("compiled, checked (graph check)", compiled, args, a.steps,
                            a.rounds)
            with torch.compiler.set_stance("force_eager"):
                eager = bench("compiled, checked (force_eager)", compiled, args, a.steps,
                              a.rounds)
    print(f"checked / unchecked compiled: {checked / unchecked:.2f}x; "
          f"force_eager / graph check: {eager / checked:.2f}x; eager unchecked "
          f"{base * 1e6:.1f} us")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
