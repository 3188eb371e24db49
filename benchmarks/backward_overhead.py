"""Overhead of backward checking on the Megatron-style block
(examples/megatron_block.py), dp x tp = 2 x 4 on the fake process group.

Three implementations of the same training step, measured side by side in
one run (they alternate in rounds, so machine noise hits all alike):

* plain:    no typecheck() at all;
* fwd-only: typecheck(backward=False) -- forward checked, backward not;
* checked:  typecheck() -- forward, every backward op, the loss and
            gradient duality checked.

Prints a markdown table of the median ms per step (forward, backward, total)
and the ratios; the backward ratio checked / fwd-only is the cost of
backward checking.  It also prints the cost of the graph walk every checked
backward() starts with (watch_leaves: it puts the gradient-accumulation
check on each leaf's AccumulateGrad node), timed alone.  Not a test.

    python benchmarks/backward_overhead.py [--rounds N] [--steps K] [--size small|medium]
"""

import argparse
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

import cspmd as spmd
import cspmd.checker

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
from megatron_block import build_block, loss_of, make_input  # noqa: E402

SIZES = {  # hidden, ffn, heads, batch, seq
    "small": (64, 256, 8, 2, 64),
    "medium": (256, 1024, 8, 4, 256),
}


def step_timer(block, x, mesh, mode):
    """One timed step: returns (forward s, backward s)."""
    def run():
        for p in block.parameters():
            p.grad = None
        t0 = time.perf_counter()
        loss = loss_of(block, block(x))
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        return t1 - t0, t2 - t1

    if mode == "plain":
        return run
    backward = mode == "checked"

    def checked():
        with spmd.set_current_mesh(mesh), spmd.checker.typecheck(backward=backward):
            return run()
    return checked


def walk_us(block, x, mesh, n=500):
    """µs per watch_leaves() walk of one step's autograd graph (the hooks are
    in place after the first; later walks only visit)."""
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck():
        loss = loss_of(block, block(x))
        spmd.checker.ops.watch_leaves([loss])
        t0 = time.perf_counter()
        for _ in range(n):
            spmd.checker.ops.watch_leaves([loss])
        return (time.perf_counter() - t0) / n * 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--steps", type=int, default=5, help="steps per implementation per round")
    ap.add_argument("--size", choices=sorted(SIZES), default=None,
                    help="one size (default: all)")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if not dist.is_initialized():
        dist.init_process_group(backend="fake", rank=0, world_size=8)
    mesh = init_device_mesh("cpu", (2, 4), mesh_dim_names=("dp", "tp"))
    dp, tp = mesh.get_group("dp"), mesh.get_group("tp")
    modes = ("plain", "fwd-only", "checked")

    print(f"torch {torch.__version__}, {args.threads} thread(s), {args.rounds} rounds x "
          f"{args.steps} steps, median ms per step\n")
    print("| block | hidden/ffn/seq | mode | fwd ms | bwd ms | step ms | bwd / fwd-only bwd "
          "| step / plain |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    walks = []
    for size in [args.size] if args.size else list(SIZES):
        hidden, ffn, heads, batch, seq = SIZES[size]
        for sp in (False, True):
            block = build_block(dp, tp, sp=sp, hidden=hidden, ffn=ffn, heads=heads)
            x = make_input(block, batch=batch, seq=seq)
            fns = {m: step_timer(block, x, mesh, m) for m in modes}
            for m in modes:   # warm up (rule caches, allocator)
                for _ in range(3):
                    fns[m]()
            times = {m: ([], []) for m in modes}
            for r in range(args.rounds):
                order = modes if r % 2 == 0 else modes[::-1]
                for m in order:
                    for _ in range(args.steps):
                        f, b = fns[m]()
                        times[m][0].append(f)
                        times[m][1].append(b)
            med = {m: (statistics.median(times[m][0]) * 1e3, statistics.median(times[m][1]) * 1e3)
                   for m in modes}
            for m in modes:
                f, b = med[m]
                bratio = b / med["fwd-only"][1]
                sratio = (f + b) / sum(med["plain"])
                name = "tp+sp" if sp else "tp"
                print(f"| {name} ({size}) | {hidden}/{ffn}/{seq} | {m} | {f:.3f} | {b:.3f} | "
                      f"{f + b:.3f} | {bratio:.3f}x | {sratio:.3f}x |")
            w = walk_us(block, x, mesh)
            walks.append(f"{name} ({size}): {w:.1f} µs per backward(), "
                         f"{w / (med['checked'][1] * 10):.2f}% of the checked backward")
    print("\nGraph walk at backward() (watch_leaves):")
    for w in walks:
        print(f"  {w}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
