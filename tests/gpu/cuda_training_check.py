"""cspmd on CUDA tensors, checked on the fake process group.  Run by run.sh.

The CPU tests never see CUDA's kernels: sdpa runs other aten ops there
(flash / efficient / cuDNN attention instead of the CPU flash kernel),
autocast casts on another device, AdamW(fused=True) runs CUDA's fused step.
This script runs on one GPU, 8 fake ranks in a (dp 2 x tp 4) mesh:

1. The training-loop corpus (tests/python/training_corpus.py) with its
   tensors on CUDA: every loop correct (no error) and every planted bug
   caught at its line.
2. Global mode: causal self-attention through
   F.scaled_dot_product_attention, forward and backward, in float32,
   bfloat16 and float16 (so torch picks each of its CUDA attention kernels);
   the output and every weight gradient carry the partition specs the CPU
   run gives -- or, for a CUDA attention kernel that docs/limits.md lists
   as having no shard rule yet, an SpmdTypeError naming that kernel (the
   documented limit; anything else fails).
3. Per-op overhead on CUDA tensors: microseconds per op (host side: the
   launch, which is what checking adds to), plain vs typecheck().

Prints every failure and exits 1 if there was one.  ``--cpu-dry-run`` runs
parts 1-2 on CPU tensors (only to develop this script without a GPU).
"""

import os
import sys
import time
import traceback

import torch
import torch.distributed as dist
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
DRY_RUN = "--cpu-dry-run" in sys.argv[1:]
DEV = torch.device("cpu" if DRY_RUN else "cuda")
os.environ["CSPMD_TEST_DEVICE"] = DEV.type

import cspmd as spmd  # noqa: E402
import cspmd.checker  # noqa: E402
from cspmd import I, P, R, S  # noqa: E402

FAILURES = []


def fail(what, msg):
    FAILURES.append(f"{what}: {msg}")
    print(f"FAIL {what}: {msg}", flush=True)


def corpus():
    import test_training_corpus as ttc
    import training_corpus

    assert training_corpus.DEVICE == DEV
    for ws in (2, 4):
        res = ttc.fake_catalogue(ws)
        if len(res) != ttc.expected_cases(ws):
            fail(f"corpus ws={ws}", f"{len(res)} cases, expected {ttc.expected_cases(ws)}")
        for case, msg in res.items():
            if msg:
                fail(f"corpus ws={ws} {case}", msg)
        print(f"corpus ws={ws}: {sum(m is None for m in res.values())}/{len(res)} cases passed",
              flush=True)


def global_attention(mesh, dtype, sequence_parallel):
    """Returns {what: partition spec} of the block's output and gradients."""
    dp, tp = mesh.get_group("dp"), mesh.get_group("tp")
    b, t, d, heads_local, hd = 2, 8, 16, 2, 4
    dev = DEV
    out = {}
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck(local=False):
        if sequence_parallel:
            xl = spmd.assert_type(torch.randn(b, t // 4, d, device=dev, dtype=dtype),
                                  {dp: S(0), tp: S(1)})
            x = spmd.all_gather(xl, tp, src=S(1), dst=R)
        else:
            x = spmd.assert_type(torch.randn(b, t, d, device=dev, dtype=dtype), {dp: S(0), tp: R})
        ws = {n: spmd.assert_type(torch.randn(d, heads_local * hd, device=dev, dtype=dtype)
                                  .requires_grad_(), {dp: R, tp: S(1)})
              for n in ("wq", "wk", "wv")}
        ws["wo"] = spmd.assert_type(torch.randn(heads_local * hd, d, device=dev, dtype=dtype)
                                    .requires_grad_(), {dp: R, tp: S(0)})

        def split(w):
            return (x @ w).view(b, t, heads_local, hd).transpose(1, 2)

        o = F.scaled_dot_product_attention(split(ws["wq"]), split(ws["wk"]), split(ws["wv"]),
                                           is_causal=True)
        o = o.transpose(1, 2).reshape(b, t, heads_local * hd)
        out["o"] = str(spmd.get_partition_spec(o))
        y = o @ ws["wo"]
        if sequence_parallel:
            y = spmd.reduce_scatter(y, tp, src=P, dst=S(1))
        else:
            y = spmd.all_reduce(y, tp, src=P, dst=I)
        out["y"] = str(spmd.get_partition_spec(y))
        part = (y.float() * y.float()).sum()
        if sequence_parallel:
            part = spmd.all_reduce(part, tp, src=P, dst=I)
        spmd.all_reduce(part, dp, src=P, dst=I).backward()
        for n, w in ws.items():
            out[n + ".grad"] = str(spmd.get_partition_spec(w.grad))
    return out


# CUDA attention kernels without a global-mode shard rule (docs/limits.md).
KNOWN_LIMIT_OPS = ("aten::_scaled_dot_product_flash_attention",
                   "aten::_scaled_dot_product_cudnn_attention",
                   "aten::_scaled_dot_product_efficient_attention_backward",
                   "aten::_flash_attention_", "aten::_efficient_attention_")


def global_mode(mesh):
    want = {"o": "PartitionSpec(mesh_dp, None, mesh_tp)",
            "wq.grad": "PartitionSpec(None, mesh_tp)", "wk.grad": "PartitionSpec(None, mesh_tp)",
            "wv.grad": "PartitionSpec(None, mesh_tp)", "wo.grad": "PartitionSpec(mesh_tp, None)"}
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        for sp in (False, True):
            what = f"global attention {dtype} {'sequence-parallel' if sp else 'all_reduce'}"
            try:
                got = global_attention(mesh, dtype, sp)
            except spmd.SpmdTypeError as e:
                named = [op for op in KNOWN_LIMIT_OPS if f"In {op}" in str(e)]
                if named:
                    print(f"{what}: refused, a documented limit ({named[0]}): "
                          f"{str(e).splitlines()[0][:120]}", flush=True)
                else:
                    fail(what, f"SpmdTypeError: {e}\n{traceback.format_exc(limit=4)}")
                continue
            except Exception as e:  # noqa: BLE001 -- reported, then the next case
                fail(what, f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=4)}")
                continue
            want_y = ("PartitionSpec(mesh_dp, mesh_tp, None)" if sp
                      else "PartitionSpec(mesh_dp, None, None)")
            for k, v in dict(want, y=want_y).items():
                if got.get(k) != v:
                    fail(what, f"{k} is {got.get(k)}, expected {v}")
            print(f"{what}: ok", flush=True)


def overhead(mesh):
    dp, tp = mesh.get_group("dp"), mesh.get_group("tp")
    dev = torch.device("cuda")
    a = torch.randn(64, 64, device=dev)
    bm = torch.randn(64, 64, device=dev)
    q = torch.randn(2, 4, 16, 8, device=dev, dtype=torch.bfloat16)
    cases = {"add": lambda: a + bm, "mm": lambda: a @ bm,
             "sdpa": lambda: F.scaled_dot_product_attention(q, q, q)}

    def per_op(fn, n=2000):
        for _ in range(50):
            fn()
        torch.cuda.synchronize()
        best = float("inf")
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            torch.cuda.synchronize()
            best = min(best, (time.perf_counter() - t0) / n * 1e6)
        return best

    plain = {k: per_op(f) for k, f in cases.items()}
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck():
        for t in (a, bm, q):
            spmd.assert_type(t, {dp: R, tp: R})
        checked = {k: per_op(f) for k, f in cases.items()}
    for k in cases:
        print(f"overhead {k}: plain {plain[k]:.2f} us, cspmd {checked[k]:.2f} us "
              f"(+{checked[k] - plain[k]:.2f})", flush=True)


def main():
    if not DRY_RUN and not torch.cuda.is_available():
        print("FAIL: CUDA is not available; this check needs a GPU", flush=True)
        sys.exit(1)
    from torch.distributed.device_mesh import init_device_mesh

    dist.init_process_group(backend="fake", rank=0, world_size=8)
    mesh = init_device_mesh("cpu", (2, 4), mesh_dim_names=("dp", "tp"))
    parts = [corpus, lambda: global_mode(mesh)] + ([] if DRY_RUN else [lambda: overhead(mesh)])
    for part in parts:
        try:
            part()
        except Exception as e:  # noqa: BLE001
            fail("part", f"{type(e).__name__}: {e}\n{traceback.format_exc()}")
    dist.destroy_process_group()
    if FAILURES:
        print(f"{len(FAILURES)} failure(s)", flush=True)
        sys.exit(1)
    print("OK", flush=True)


if __name__ == "__main__":
    main()
