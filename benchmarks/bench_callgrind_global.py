"""Instructions per op in global mode, end to end through Python and the
dispatcher: plain, checked in local mode and checked in global mode
(``typecheck(local=False)``), counted by callgrind in one process on the
small tensors of bench_global.py sharded on tp.

Run under ``valgrind --tool=callgrind --instr-atstart=no
--callgrind-out-file=DIR/cg python benchmarks/bench_callgrind_global.py N
DIR/cg``: each loop of N calls is bracketed by zero/dump client requests
(build/benchmarks/libcg_ctl.so); instructions per op = (Ir(loop) -
Ir(empty loop)) / N.  ``callgrind_annotate DIR/cg.<k>`` on a ``*.global``
dump shows where global mode's instructions go.  Prints a table; writes
nothing.
"""

import torch

import common


def main():
    torch.set_num_threads(1)
    import cspmd
    import cspmd.checker
    cg = common.Callgrind(default_n=2000)
    mesh, dp, tp = common.fake_mesh()
    R, S = cspmd.R, cspmd.S

    with cspmd.set_current_mesh(mesh), cspmd.checker.typecheck(local=False):
        a = cspmd.assert_type(torch.randn(8, 8), {dp: R, tp: S(0)})
        b = cspmd.assert_type(torch.randn(8, 8), {dp: R, tp: S(0)})
        w = cspmd.assert_type(torch.randn(8, 8), {dp: R, tp: R})
    fns = {"empty": lambda: None, "add": lambda: torch.add(a, b),
           "mm": lambda: torch.mm(a, w), "view": lambda: a.view(64),
           "sum": lambda: a.sum(0)}
    modes = {"plain": None, "local": True, "global": False}

    with cg:
        for mode, local in modes.items():
            for name, f in fns.items():
                if mode != "plain" and name == "empty":
                    continue
                with cspmd.set_current_mesh(mesh):
                    ctx = common.nothing() if local is None else cspmd.checker.typecheck(local=local)
                    with ctx:
                        cg.count(f"{name}.{mode}", f, warmup=200)
    totals, n = cg.totals(), cg.n
    if totals is None:
        return
    base = totals["empty.plain"]
    print(f"{'op':6s} {'plain':>8s} {'local-plain':>12s} {'global-local':>13s}")
    for op in fns:
        if op == "empty":
            continue
        per = {mode: (totals[f"{op}.{mode}"] - base) / n for mode in modes}
        print(f"{op:6s} {per['plain']:8.0f} {per['local'] - per['plain']:12.0f} "
              f"{per['global'] - per['local']:13.0f}")


if __name__ == "__main__":
    main()
