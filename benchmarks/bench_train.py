"""Training step (forward + backward) of a Megatron-style TP + SP
transformer (examples/megatron_block.py, stacked ``--layers`` times) on a
dp x tp = 2 x 4 mesh on the fake process group: plain vs cspmd checked vs
spmd_types checked, implementations alternating in rounds.

* plain: the cspmd model, parameters unannotated, checker off (its
  collectives run the same c10d functional collectives, unchecked);
* cspmd: the same model, annotated, under cspmd.checker.typecheck();
* spmd_types: the same module source loaded against the reference
  (``import cspmd as spmd`` bound to spmd_types, so its own collectives and
  annotations), under spmd_types' typecheck().

Writes results/train.json.  Not a test.
"""

import argparse
import contextlib
import importlib.util
import os
import sys
import time

import torch

import common

SIZES = {
    "tiny": dict(layers=2, hidden=32, ffn=64, heads=8, batch=2, seq=16),
    "moderate": dict(layers=2, hidden=256, ffn=1024, heads=8, batch=4, seq=128),
}


def load_block_module(lib, tag):
    """examples/megatron_block.py with ``cspmd`` bound to ``lib``."""
    path = os.path.join(common.ROOT, "examples", "megatron_block.py")
    spec = importlib.util.spec_from_file_location(f"megatron_block_{tag}", path)
    mod = importlib.util.module_from_spec(spec)
    saved = sys.modules.get("cspmd")
    sys.modules["cspmd"] = lib
    try:
        spec.loader.exec_module(mod)
    finally:
        if saved is not None:
            sys.modules["cspmd"] = saved
    return mod


class Model:
    def __init__(self, mod, dp, tp, annotate, cfg, sp=True):
        self.mod = mod
        self.blocks = [mod.build_block(dp, tp, sp=sp, hidden=cfg["hidden"], ffn=cfg["ffn"],
                                       heads=cfg["heads"], seed=i, annotate=annotate)
                       for i in range(cfg["layers"])]
        if annotate:
            self.x = mod.make_input(self.blocks[0], batch=cfg["batch"], seq=cfg["seq"])
        else:
            b = self.blocks[0]
            s = cfg["seq"] // b.tp_size if sp else cfg["seq"]
            self.x = torch.randn(cfg["batch"], s, cfg["hidden"])

    def step(self):
        for b in self.blocks:
            for p in b.parameters():
                p.grad = None
        y = self.x
        for b in self.blocks:
            y = b(y)
        loss = self.mod.loss_of(self.blocks[0], y)
        loss.backward()
        return loss


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", choices=list(SIZES), action="append")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--min-time", type=float, default=0.3, help="seconds per measurement")
    for k in SIZES["tiny"]:
        ap.add_argument(f"--{k}", type=int, help=f"override {k} of every size")
    args = ap.parse_args()
    torch.set_num_threads(int(os.environ.get("CSPMD_BENCH_THREADS", "1")))
    import cspmd
    import cspmd.checker
    ref = common.use_reference()
    mesh, dp, tp = common.fake_mesh()
    m_c = load_block_module(cspmd, "cspmd")
    m_r = load_block_module(ref, "ref")

    ctx = {"plain": lambda: contextlib.nullcontext(),
           "cspmd": lambda: _both(cspmd.set_current_mesh(mesh), cspmd.checker.typecheck()),
           "spmd_types": lambda: _both(ref.set_current_mesh(mesh), ref.checker.typecheck())}
    results = {}
    for size in args.size or list(SIZES):
        cfg = dict(SIZES[size])
        for k in cfg:
            if getattr(args, k) is not None:
                cfg[k] = getattr(args, k)
        models = {"plain": Model(m_c, dp, tp, False, cfg),
                  "cspmd": Model(m_c, dp, tp, True, cfg),
                  "spmd_types": Model(m_r, dp, tp, True, cfg)}
        reps = {}
        for impl, m in models.items():       # warm up, and size each measurement
            with ctx[impl]():
                m.step()
                t0 = time.perf_counter()
                m.step()
                dt = time.perf_counter() - t0
            reps[impl] = max(1, int(args.min_time / max(dt, 1e-6)))
        reps = {i: max(reps["plain"] // 20, r) if i == "spmd_types" else reps["plain"]
                for i, r in reps.items()}

        def measure(_, impl):
            m = models[impl]
            with ctx[impl]():
                return common.per_call_us(m.step, reps[impl], repeat=1) / 1000.0

        samples = common.alternate(["step"], list(models), args.rounds, measure)["step"]
        best = {i: min(v) for i, v in samples.items()}
        print(f"{size} {cfg}: ms per step  " +
              "  ".join(f"{i} {v:.3f}" for i, v in best.items()) +
              f"  cspmd/plain {best['cspmd'] / best['plain']:.3f}x"
              f"  spmd_types/plain {best['spmd_types'] / best['plain']:.3f}x")
        results[size] = {"config": cfg, "best_ms": best, "samples_ms": samples,
                         "reps": reps}
    common.save("train", {"machine": common.machine(), "rounds": args.rounds,
                          "threads": torch.get_num_threads(), "sizes": results})


@contextlib.contextmanager
def _both(a, b):
    with a, b:
        yield


if __name__ == "__main__":
    main()
