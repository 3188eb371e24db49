"""Heap calls per op in steady state: plain vs cspmd-checked.

Run with LD_PRELOAD=build/benchmarks/libmalloc_count.so (benchmarks/run
does): the preloaded counter wraps malloc/calloc/realloc/free/memalign/
posix_memalign/aligned_alloc/valloc (operator new/delete go through them)
and counts per thread; this script reads the counters through ctypes around
N calls of each op, after a warm-up, so every figure is an exact count per
op.  Writes results/alloc.json.
"""

import ctypes
import sys

import torch

import common
from bench_ops import workloads


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    torch.set_num_threads(1)
    try:
        mc = ctypes.CDLL(None)
        mc.mc_allocs.restype = ctypes.c_uint64
        mc.mc_frees.restype = ctypes.c_uint64
    except AttributeError:
        sys.exit("bench_alloc.py: run with LD_PRELOAD=build/benchmarks/libmalloc_count.so")
    import cspmd
    import cspmd.checker
    mesh, dp, tp = common.fake_mesh()
    with cspmd.set_current_mesh(mesh), cspmd.checker.typecheck():
        w_c = workloads(cspmd, dp, tp)
    w_p = workloads(None, dp, tp)
    # In place: no fresh output, so no ExtraMeta -- what remains is torch's
    # boxing of the call for the boxed kernel (its Stack vector).
    for w, lib in ((w_c, cspmd), (w_p, None)):
        x, y = torch.randn(8), torch.randn(8)
        if lib is not None:
            with cspmd.set_current_mesh(mesh), cspmd.checker.typecheck():
                for t in (x, y):
                    cspmd.assert_type(t, {dp: cspmd.R, tp: cspmd.V})
        w["add_ (in place)"] = lambda x=x, y=y: x.add_(y)

    def count(fn, k):
        for _ in range(100):       # warm up: memo, rule cache, type metas
            fn()
        a0, f0 = mc.mc_allocs(), mc.mc_frees()
        for _ in range(k):
            fn()
        return (mc.mc_allocs() - a0) / k, (mc.mc_frees() - f0) / k

    res = {}
    for op in w_p:
        with cspmd.set_current_mesh(mesh):
            plain = count(w_p[op], n)
            with cspmd.checker.typecheck():
                checked = count(w_c[op], n)
        res[op] = {"plain_allocs": plain[0], "checked_allocs": checked[0],
                   "plain_frees": plain[1], "checked_frees": checked[1],
                   "extra_allocs": checked[0] - plain[0]}
        print(f"{op:12s} allocs/op plain {plain[0]:6.2f} checked {checked[0]:6.2f} "
              f"(+{checked[0] - plain[0]:.2f}); frees/op plain {plain[1]:6.2f} "
              f"checked {checked[1]:6.2f}")
    common.save("alloc", {"n": n, "per_op": res})


if __name__ == "__main__":
    main()
