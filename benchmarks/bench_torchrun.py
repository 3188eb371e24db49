"""Checked / unchecked time of a training step in a real multi-process job:
one process per GPU on NCCL under torchrun (gloo on CPU when there is no
GPU; ``--backend fake`` for one process on the fake backend, on the GPU if
there is one).  Not a test.

The step is the forward + backward of examples/megatron_block.py (Megatron
tensor + sequence parallelism, stacked ``--layers`` times) on a dp x tp mesh:

* unchecked: the model as a user runs it without cspmd's checks: parameters
  unannotated, checker off (cspmd's collectives run the same c10d
  functional collectives, unchecked);
* checked: the same model, its parameters typed with ``annotate_module``,
  each step under ``set_current_mesh(mesh)`` and ``typecheck()``;
* annotated, off: the checked variant's typed model run without
  ``typecheck()`` -- the steps of a job that checks only its first few.

The two alternate in rounds (each round times ``--steps`` steps of both, in
an order rotated every round), with the device synchronised and the ranks
at a barrier around each measurement.  The slowest rank sets a step's time,
so every figure is the maximum over ranks; the best round is kept.  Rank 0
prints the table and, with ``--json``, writes it.

On a GPU machine (the method in docs/production.md)::

    . scripts/env.sh            # or: pip install . into the job's venv
    torchrun --nproc-per-node=8 benchmarks/bench_torchrun.py --tp 8 --size large
    torchrun --nproc-per-node=8 benchmarks/bench_torchrun.py --tp 4   # dp 2 x tp 4

On this CPU-only machine (gloo, 2 processes, tiny model)::

    torchrun --nproc-per-node=2 benchmarks/bench_torchrun.py --tp 2 --size tiny
"""

import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))

import megatron_block  # noqa: E402

import cspmd as spmd  # noqa: E402
from cspmd.checker import typecheck  # noqa: E402

SIZES = {
    "tiny": dict(layers=2, hidden=64, ffn=256, heads=8, batch=2, seq=32),
    "moderate": dict(layers=4, hidden=1024, ffn=4096, heads=16, batch=4, seq=512),
    "large": dict(layers=8, hidden=4096, ffn=16384, heads=32, batch=2, seq=2048),
}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def parse():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", choices=list(SIZES), default="tiny")
    ap.add_argument("--tp", type=int, help="tensor-parallel size (default: the world size)")
    ap.add_argument("--backend", choices=["auto", "nccl", "gloo", "fake"], default="auto",
                    help="auto: nccl with GPUs, else gloo")
    ap.add_argument("--world-size", type=int, default=8, help="ranks of --backend fake")
    ap.add_argument("--dtype", choices=list(DTYPES), help="default: bfloat16 on GPU, else float32")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=10, help="steps per measurement")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--json", help="write the results to this file (rank 0)")
    for k in SIZES["tiny"]:
        ap.add_argument(f"--{k}", type=int, help=f"override the size's {k}")
    return ap.parse_args()


def init(args):
    """(device, backend): the process group of this process, its device."""
    cuda = torch.cuda.is_available()
    backend = args.backend if args.backend != "auto" else ("nccl" if cuda else "gloo")
    if backend == "fake":
        from torch.testing._internal.distributed.fake_pg import FakeStore
        dist.init_process_group("fake", rank=0, world_size=args.world_size, store=FakeStore())
        return torch.device("cuda" if cuda else "cpu"), backend
    if "RANK" not in os.environ:
        sys.exit(f"bench_torchrun: run under torchrun for --backend {backend} "
                 f"(or pass --backend fake for one process)")
    if backend == "nccl":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    dist.init_process_group(backend)
    return device, backend


def build(cfg, dp, tp, device, dtype, checked):
    """The blocks (same seeds for both variants), on ``device``; typed when ``checked``."""
    blocks = []
    for i in range(cfg["layers"]):
        block = megatron_block.build_block(dp, tp, sp=True, hidden=cfg["hidden"], ffn=cfg["ffn"],
                                           heads=cfg["heads"], seed=i, annotate=False)
        block = block.to(device=device, dtype=dtype)
        if checked:  # exact names as patterns: every parameter typed, once
            spmd.annotate_module(block, block.param_types())
        blocks.append(block)
    x = torch.randn(cfg["batch"], cfg["seq"] // tp.size(), cfg["hidden"], device=device,
                    dtype=dtype, generator=torch.Generator(device).manual_seed(1))
    if checked:
        spmd.assert_type(x, blocks[0].input_type())
    return blocks, x


def step(blocks, x):
    for b in blocks:
        for p in b.parameters():
            p.grad = None
    y = x
    for b in blocks:
        y = b(y)
    megatron_block.loss_of(blocks[0], y).backward()


def main():
    args = parse()
    cfg = dict(SIZES[args.size])
    cfg.update({k: getattr(args, k) for k in cfg if getattr(args, k) is not None})
    device, backend = init(args)
    world = dist.get_world_size()
    tp_size = args.tp or world
    if world % tp_size:
        sys.exit(f"bench_torchrun: --tp {tp_size} does not divide the world size {world}")
    dtype = DTYPES[args.dtype] if args.dtype else (
        torch.bfloat16 if device.type == "cuda" else torch.float32)
    from torch.distributed.device_mesh import init_device_mesh
    mesh = init_device_mesh(device.type, (world // tp_size, tp_size),
                            mesh_dim_names=("dp", "tp"))
    dp, tp = mesh.get_group("dp"), mesh.get_group("tp")

    plain = build(cfg, dp, tp, device, dtype, checked=False)
    checked = build(cfg, dp, tp, device, dtype, checked=True)

    def run_checked():
        with spmd.set_current_mesh(mesh), typecheck():
            step(*checked)

    variants = {"unchecked": lambda: step(*plain), "checked": run_checked,
                "annotated, off": lambda: step(*checked)}

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if backend != "fake":
            dist.barrier()

    def measure(fn):
        sync()
        t0 = time.perf_counter()
        for _ in range(args.steps):
            fn()
        sync()
        ms = torch.tensor([(time.perf_counter() - t0) / args.steps * 1e3],
                          device=device if backend == "nccl" else "cpu")
        if backend != "fake":
            dist.all_reduce(ms, op=dist.ReduceOp.MAX)  # the slowest rank sets the pace
        return ms.item()

    for fn in variants.values():
        for _ in range(args.warmup):
            fn()
    samples = {name: [] for name in variants}
    names = list(variants)
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            samples[name].append(measure(variants[name]))

    # The checked variant does check (its gradients carry types); the
    # unchecked one runs without cspmd (none do).
    run_checked()
    variants["unchecked"]()
    grad_type = spmd.get_local_type(checked[0][0].w1.grad)
    if not grad_type or spmd.has_local_type(plain[0][0].w1.grad):
        sys.exit("bench_torchrun: the checked / unchecked variants are not what they claim")
    if dist.get_rank() == 0:
        best = {n: min(v) for n, v in samples.items()}
        med = {n: statistics.median(v) for n, v in samples.items()}
        out = {"backend": backend, "device": str(device),
               "device_name": torch.cuda.get_device_name(device) if device.type == "cuda"
               else "cpu", "world": world, "dp": world // tp_size, "tp": tp_size,
               "size": args.size, "config": cfg, "dtype": str(dtype).replace("torch.", ""),
               "steps": args.steps, "rounds": args.rounds, "torch": torch.__version__,
               "cspmd": spmd.__version__, "w1_grad_type": str(grad_type), "ms_best": best, "ms_median": med,
               "ratio": best["checked"] / best["unchecked"],
               "ratio_annotated_off": best["annotated, off"] / best["unchecked"]}
        size = args.size + ("+overrides" if cfg != SIZES[args.size] else "")
        print(f"{backend} on {out['device_name']}: world {world} = dp {out['dp']} x tp "
              f"{tp_size}, {size} {cfg}, {out['dtype']}")
        print("| variant | best ms/step | median ms/step |")
        print("|---|---:|---:|")
        for n in names:
            print(f"| {n} | {best[n]:.2f} | {med[n]:.2f} |")
        print(f"checked / unchecked: {out['ratio']:.3f}x")
        print(f"annotated, off / unchecked: {out['ratio_annotated_off']:.3f}x")
        if args.json:
            with open(args.json, "w") as f:
                json.dump(out, f, indent=1)
            print(f"wrote {args.json}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
