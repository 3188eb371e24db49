"""Collectives: cspmd's checked collectives (all_reduce P->R, all_gather
S(0)->R, reduce_scatter P->S(0)) vs the raw functional collective
(torch.ops._c10d_functional.* + wait_tensor) on the same process group,
implementations alternating in rounds.

    python benchmarks/bench_coll.py fake          # one process, fake backend
    python benchmarks/bench_coll.py gloo [--world 2] [--timeout 120]

Gloo runs ``--world`` processes on 127.0.0.1 (bounded by --timeout); rank 0
reports.  Writes results/coll_<backend>.json.  Not a test.
"""

import argparse
import contextlib
import datetime
import socket
import sys

import torch

import common

IMPLS = ["raw", "cspmd"]
SIZES = [8, 4096]          # float32 elements per rank


def cases(mesh, axis_name):
    import cspmd
    from cspmd import P, R, S
    pg = mesh.get_group(axis_name)
    name, ws = pg.group_name, pg.size()
    f = torch.ops._c10d_functional
    wait = f.wait_tensor
    out = {}
    for n in SIZES:
        with cspmd.set_current_mesh(mesh), cspmd.checker.typecheck():
            xp = torch.randn(n * ws)
            cspmd.assert_type(xp, {pg: P})
            xs = torch.randn(n)
            cspmd.assert_type(xs, {pg: S(0)})
        raw_x, raw_s = torch.randn(n * ws), torch.randn(n)
        out[f"all_reduce[{n * ws}]"] = {
            "raw": lambda x=raw_x: wait(f.all_reduce(x, "sum", name)),
            "cspmd": lambda x=xp: cspmd.all_reduce(x, pg, src=P, dst=R)}
        out[f"all_gather[{n}]"] = {
            "raw": lambda x=raw_s: wait(f.all_gather_into_tensor(x, ws, name)),
            "cspmd": lambda x=xs: cspmd.all_gather(x, pg, src=S(0), dst=R)}
        out[f"reduce_scatter[{n * ws}]"] = {
            "raw": lambda x=raw_x: wait(f.reduce_scatter_tensor(x, "sum", ws, name)),
            "cspmd": lambda x=xp: cspmd.reduce_scatter(x, pg, src=P, dst=S(0))}
    return out


def bench(mesh, axis_name, rounds, number):
    import cspmd
    import cspmd.checker
    work = cases(mesh, axis_name)

    def ctx(impl):
        if impl == "raw":
            return contextlib.nullcontext()
        return _both(cspmd.set_current_mesh(mesh), cspmd.checker.typecheck())

    for c, d in work.items():           # warm up
        for impl, fn in d.items():
            with ctx(impl):
                for _ in range(10):
                    fn()

    def measure(c, impl):
        with ctx(impl):
            return common.per_call_us(work[c][impl], number)

    samples = common.alternate(list(work), IMPLS, rounds, measure)
    return common.best(samples), samples


@contextlib.contextmanager
def _both(a, b):
    with a, b:
        yield


def report(backend, best, samples, extra):
    print(f"{backend}: µs per call (best)")
    for c, d in best.items():
        print(f"  {c:22s} raw {d['raw']:8.2f}  cspmd {d['cspmd']:8.2f}  "
              f"ratio {d['cspmd'] / d['raw']:.3f}x")
    common.save(f"coll_{backend}", dict(extra, machine=common.machine(), best_us=best,
                                        samples_us=samples))


def gloo_worker(rank, world, port, rounds, number, q):
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    torch.set_num_threads(1)
    try:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=world, timeout=datetime.timedelta(seconds=60))
        mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("tp",))
        best, samples = bench(mesh, "tp", rounds, number)
        q.put((rank, best, samples))
    except BaseException as e:  # noqa: BLE001
        q.put((rank, repr(e), None))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("backend", choices=["fake", "gloo"])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--number", type=int, default=0)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=180)
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.backend == "fake":
        mesh, _, _ = common.fake_mesh()
        number = args.number or 1000
        best, samples = bench(mesh, "tp", args.rounds, number)
        report("fake", best, samples, {"world": 8, "axis": "tp (4 ranks)", "number": number})
        return
    import queue
    import torch.multiprocessing as mp
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    number = args.number or 200
    mpc = mp.get_context("spawn")
    q = mpc.Queue()
    procs = [mpc.Process(target=gloo_worker, args=(r, args.world, port, args.rounds, number, q))
             for r in range(args.world)]
    for p in procs:
        p.start()
    got = {}
    try:
        import time
        deadline = time.monotonic() + args.timeout
        while len(got) < args.world:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"gloo benchmark did not finish in {args.timeout}s")
            r, best, samples = q.get(timeout=left)
            if samples is None:
                raise RuntimeError(f"rank {r}: {best}")
            got[r] = (best, samples)
    except (queue.Empty, TimeoutError, RuntimeError) as e:
        print(f"bench_coll gloo: {e}", file=sys.stderr)
        sys.exit(1)
    finally:
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
    best, samples = got[0]
    report("gloo", best, samples, {"world": args.world, "number": number})


if __name__ == "__main__":
    main()
