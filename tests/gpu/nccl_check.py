"""cspmd's collectives on one CUDA GPU with NCCL (world size 1).  Run by run.sh.

1. Every collective (broadcast included) and conversion on CUDA tensors: the result and
   the input gradient against what a one-rank group must give (a sum over one
   rank is the input, a gather of one piece is that piece, ...).  Results must
   stay on the GPU, be fresh tensors where the reference returns fresh ones, and carry the dtypes
   the options ask for.
2. The same calls once more under ``typecheck()`` (a one-rank axis is trivial,
   so checking must not change anything).
3. Timing: ``spmd.all_reduce`` vs ``torch.ops._c10d_functional.all_reduce`` +
   ``wait_tensor`` on a 1M-element float32 tensor: microseconds per call,
   median of 200 calls, each bracketed by ``torch.cuda.synchronize()``.

Exits with status 1 and a FAIL line on the first problem; CUDA or NCCL
missing is a failure, not a skip.  ``--cpu-dry-run`` runs parts 1-2 with
Gloo on CPU instead (only to develop this script on a machine without a GPU).
"""

import argparse
import statistics
import sys
import time
import traceback

import torch
import torch.distributed as dist


def fail(msg):
    print(f"FAIL: {msg}", flush=True)
    sys.exit(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cpu-dry-run", action="store_true")
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--numel", type=int, default=1 << 20)
    args = ap.parse_args()

    if args.cpu_dry_run:
        device, backend = torch.device("cpu"), "gloo"
    else:
        if not torch.cuda.is_available():
            fail(f"CUDA is not available (torch {torch.__version__}, "
                 f"built with CUDA {torch.version.cuda}); this check needs a GPU")
        if not dist.is_nccl_available():
            fail("this torch build has no NCCL")
        device, backend = torch.device("cuda", 0), "nccl"
        torch.cuda.set_device(device)
        print(f"device: {torch.cuda.get_device_name(device)}, torch {torch.__version__}, "
              f"CUDA {torch.version.cuda}, NCCL {torch.cuda.nccl.version()}", flush=True)

    import cspmd as spmd
    import cspmd.checker  # noqa: F401

    dist.init_process_group(backend, init_method="tcp://127.0.0.1:29533", rank=0, world_size=1,
                            device_id=device if device.type == "cuda" else None)
    try:
        pg = dist.group.WORLD
        n_ok = run_checks(spmd, pg, device, typed=False)
        n_ok += run_checks(spmd, pg, device, typed=True)
        print(f"collectives: {n_ok} checks passed on {device}", flush=True)
        backward_on_device(spmd, device)
        if device.type == "cuda":
            timing(spmd, pg, device, args.iters, args.numel)
    finally:
        dist.destroy_process_group()
    print("OK", flush=True)


def run_checks(spmd, pg, device, typed):
    from cspmd import I, P, R, S, V

    def T(*shape):
        n = 1
        for s in shape:
            n *= s
        return torch.arange(n, dtype=torch.float32, device=device).reshape(shape) + 1.0

    def G(shape):
        n = 1
        for s in shape:
            n *= s
        return torch.arange(n, dtype=torch.float32, device=device).reshape(shape) * 3.0 + 7.0

    ident = lambda t: t  # noqa: E731
    add0 = lambda t: t.unsqueeze(0)  # noqa: E731
    sel0 = lambda t: t.select(0, 0)  # noqa: E731
    # name: (input shape, call, forward(x), backward(g))
    cases = {
        "all_reduce P->R": ((4, 3), lambda x: spmd.all_reduce(x, pg, src=P, dst=R), ident, ident),
        "all_reduce P->I": ((4, 3), lambda x: spmd.all_reduce(x, pg, src=P, dst=I), ident, ident),
        "all_reduce V->R": ((4, 3), lambda x: spmd.all_reduce(x, pg, src=V, dst=R), ident, ident),
        "all_gather V->R": ((4, 3), lambda x: spmd.all_gather(x, pg, src=V, dst=R), add0, sel0),
        "all_gather V->I dim1": ((4, 3), lambda x: spmd.all_gather(
            x, pg, src=V, dst=I, gather_dim=1), lambda t: t.unsqueeze(1),
            lambda g: g.select(1, 0)),
        "all_gather S(0)->R": ((4, 3), lambda x: spmd.all_gather(x, pg, src=S(0), dst=R),
                               ident, ident),
        "all_gather S(1)->I": ((4, 3), lambda x: spmd.all_gather(x, pg, src=S(1), dst=I),
                               ident, ident),
        "all_gather S(0)->R uneven": ((4, 3), lambda x: spmd.all_gather(
            x, pg, src=S(0), dst=R, split_sizes=[4]), ident, ident),
        "reduce_scatter P->V": ((1, 3), lambda x: spmd.reduce_scatter(x, pg, src=P, dst=V),
                                sel0, add0),
        "reduce_scatter P->S(0)": ((4, 3), lambda x: spmd.reduce_scatter(
            x, pg, src=P, dst=S(0)), ident, ident),
        "reduce_scatter P->S(1)": ((4, 3), lambda x: spmd.reduce_scatter(
            x, pg, src=P, dst=S(1)), ident, ident),
        "reduce_scatter P->S(0) uneven": ((4, 3), lambda x: spmd.reduce_scatter(
            x, pg, src=P, dst=S(0), split_sizes=[4]), ident, ident),
        "all_to_all V->V": ((1, 3), lambda x: spmd.all_to_all(x, pg, src=V, dst=V), ident, ident),
        "all_to_all S(0)->S(1)": ((4, 3), lambda x: spmd.all_to_all(x, pg, src=S(0), dst=S(1)),
                                  ident, ident),
        "all_to_all S(1)->V": ((4, 3), lambda x: spmd.all_to_all(x, pg, src=S(1), dst=V),
                               ident, ident),
        "all_to_all S(0)->S(0) uneven": ((4, 3), lambda x: spmd.all_to_all(
            x, pg, src=S(0), dst=S(0), input_split_sizes=[4], output_split_sizes=[4]),
            ident, ident),
        "broadcast V->R": ((4, 3), lambda x: spmd.broadcast(x, pg, src=V, dst=R), ident, ident),
        "broadcast V->I": ((4, 3), lambda x: spmd.broadcast(x, pg, src=V, dst=I), ident, ident),
        "reinterpret V->P": ((4, 3), lambda x: spmd.reinterpret(x, pg, src=V, dst=P),
                             ident, ident),
        "reinterpret R->V": ((4, 3), lambda x: spmd.reinterpret(
            x, pg, src=R, dst=V, expert_mode=True), ident, ident),
        "reinterpret I->P": ((4, 3), lambda x: spmd.reinterpret(x, pg, src=I, dst=P),
                             ident, ident),
        "convert I->R": ((4, 3), lambda x: spmd.convert(x, pg, src=I, dst=R), ident, ident),
        "convert R->V": ((1, 3), lambda x: spmd.convert(x, pg, src=R, dst=V), sel0, add0),
        "convert R->S(1)": ((4, 3), lambda x: spmd.convert(x, pg, src=R, dst=S(1)),
                            ident, ident),
        "convert I->S(0)": ((4, 3), lambda x: spmd.convert(x, pg, src=I, dst=S(0)),
                            ident, ident),
        "convert R->P": ((4, 3), lambda x: spmd.convert(x, pg, src=R, dst=P), ident, ident),
        "convert V->P": ((4, 3), lambda x: spmd.convert(
            x, pg, src=V, dst=P, expert_mode=True), add0, sel0),
        "convert S(0)->P": ((4, 3), lambda x: spmd.convert(
            x, pg, src=S(0), dst=P, expert_mode=True), ident, ident),
        "redistribute S(0)->R": ((4, 3), lambda x: spmd.redistribute(x, pg, src=S(0), dst=R),
                                 ident, ident),
        "redistribute P->S(1)": ((4, 3), lambda x: spmd.redistribute(x, pg, src=P, dst=S(1)),
                                 ident, ident),
        "redistribute S(0)->S(1)": ((4, 3), lambda x: spmd.redistribute(
            x, pg, src=S(0), dst=S(1)), ident, ident),
        "shard R->S(0)": ((4, 3), lambda x: spmd.shard(x, pg, src=R, dst=S(0)), ident, ident),
        "unshard S(1)->R": ((4, 3), lambda x: spmd.unshard(x, pg, src=S(1), dst=R),
                            ident, ident),
        "invariant_to_replicate": ((4, 3), lambda x: spmd.invariant_to_replicate(x, pg),
                                   ident, ident),
    }
    ctx = spmd.checker.typecheck if typed else spmd.no_typecheck
    tag = "typed" if typed else "plain"
    n = 0
    for name, (shape, call, fwd, bwd) in cases.items():
        try:
            x = T(*shape).requires_grad_()
            with ctx():
                y = call(x)
            want = fwd(x.detach())
            check(y.device == device, f"result on {y.device}")
            check(y.shape == want.shape, f"shape {tuple(y.shape)} != {tuple(want.shape)}")
            check(torch.equal(y.detach(), want), f"forward {y} != {want}")
            g = G(tuple(y.shape))
            with ctx():
                y.backward(g)
            check(x.grad is not None, "no gradient")
            check(x.grad.device == device, f"gradient on {x.grad.device}")
            check(torch.equal(x.grad, bwd(g)), f"backward {x.grad} != {bwd(g)}")
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            fail(f"[{tag}] {name}: {type(e).__name__}: {e}")
        n += 1

    # Fresh results, dtype options, in-place.
    try:
        x = T(4, 3)
        y = spmd.all_reduce(x, pg, src=P, dst=R)
        check(y.data_ptr() != x.data_ptr(), "all_reduce (not inplace) aliases its input")
        z = spmd.all_reduce(x, pg, src=P, dst=R, inplace=True)
        check(z is x, "inplace all_reduce did not return its input")
        w = spmd.all_gather(x, pg, src=S(0), dst=R, op_dtype=torch.bfloat16)
        check(w.dtype == torch.bfloat16 and w.device == device, f"op_dtype: {w.dtype}")
        v = spmd.all_reduce(x, pg, src=P, dst=I, out_dtype=torch.float64)
        check(v.dtype == torch.float64 and torch.equal(v, x.double()), "out_dtype")
        xb = T(4, 3).bfloat16().requires_grad_()
        yb = spmd.all_reduce(xb, pg, src=P, dst=R, backward_options={"op_dtype": torch.float32})
        yb.backward(torch.ones_like(yb))
        check(xb.grad.dtype == torch.bfloat16, f"gradient dtype {xb.grad.dtype}")
    except Exception as e:  # noqa: BLE001
        traceback.print_exc()
        fail(f"[{tag}] options: {type(e).__name__}: {e}")
    return n + 1


def backward_on_device(spmd, device):
    """A checked backward on the device: on CUDA the autograd engine runs it
    on its device thread, which has the dispatch keys captured at backward()
    but none of the checking thread's own state.  The gradient must still
    be typed (the dual of its weight's type), and a type error in backward
    must still be raised."""
    from cspmd import P, R, V
    from cspmd.checker import typecheck
    tp = spmd.MeshAxis.of(4, 1)  # a layout is enough: no communication here
    w = spmd.assert_type(torch.randn(8, 8, device=device, requires_grad=True), {tp: R})
    x = spmd.assert_type(torch.randn(4, 8, device=device), {tp: V})
    seed = spmd.assert_type(torch.ones((), device=device), {tp: V})  # the gradient of a V sum
    with spmd.set_current_mesh({"tp": tp}), typecheck():
        y = torch.relu(x @ w).sum()  # V: backward with its gradient, typed V
        y.backward(seed)
    got = {repr(a): t.name for a, t in spmd.get_local_type(w.grad).items()}
    check(got == {repr(tp): "P"}, f"gradient type on {device}: {got}, expected P")

    class Bad(torch.autograd.Function):  # backward feeds a P tensor into relu
        @staticmethod
        def forward(ctx, t):
            return t.clone()

        @staticmethod
        def backward(ctx, g):
            p = spmd.assert_type(torch.ones_like(g), {tp: P})
            return torch.relu(p) * g

    z = spmd.assert_type(torch.randn(4, device=device, requires_grad=True), {tp: V})
    seed = spmd.assert_type(torch.ones((), device=device), {tp: V})
    raised = False
    with spmd.set_current_mesh({"tp": tp}), typecheck():
        out = Bad.apply(z).sum()
        try:
            out.backward(seed)
        except spmd.SpmdTypeError as e:
            raised = "during backward" in str(e)
    check(raised, f"a type error in backward on {device} was not raised")
    print(f"backward on {device}: gradient typed P, backward error raised", flush=True)


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


def timing(spmd, pg, device, iters, numel):
    from cspmd import P, R

    x = torch.randn(numel, device=device)
    name = pg.group_name

    def spmd_call():
        return spmd.all_reduce(x, pg, src=P, dst=R)

    def raw_call():
        y = torch.ops._c10d_functional.all_reduce(x, "sum", name)
        return torch.ops._c10d_functional.wait_tensor(y)

    def measure(fn):
        for _ in range(20):
            fn()
        torch.cuda.synchronize()
        ts = []
        for _ in range(iters):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            ts.append((time.perf_counter() - t0) * 1e6)
        return statistics.median(ts)

    check(torch.equal(spmd_call(), raw_call()), "spmd.all_reduce differs from the raw collective")
    raw = measure(raw_call)
    ours = measure(spmd_call)
    raw2 = measure(raw_call)  # once more, to see the noise
    print(f"all_reduce of {numel} float32 on {device}, median of {iters} calls:", flush=True)
    print(f"  _c10d_functional.all_reduce + wait_tensor: {raw:9.1f} us (again: {raw2:.1f} us)")
    print(f"  spmd.all_reduce(src=P, dst=R):             {ours:9.1f} us")
    print(f"  ratio spmd / raw: {ours / min(raw, raw2):.3f}", flush=True)


if __name__ == "__main__":
    main()
