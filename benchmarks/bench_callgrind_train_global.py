"""Instructions per training step of bench_train_global.py's 2-D MLP
(forward, collectives, backward, AdamW), unchecked vs local mode vs global
mode, counted by callgrind in one process: a figure the machine's load does
not move, unlike the times of bench_train_global.py.

Run under ``valgrind --tool=callgrind --instr-atstart=no
--callgrind-out-file=DIR/cg python benchmarks/bench_callgrind_train_global.py
N DIR/cg``: each loop of N steps is bracketed by zero/dump client requests
(build/benchmarks/libcg_ctl.so).  Prints a table; writes nothing.
"""

import ctypes
import os
import sys

import torch

import common
from bench_train_global import IMPLS, SIZES, make_step


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    out_prefix = sys.argv[2] if len(sys.argv) > 2 else None
    torch.set_num_threads(1)
    import cspmd
    import cspmd.checker
    cg = ctypes.CDLL(os.path.join(common.BUILD, "benchmarks", "libcg_ctl.so"))
    mesh, dp, tp = common.fake_mesh()
    ctx = {"unchecked": common.nothing,
           "local": lambda: common.both(cspmd.set_current_mesh(mesh),
                                        cspmd.checker.typecheck()),
           "global": lambda: common.both(cspmd.set_current_mesh(mesh),
                                         cspmd.checker.typecheck(local=False))}
    cg.cg_start()
    for size, cfg in SIZES.items():
        for impl in IMPLS:
            step = make_step(dp, tp, cfg)
            with ctx[impl]():
                for _ in range(3):      # warm up
                    step()
                cg.cg_zero()
                for _ in range(n):
                    step()
                cg.cg_dump(f"{size}.{impl}".encode())
    cg.cg_stop()
    if out_prefix is None:
        return
    totals = common.callgrind_totals(out_prefix)
    print(f"{'size':10s} {'unchecked':>12s} {'local':>12s} {'global':>12s} {'local/unch':>11s} "
          f"{'global/unch':>12s}  (instructions per step)")
    for size in SIZES:
        u, l, g = (totals[f"{size}.{i}"] / n for i in IMPLS)
        print(f"{size:10s} {u:12.0f} {l:12.0f} {g:12.0f} {l / u:10.3f}x {g / u:11.3f}x")


if __name__ == "__main__":
    main()
