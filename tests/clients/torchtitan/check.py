"""torchtitan end to end, checking on: its own trainer, unchanged, with cspmd.

    . scripts/env.sh
    python tests/clients/torchtitan/check.py /path/to/torchtitan [--steps 4]

Run on demand, not by the README's test command: it needs a torchtitan
checkout and torchtitan's pip dependencies (``requirements.txt``), and
fetches nothing.  On CPU, Gloo over loopback, the llama3 debug model:

1. TP=2 with ``--debug.spmd-typechecking`` completes, and its losses and
   gradient norms are those of an unchecked run, digit for digit;
2. the same with a planted bug (a Partial activation whose reduction is
   left out) stops at the first op that uses it, with an SpmdTypeError that
   names the op and a line of torchtitan's;
3. FSDP x TP (dp_shard=2, tp=2): checked equals unchecked.

Prints each step's seconds checked and unchecked; exits 1 on a failed check.
"""

import argparse
import os
import sys

import titan_runs


def _report(name, ok, detail=""):
    print(f"{'PASS' if ok else 'FAIL'}  {name}{': ' + detail if detail else ''}", flush=True)
    return ok


def _tail(job, lines=40):
    return "\n".join(job.log.splitlines()[-lines:])


def _same_training(name, checkout, steps, **layout):
    plain = titan_runs.run(checkout, steps=steps, checked=False, **layout)
    checked = titan_runs.run(checkout, steps=steps, checked=True, **layout)
    for label, job in (("unchecked", plain), ("checked", checked)):
        if job.returncode or len(job.losses) != steps:
            print(_tail(job))
            return _report(name, False, f"the {label} run stopped (exit {job.returncode}, "
                                        f"{len(job.losses)} of {steps} steps)")
    same = plain.losses == checked.losses and plain.grad_norms == checked.grad_norms
    detail = (f"losses {' '.join(checked.losses)}; seconds a step: checked "
              f"{titan_runs.median(checked.step_seconds):.3f}, unchecked "
              f"{titan_runs.median(plain.step_seconds):.3f}")
    if not same:
        detail = (f"checked losses {checked.losses} / grad norms {checked.grad_norms} != "
                  f"unchecked {plain.losses} / {plain.grad_norms}")
    return _report(name, same, detail)


def _planted_bug(checkout, steps):
    job = titan_runs.run(checkout, steps=steps, checked=True, plant="missing_reduction")
    errors = job.error_lines()
    at = [line.split("]: ", 1)[-1].strip() for line in job.log.splitlines()
          if line.split("]: ", 1)[-1].strip().startswith("at ") and "torchtitan" in line]
    problems = []
    if "[plant]" not in job.log:
        problems.append("the bug was not planted (no reduction of a Partial tensor ran)")
    if job.returncode == 0 or job.losses:
        problems.append(f"training went on (exit {job.returncode}, {len(job.losses)} steps)")
    if not any("Partial" in e for e in errors):
        problems.append("no SpmdTypeError about the Partial tensor")
    if not at:
        problems.append("the error names no line of torchtitan's")
    if problems:
        print(_tail(job, 60))
        return _report("planted bug caught", False, "; ".join(problems))
    op = next((line.split("In aten::", 1)[1].rstrip("(") for line in job.log.splitlines()
               if "In aten::" in line), "?")
    return _report("planted bug caught", True,
                   f"{errors[0].split('SpmdTypeError: ')[-1][:60]}... in aten::{op}, {at[0]}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("checkout", help="a torchtitan checkout")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--no-fsdp", action="store_true", help="skip FSDP x TP (4 ranks)")
    args = parser.parse_args()
    checkout = os.path.abspath(args.checkout)
    problem = titan_runs.check_setup(checkout)
    if problem is None:
        try:
            from torch.distributed.fsdp import DataParallelMeshDims  # noqa: F401
        except ImportError:
            import torch
            problem = (f"torchtitan needs torch's FSDP DataParallelMeshDims, which torch "
                       f"{torch.__version__} lacks: use a newer torch (CSPMD_TORCH=2.15.0)")
    if problem:
        print(f"check.py: {problem}", file=sys.stderr)
        return 2
    results = [
        _same_training("TP=2, checked = unchecked", checkout, args.steps, tp=2),
        _planted_bug(checkout, args.steps),
    ]
    if not args.no_fsdp:
        results.append(_same_training("FSDP x TP (2 x 2), checked = unchecked", checkout,
                                      args.steps, tp=2, dp_shard=2))
    print(f"{sum(results)} passed, {len(results) - sum(results)} failed")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
