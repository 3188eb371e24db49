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

The full training step is measured too, plain vs cspmd: forward +
backward, the gradient all-reduces (tp for the sequence-parallel replicated
parameters, then dp), clipping by the global norm (``clip_grad_norm_``'s two
halves, ``get_total_norm`` and ``clip_grads_with_norm_``, with the shards'
squared norm all-reduced over tp between them: the plain ``clip_grad_norm_``
over tensor-parallel shards is a type error, see docs/training.md) and an
AdamW step, with ``foreach=True`` and with ``fused=True``.  (spmd_types
does not see the optimizer's ops; it is left out of these.)

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

        self.params = [p for b in self.blocks for p in b.parameters()]
        self.opts = {}

    def train_step(self, kind):
        """Forward, backward, gradient all-reduces, clipping, AdamW (``kind``:
        "foreach" or "fused")."""
        spmd, P, R, V = self.mod.spmd, self.mod.P, self.mod.R, self.mod.V
        if kind not in self.opts:
            self.opts[kind] = torch.optim.AdamW(self.params, lr=1e-6, **{kind: True})
        loss = self.step()
        rep, shard = [], []
        for b in self.blocks:
            types = b.param_types()
            for n, p in b.named_parameters():
                replicated = types[n][b.tp] is R
                if replicated:      # sequence parallel: each tp rank saw a shard
                    p.grad = spmd.all_reduce(p.grad, b.tp, src=P, dst=R)
                p.grad = spmd.all_reduce(p.grad, b.dp, src=P, dst=R)
                (rep if replicated else shard).append(p.grad)
        foreach = kind == "foreach"
        tp = self.blocks[0].tp
        sq = torch.nn.utils.get_total_norm(rep, foreach=foreach).square()
        sq = sq + spmd.all_reduce(torch.nn.utils.get_total_norm(shard, foreach=foreach).square(),
                                  tp, src=V, dst=R)
        torch.nn.utils.clip_grads_with_norm_(self.params, 1.0, sq.sqrt(), foreach=foreach)
        self.opts[kind].step()
        return loss

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
           "cspmd": lambda: common.both(cspmd.set_current_mesh(mesh), cspmd.checker.typecheck()),
           "spmd_types": lambda: common.both(ref.set_current_mesh(mesh), ref.checker.typecheck())}
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
                         "reps": reps, "optimizer": measure_optimizer(models, ctx, args)}
    common.save("train", {"machine": common.machine(), "rounds": args.rounds,
                          "threads": torch.get_num_threads(), "sizes": results})


def measure_optimizer(models, ctx, args):
    """ms per full training step (with AdamW foreach / fused), plain vs cspmd."""
    kinds, impls = ["foreach", "fused"], ["plain", "cspmd"]
    reps = {}
    for kind in kinds:
        for impl in impls:
            with ctx[impl]():
                models[impl].train_step(kind)       # warm up, creates the optimizer state
                t0 = time.perf_counter()
                models[impl].train_step(kind)
                dt = time.perf_counter() - t0
            reps[kind] = max(reps.get(kind, 1), int(args.min_time / max(dt, 1e-6)))

    def measure(kind, impl):
        m = models[impl]
        with ctx[impl]():
            return common.per_call_us(lambda: m.train_step(kind), reps[kind], repeat=1) / 1000.0

    samples = common.alternate(kinds, impls, args.rounds, measure)
    out = {}
    for kind in kinds:
        best = {i: min(v) for i, v in samples[kind].items()}
        print(f"  + grad all-reduces, clip, AdamW {kind}: ms per step  plain "
              f"{best['plain']:.3f}  cspmd {best['cspmd']:.3f}  "
              f"cspmd/plain {best['cspmd'] / best['plain']:.3f}x")
        out[kind] = {"best_ms": best, "samples_ms": samples[kind], "reps": reps[kind]}
    return out


if __name__ == "__main__":
    main()
