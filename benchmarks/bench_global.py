"""Per-op overhead of global mode (typecheck(local=False)) on small CPU
tensors sharded on tp (S(i)): plain eager, cspmd local mode, cspmd global
mode and the reference spmd_types 0.3.1 in global mode, in one process,
implementations alternating in rounds.  Every op here has a C shard rule.
Writes results/global.json.  Not a test.

    python benchmarks/bench_global.py [--rounds N] [--number N]
"""

import argparse
import contextlib

import torch
import torch.nn.functional as F

import common

IMPLS = ["plain", "cspmd_local", "cspmd_global", "spmd_types_global"]


def workloads(lib, dp, tp):
    """{op: fn} on tensors annotated with ``lib`` (None: plain tensors)."""
    g = torch.Generator().manual_seed(0)

    def t(*shape, shard=None):
        x = torch.randn(*shape, generator=g)
        if lib is not None:
            lib.assert_type(x, {dp: lib.R, tp: lib.S(shard) if shard is not None else lib.R})
        return x

    a, b = t(8, 8, shard=0), t(8, 8, shard=0)
    w, bias = t(8, 8), t(8)
    col = t(8, 8, shard=1)
    return {
        "add": lambda: torch.add(a, b),
        "mul": lambda: torch.mul(a, b),
        "div_scalar": lambda: a / 2.0,
        "mm": lambda: torch.mm(a, w),
        "mm_partial": lambda: torch.mm(col, b),
        "addmm": lambda: torch.addmm(bias, a, w),
        "view": lambda: a.view(64),
        "transpose": lambda: a.t(),
        "sum": lambda: a.sum(1),
        "softmax": lambda: torch.softmax(a, -1),
        "gelu": lambda: F.gelu(a),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--number", type=int, default=2000)
    args = ap.parse_args()
    torch.set_num_threads(1)
    import cspmd
    import cspmd.checker
    ref = common.use_reference()
    mesh, dp, tp = common.fake_mesh()

    def c_ctx(local):
        return lambda: common.both(cspmd.set_current_mesh(mesh),
                                   cspmd.checker.typecheck(local=local))

    ctx = {"plain": contextlib.nullcontext, "cspmd_local": c_ctx(True),
           "cspmd_global": c_ctx(False),
           "spmd_types_global": lambda: common.both(ref.set_current_mesh(mesh),
                                              ref.checker.typecheck(local=False))}
    with ctx["cspmd_global"]():
        w_c = workloads(cspmd, dp, tp)
    with ctx["spmd_types_global"]():
        w_r = workloads(ref, dp, tp)
    work = {"plain": workloads(None, dp, tp), "cspmd_local": w_c, "cspmd_global": w_c,
            "spmd_types_global": w_r}
    res, samples = common.measure_ops(
        work, ctx, IMPLS, args.rounds,
        lambda impl: args.number if not impl.startswith("spmd_types")
        else max(args.number // 20, 20))
    print(f"{'op':12s} {'plain':>8s} {'local':>8s} {'global':>8s} {'ref global':>11s}"
          "  (µs per op, best)")
    for op, d in res.items():
        print(f"{op:12s} {d['plain']:8.2f} {d['cspmd_local']:8.2f} {d['cspmd_global']:8.2f} "
              f"{d['spmd_types_global']:11.2f}")
    common.save("global", {"machine": common.machine(), "rounds": args.rounds,
                           "number": args.number, "best_us": res, "samples_us": samples})


if __name__ == "__main__":
    main()
