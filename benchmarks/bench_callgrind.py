"""Instructions per op, end to end through Python and the dispatcher:
plain vs cspmd-checked, counted by callgrind in one process.

Run under ``valgrind --tool=callgrind --instr-atstart=no`` (benchmarks/run
does): instrumentation starts after the imports; each loop of N calls is
bracketed by zero/dump client requests (build/benchmarks/libcg_ctl.so), and
instructions per op = (Ir(loop) - Ir(empty loop)) / N.  Writes
results/callgrind.json (needs the dump files: --callgrind-out-file=DIR/cg).
"""

import sys

import torch
import torch.nn.functional as F

import common

OPS = ["add", "view", "layer_norm"]


def main():
    torch.set_num_threads(1)
    import cspmd
    import cspmd.checker
    cg = common.Callgrind(default_n=2000)
    mesh, dp, tp = common.fake_mesh()
    R, V = cspmd.R, cspmd.V

    def typed(*shape, t=V):
        x = torch.randn(*shape)
        cspmd.assert_type(x, {dp: R, tp: t})
        return x

    with cspmd.set_current_mesh(mesh), cspmd.checker.typecheck():
        a, b, m, w = typed(8), typed(8), typed(8, 8), typed(8, t=R)
    fns = {"empty": lambda: None, "add": lambda: torch.add(a, b),
           "view": lambda: m.view(64),
           "layer_norm": lambda: F.layer_norm(m, (8,), w, w)}

    with cg:
        for checked in (False, True):
            for name, f in fns.items():
                if checked and name == "empty":
                    continue
                tag = f"{name}.{'checked' if checked else 'plain'}"
                with cspmd.set_current_mesh(mesh):
                    with cspmd.checker.typecheck() if checked else common.nothing():
                        cg.count(tag, f, warmup=200)
    totals, n = cg.totals(), cg.n
    if totals is None:
        return
    base = totals["empty.plain"]
    res = {}
    for op in OPS:
        plain = (totals[f"{op}.plain"] - base) / n
        checked = (totals[f"{op}.checked"] - base) / n
        res[op] = {"plain": plain, "checked": checked, "overhead": checked - plain}
        print(f"{op:12s} plain {plain:9.0f}  checked {checked:9.0f}  "
              f"overhead {checked - plain:7.0f} instructions/op")
    infer = int(sys.argv[3]) if len(sys.argv) > 3 and sys.argv[3].isdigit() else None
    common.save("callgrind", {"n": n, "instructions_per_op": res, "infer": infer})


if __name__ == "__main__":
    main()
