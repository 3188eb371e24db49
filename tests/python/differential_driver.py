"""One driver for the differential tests (test_differential.py in local
mode, test_differential_global.py in global mode): a seed range of
programs (differential.py) run under cspmd and under the reference,
compared step by step; a disagreement is explained when one of the mode's
explanations matches it and docs/differences.md carries its marker."""

import collections
import os
import re
from dataclasses import dataclass
from typing import Callable

import cspmd as spmd
import differential
import reference

DOC = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "differences.md")


@dataclass(frozen=True)
class Mode:
    name: str            # in the summary and the failure text: "" or "global"
    local: bool          # typecheck(local=...)
    generate: Callable   # seed -> Program
    explain: Callable    # (prog, i, mine, theirs) -> the explanations that match
    tables: tuple        # (docs marker kind, {name: predicate}): the mode's own first
    min_steps: int       # a slice runs more than min_steps steps per program
    rejected: tuple      # (low, high): the share of rejected steps lies between them
    min_rate: float      # the share of programs agreeing step for step exceeds it

    @property
    def explained(self):
        """Every explanation explain() may give."""
        return {name for _, table in self.tables for name in table}


LOCAL = Mode("", True, differential.generate, differential.explain,
             (("differential", differential.EXPLAINED),),
             min_steps=5, rejected=(0.2, 0.8), min_rate=0.8)
GLOBAL = Mode("global", False, differential.generate_global, differential.explain_global,
              (("differential-global", differential.EXPLAINED_GLOBAL),
               ("differential", differential.EXPLAINED)),
              min_steps=4, rejected=(0.2, 0.9), min_rate=0.5)


def doc_markers(kind):
    """The names of docs/differences.md's ``<!-- KIND: NAME -->`` markers."""
    with open(DOC) as f:
        return set(re.findall(rf"<!-- {re.escape(kind)}: ([a-z0-9-]+) -->", f.read()))


def compare(mesh, mode, seeds):
    """(stats, failures): per-program outcomes and the unexplained ones."""
    ref = reference.load()
    reference.load("spmd_types.checker")
    markers = set().union(*(doc_markers(kind) for kind, _ in mode.tables))
    stats = collections.Counter()
    failures = []
    for seed in seeds:
        prog = mode.generate(seed)
        mine = differential.run(spmd, mesh, prog, local=mode.local)
        theirs = differential.run(ref, mesh, prog, local=mode.local)
        stats["steps"] += len(mine)
        stats["rejected steps"] += sum(not (differential._typed(o.result) or o.result == "ok")
                                       for o in mine)
        i = differential.first_disagreement(mine, theirs)
        if i is None:
            stats["agree"] += 1
            continue
        why = [m for m in mode.explain(prog, i, mine, theirs) if m in markers]
        if why:
            stats[why[0]] += 1
            continue
        failures.append(f"{differential.render(prog, mine, i)}\n"
                        f"    cspmd:     {mine[i].result} {mine[i].error}\n"
                        f"    reference: {theirs[i].result} {theirs[i].error}\n"
                        f"    operands after: cspmd {mine[i].after}, reference {theirs[i].after}")
    return stats, failures


def check_markers(mode):
    """The mode's own explanations and its docs markers name the same set."""
    kind, table = mode.tables[0]
    markers = doc_markers(kind)
    assert set(table) - markers == set(), f"explanations missing in differences.md ({kind})"
    assert markers - set(table) == set(), f"{kind} markers with no explanation in the test"


def check_slice(mesh, mode, programs, first_seed):
    """Compare `programs` programs from `first_seed`, print the summary
    (the agreement rate docs/differences.md reports) and fail on an
    unexplained disagreement, or on a slice that does not exercise both
    sides of the rules (too few steps, too few or too many rejected) or
    agrees less often than the mode's floor."""
    stats, failures = compare(mesh, mode, range(first_seed, first_seed + programs))
    rate = stats["agree"] / programs
    kind = f"{mode.name}-mode " if mode.name else ""
    print(f"\n{programs} {kind}programs from seed {first_seed}: {rate:.1%} agree step for step; "
          f"explained: { {k: v for k, v in stats.items() if k in mode.explained} }; "
          f"unexplained: {len(failures)}; {stats['steps']} steps, "
          f"{stats['rejected steps']} rejected")
    assert not failures, (f"{len(failures)} unexplained disagreement(s) with spmd_types 0.3.1 "
                          f"{f'in {mode.name} mode ' if mode.name else ''}(first 3):\n\n"
                          + "\n\n".join(failures[:3]))
    assert stats["steps"] > mode.min_steps * programs
    low, high = mode.rejected
    assert low < stats["rejected steps"] / stats["steps"] < high
    assert rate > mode.min_rate
