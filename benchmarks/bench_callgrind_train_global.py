"""Instructions per training step of bench_train_global.py's 2-D MLP
(forward, collectives, backward, AdamW), unchecked vs local mode vs global
mode, counted by callgrind in one process: a figure the machine's load does
not move, unlike the times of bench_train_global.py.

Run under ``valgrind --tool=callgrind --instr-atstart=no
--callgrind-out-file=DIR/cg python benchmarks/bench_callgrind_train_global.py
N DIR/cg``: each loop of N steps is bracketed by zero/dump client requests
(build/benchmarks/libcg_ctl.so).  Prints a table; writes nothing.
"""

import torch

import common
from bench_train_global import IMPLS, SIZES, contexts, make_step


def main():
    torch.set_num_threads(1)
    cg = common.Callgrind(default_n=10)
    mesh, dp, tp = common.fake_mesh()
    ctx = contexts(mesh)
    with cg:
        for size, cfg in SIZES.items():
            for impl in IMPLS:
                step = make_step(dp, tp, cfg)
                with ctx[impl]():
                    cg.count(f"{size}.{impl}", step, warmup=3)
    totals, n = cg.totals(), cg.n
    if totals is None:
        return
    print(f"{'size':10s} {'unchecked':>12s} {'local':>12s} {'global':>12s} {'local/unch':>11s} "
          f"{'global/unch':>12s}  (instructions per step)")
    for size in SIZES:
        u, l, g = (totals[f"{size}.{i}"] / n for i in IMPLS)
        print(f"{size:10s} {u:12.0f} {l:12.0f} {g:12.0f} {l / u:10.3f}x {g / u:11.3f}x")


if __name__ == "__main__":
    main()
