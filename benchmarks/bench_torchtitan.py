"""A torchtitan training step: its llama3 debug model, TP=2, on CPU over
Gloo, timed unchecked and checked, with cspmd and with the reference
spmd_types (0.2.3, which torchtitan pins, and 0.3.1) where they run.

    python benchmarks/bench_torchtitan.py /path/to/torchtitan [--rounds 2]

Needs a torchtitan checkout and its pip dependencies (see
tests/clients/torchtitan/check.py).  Each job is a fresh ``torchrun`` of
torchtitan's trainer (tests/clients/torchtitan/train_cpu.py) for
``--steps`` steps; a job's first two steps warm up and are not counted.
The jobs alternate, round by round, so that machine noise hits all alike.
A short context (``--seq-len``, 64 tokens by default) keeps the step's
arithmetic small, so the checker's share shows, as on a GPU.
"""

import argparse
import os
import sys

import common

sys.path.insert(0, os.path.join(common.ROOT, "tests", "clients", "torchtitan"))
import titan_runs  # noqa: E402

REF023_DIR = os.environ.get("CSPMD_REF023_DIR",
                            os.path.join(common.CACHE, "spmd_types-0.2.3"))

# name: (spmd_types folder or None for cspmd, checked)
IMPLS = {
    "cspmd, unchecked": (None, False),
    "cspmd, checked": (None, True),
    "spmd_types 0.2.3, unchecked": (REF023_DIR, False),
    "spmd_types 0.2.3, checked": (REF023_DIR, True),
    "spmd_types 0.3.1, unchecked": (common.REF_DIR, False),
    "spmd_types 0.3.1, checked": (common.REF_DIR, True),
}


def _why_not(job):
    for line in reversed(job.log.splitlines()):
        text = line.split("]: ", 1)[-1].strip()
        if "Error" in text and not text.startswith(("File", "raise")):
            return text[:160]
    return f"exit {job.returncode}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("checkout")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--seq-len", type=int, default=64)
    args = parser.parse_args()
    checkout = os.path.abspath(args.checkout)
    problem = titan_runs.check_setup(checkout)
    if problem:
        sys.exit(f"bench_torchtitan.py: {problem}")
    impls = {name: impl for name, impl in IMPLS.items()
             if impl[0] is None or os.path.isdir(os.path.join(impl[0], "spmd_types"))}
    for name in IMPLS.keys() - impls.keys():
        print(f"{name}: not installed in {IMPLS[name][0]}, left out")
    seconds = {name: [] for name in impls}
    failed = {}
    losses = {}
    names = list(impls)
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            if name in failed:
                continue
            folder, checked = impls[name]
            job = titan_runs.run(checkout, steps=args.steps, checked=checked,
                                 spmd_types_dir=folder, seq_len=args.seq_len)
            if job.returncode or len(job.losses) != args.steps:
                failed[name] = _why_not(job)
                continue
            seconds[name] += job.step_seconds
            losses[name] = job.losses
    base = titan_runs.median(seconds.get("cspmd, unchecked", []))
    rows = {}
    print(f"\ntorchtitan llama3 debug model, TP=2, {args.seq_len}-token context, "
          f"{args.steps - 2} timed steps x {args.rounds} rounds")
    print(f"{'':30} {'s / step':>9} {'vs cspmd unchecked':>19}")
    for name in impls:
        if name in failed:
            print(f"{name:30} {'fails':>9}  {failed[name]}")
            rows[name] = {"fails": failed[name]}
            continue
        step = titan_runs.median(seconds[name])
        ratio = step / base if base else float("nan")
        print(f"{name:30} {step:9.3f} {ratio:18.2f}x")
        rows[name] = {"seconds_per_step": step, "vs_cspmd_unchecked": ratio,
                      "losses": losses[name]}
    same = {tuple(v) for v in losses.values()}
    print("losses equal across the jobs that ran" if len(same) == 1 else
          f"losses differ: {losses}")
    common.save("torchtitan", {"machine": common.machine(), "seq_len": args.seq_len,
                               "steps": args.steps, "rounds": args.rounds, "rows": rows})


if __name__ == "__main__":
    main()
