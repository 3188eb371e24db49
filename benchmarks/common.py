"""Shared helpers of the benchmark scripts (not a test, not part of cspmd).

The reference ``spmd_types`` and matplotlib are installed by benchmarks/run
into their own folders (``--target``) and put on ``sys.path`` only here, in
the benchmark processes: they are never dependencies of cspmd.
"""

import contextlib
import ctypes
import glob
import json
import os
import platform
import re
import sys
import timeit

CACHE = os.path.expanduser(os.environ.get("CSPMD_BENCH_CACHE", "~/.cache/cspmd"))
REF_DIR = os.environ.get("CSPMD_REF_DIR", os.path.join(CACHE, "spmd_types-ref"))
MPL_DIR = os.environ.get("CSPMD_MPL_DIR", os.path.join(CACHE, "mpl-bench"))
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BUILD = os.environ.get("CSPMD_BUILD", os.path.join(ROOT, "build"))


def use_reference():
    """Import the reference spmd_types from its benchmark-only folder."""
    if REF_DIR not in sys.path:
        sys.path.insert(0, REF_DIR)
    import spmd_types as ref
    import spmd_types.checker  # noqa: F401
    return ref


def ref_version():
    try:
        from importlib.metadata import version
        sys.path.insert(0, REF_DIR)
        return version("spmd_types")
    except Exception:  # noqa: BLE001
        return "?"


def fake_mesh():
    """Fake process group of 8 ranks, a (dp=2, tp=4) CPU mesh."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    if not dist.is_initialized():
        dist.init_process_group("fake", rank=0, world_size=8)
    mesh = init_device_mesh("cpu", (2, 4), mesh_dim_names=("dp", "tp"))
    return mesh, mesh.get_group("dp"), mesh.get_group("tp")


def machine():
    import torch
    cpu = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "torch": torch.__version__,
            "python": platform.python_version(), "platform": platform.platform(),
            "spmd_types": ref_version()}


def per_call_us(fn, number, repeat=3):
    """Best of ``repeat`` timings of ``number`` calls, in µs per call."""
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6


def alternate(cases, impls, rounds, measure):
    """Measure every (case, impl) in ``rounds`` rounds; within a round the
    implementations alternate per case, in an order rotated every round, so
    that machine noise hits all alike.  ``measure(case, impl) -> float``.
    Returns {case: {impl: [value per round]}}."""
    out = {c: {i: [] for i in impls} for c in cases}
    for r in range(rounds):
        order = impls[r % len(impls):] + impls[:r % len(impls)]
        for c in cases:
            for i in order:
                out[c][i].append(measure(c, i))
    return out


def measure_ops(work, ctx, impls, rounds, number_of, warm_up=20):
    """Per-op µs of ``work`` ({impl: {op: fn}}), each impl's calls in its
    context ``ctx[impl]()``: every fn called ``warm_up`` times first (and
    failing early), then timed in alternating rounds (``alternate``),
    ``number_of(impl)`` calls per timing.  Returns (best, samples)."""
    for impl in impls:
        with ctx[impl]():
            for fn in work[impl].values():
                for _ in range(warm_up):
                    fn()

    def measure(op, impl):
        with ctx[impl]():
            return per_call_us(work[impl][op], number_of(impl))

    samples = alternate(list(work[impls[0]]), impls, rounds, measure)
    return best(samples), samples


def best(samples):
    return {c: {i: min(v) for i, v in d.items()} for c, d in samples.items()}


def save(name, data):
    path = os.path.join(os.environ.get("CSPMD_BENCH_OUT", os.path.join(HERE, "results")),
                        name + ".json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(data, f, indent=1)
    print(f"wrote {path}")


@contextlib.contextmanager
def both(a, b):
    """Enter two context managers as one (a first), for a table of contexts
    built from lambdas."""
    with a, b:
        yield


@contextlib.contextmanager
def nothing():
    yield


class Callgrind:
    """The client requests of a benchmark run under ``valgrind
    --tool=callgrind --instr-atstart=no`` (build/benchmarks/libcg_ctl.so;
    outside valgrind they do nothing).  ``n`` and ``out_prefix`` come from
    the command line: ``bench_callgrind_*.py [N [DIR/cg]]``."""

    def __init__(self, default_n):
        self.n = int(sys.argv[1]) if len(sys.argv) > 1 else default_n
        self.out_prefix = sys.argv[2] if len(sys.argv) > 2 else None
        self.lib = ctypes.CDLL(os.path.join(BUILD, "benchmarks", "libcg_ctl.so"))

    def __enter__(self):
        self.lib.cg_start()
        return self

    def __exit__(self, *exc):
        self.lib.cg_stop()

    def count(self, tag, fn, warmup):
        """Call fn ``warmup`` times, then count ``n`` calls into a dump named
        ``tag``."""
        for _ in range(warmup):
            fn()
        self.lib.cg_zero()
        for _ in range(self.n):
            fn()
        self.lib.cg_dump(tag.encode())

    def totals(self):
        """{tag: instructions} of this run's dumps; None without DIR/cg."""
        return None if self.out_prefix is None else callgrind_totals(self.out_prefix)


def callgrind_totals(out_prefix):
    """{client-request tag: instructions} of the callgrind dumps written as
    ``out_prefix*`` (each dump names the tag it was requested under)."""
    totals = {}
    for path in glob.glob(out_prefix + "*"):
        with open(path) as fh:
            text = fh.read()
        m = re.search(r"Client Request: (\S+)", text)
        t = re.search(r"^(?:totals|summary): (\d+)", text, re.M)
        if m and t:
            totals[m.group(1)] = int(t.group(1))
    return totals
