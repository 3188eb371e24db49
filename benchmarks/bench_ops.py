"""Per-op overhead on small CPU tensors: plain eager vs cspmd checked vs the
reference spmd_types checked, in one process, implementations alternating
in rounds.  Writes results/ops.json.  Not a test.

The column cspmd_registered is cspmd checked with one function registered
with register_no_typecheck that is not on the stack: each op then walks the
Python stack (registration is undone after each measurement, so the cspmd
column runs with nothing registered, as a program that registers nothing).

    python benchmarks/bench_ops.py [--rounds N] [--number N]
"""

import argparse
import contextlib

import torch
import torch.nn.functional as F

import common

IMPLS = ["plain", "cspmd", "cspmd_registered", "spmd_types"]


def workloads(lib, dp, tp):
    """{op: fn} on tensors annotated with ``lib`` (None: plain tensors).
    Each implementation gets its own tensors: the libraries store types
    differently."""
    g = torch.Generator().manual_seed(0)

    def t(*shape, tp_type="V", dp_type="R", ints=None):
        x = (torch.randint(0, ints, shape, generator=g) if ints
             else torch.randn(*shape, generator=g))
        if lib is not None:
            lib.assert_type(x, {dp: getattr(lib, dp_type), tp: getattr(lib, tp_type)})
        return x

    a, b = t(8), t(8)
    m1, m2, bias = t(8, 8), t(8, 8, tp_type="R"), t(8)
    w, bw = t(8, tp_type="R"), t(8, tp_type="R")
    q, k, v = t(1, 2, 8, 4), t(1, 2, 8, 4), t(1, 2, 8, 4)
    idx, emb = t(8, tp_type="R", ints=16), t(16, 8)
    return {
        "add": lambda: torch.add(a, b),
        "mul": lambda: torch.mul(a, b),
        "div_scalar": lambda: a / 2.0,
        "mm": lambda: torch.mm(m1, m2),
        "addmm": lambda: torch.addmm(bias, m1, m2),
        "view": lambda: m1.view(64),
        "reshape": lambda: m1.reshape(4, 16),
        "transpose": lambda: m1.t(),
        "sum": lambda: a.sum(),
        "mean": lambda: m1.mean(-1),
        "cat": lambda: torch.cat([a, b]),
        "layer_norm": lambda: F.layer_norm(m1, (8,), w, bw),
        "softmax": lambda: torch.softmax(m1, -1),
        "gelu": lambda: F.gelu(a),
        "sdpa": lambda: F.scaled_dot_product_attention(q, k, v),
        "embedding": lambda: F.embedding(idx, emb),
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

    with cspmd.set_current_mesh(mesh), cspmd.checker.typecheck():
        w_c = workloads(cspmd, dp, tp)
    with ref.set_current_mesh(mesh), ref.checker.typecheck():
        w_r = workloads(ref, dp, tp)
    w_p = workloads(None, dp, tp)
    work = {"plain": w_p, "cspmd": w_c, "cspmd_registered": w_c, "spmd_types": w_r}
    ctx = {"plain": contextlib.nullcontext,
           "cspmd": lambda: common.both(cspmd.set_current_mesh(mesh), cspmd.checker.typecheck()),
           "cspmd_registered": lambda: common.both(registered(), common.both(
               cspmd.set_current_mesh(mesh), cspmd.checker.typecheck())),
           "spmd_types": lambda: common.both(ref.set_current_mesh(mesh), ref.checker.typecheck())}
    @contextlib.contextmanager
    def registered():
        from cspmd._lib import ops

        def never_called():
            pass

        cspmd.register_no_typecheck(never_called)
        try:
            yield
        finally:
            ops.unchecked_code_clear()
            cspmd.checker._registered_codes.clear()

    res, samples = common.measure_ops(
        work, ctx, IMPLS, args.rounds,
        lambda impl: args.number if impl != "spmd_types" else max(args.number // 8, 50))
    print(f"{'op':12s} {'plain':>8s} {'cspmd':>8s} {'registered':>10s} {'spmd_types':>10s}"
          "  (µs per op, best)")
    for op, d in res.items():
        print(f"{op:12s} {d['plain']:8.2f} {d['cspmd']:8.2f} {d['cspmd_registered']:10.2f} "
              f"{d['spmd_types']:10.2f}")
    common.save("ops", {"machine": common.machine(), "rounds": args.rounds,
                        "number": args.number, "best_us": res, "samples_us": samples})


if __name__ == "__main__":
    main()
