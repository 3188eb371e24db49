"""Training step of a small 2-D (dp x tp) MLP in global mode: unchecked vs
cspmd local mode (typecheck()) vs cspmd global mode
(typecheck(local=False)), implementations alternating in rounds, on the
fake process group (dp 2 x tp 4).

One step (examples/tp_mlp_global.py): w1 column- and w2 row-sharded on tp
(S(1), S(0)), the batch sharded on dp (S(0)); forward relu(x @ w1) @ w2, all_reduce over tp
(P -> I), the loss all-reduced over dp, backward, each gradient
all-reduced over dp, and an AdamW step (foreach).  The unchecked run
executes the same program (same annotations and collectives) with no
checker on.  spmd_types is left out: it sees neither the backward nor the
optimizer's ops.

Writes results/train_global.json.  Not a test.

    python benchmarks/bench_train_global.py [--rounds N] [--steps N]
"""

import argparse
import os
import sys

import torch

import common

sys.path.insert(0, os.path.join(common.ROOT, "examples"))
from tp_mlp_global import annotate_weights, make_weights, train_step  # noqa: E402

SIZES = {
    "tiny": dict(batch=8, hidden=16, ffn=32),
    "moderate": dict(batch=64, hidden=256, ffn=1024),
}
IMPLS = ["unchecked", "local", "global"]


def make_step(dp, tp, cfg):
    """One training step (examples/tp_mlp_global.py) as a function of no
    arguments, and its state."""
    g = torch.Generator().manual_seed(0)
    w1, w2 = make_weights(cfg["hidden"], cfg["ffn"] // 4, generator=g)  # this rank's shards
    x = torch.randn(cfg["batch"] // 2, cfg["hidden"], generator=g)     # this rank's batch shard
    opt = torch.optim.AdamW([w1, w2], lr=1e-3, foreach=True)

    def step():
        annotate_weights(dp, tp, w1, w2)
        train_step(dp, tp, w1, w2, x, opt)

    return step


def contexts(mesh):
    """{impl: a function returning the context the step runs in}."""
    import cspmd.checker
    return {"unchecked": common.nothing,
            "local": lambda: common.both(cspmd.set_current_mesh(mesh),
                                         cspmd.checker.typecheck()),
            "global": lambda: common.both(cspmd.set_current_mesh(mesh),
                                          cspmd.checker.typecheck(local=False))}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=50)
    args = ap.parse_args()
    torch.set_num_threads(1)
    mesh, dp, tp = common.fake_mesh()
    ctx = contexts(mesh)
    steps = {size: {impl: make_step(dp, tp, cfg) for impl in IMPLS}
             for size, cfg in SIZES.items()}
    for size in SIZES:                      # warm up (and fail early)
        for impl in IMPLS:
            with ctx[impl]():
                for _ in range(3):
                    steps[size][impl]()

    def measure(size, impl):
        with ctx[impl]():
            return common.per_call_us(steps[size][impl], args.steps) / 1e3

    samples = common.alternate(list(SIZES), IMPLS, args.rounds, measure)
    res = common.best(samples)
    print(f"{'size':10s} {'unchecked':>10s} {'local':>8s} {'global':>8s} {'local/unch':>11s} "
          f"{'global/unch':>12s}  (ms per step, best)")
    for size, d in res.items():
        print(f"{size:10s} {d['unchecked']:10.3f} {d['local']:8.3f} {d['global']:8.3f} "
              f"{d['local'] / d['unchecked']:10.2f}x {d['global'] / d['unchecked']:11.2f}x")
    common.save("train_global", {"machine": common.machine(), "rounds": args.rounds,
                                 "steps": args.steps, "sizes": SIZES, "best_ms": res,
                                 "samples_ms": samples})


if __name__ == "__main__":
    main()
