"""Seeded fuzzing: random programs against a hand-written oracle of the type
rules (forward, and backward: a program with leaves that require grad ends
with loss.backward(), which must pass, and every leaf's gradient must be the
dual of its type), abnormal exits (a KeyboardInterrupt at the end of the
region or from inside backward: the thread's checking, the dispatch key and
the autograd patches must be as before), hostile input to the public API,
and a threaded stress run with flat memory.

Each run is bounded (a few seconds by default).  Long runs, one command:

    CSPMD_FUZZ_SECONDS=3600 python -m pytest -q tests/python/test_fuzz.py

CSPMD_FUZZ_SEED picks the first seed (default 0); a failure names the seed
and the program so far, to replay it.  CSPMD_STRESS_SECONDS=60 runs the
8-thread stress for a minute (default: 3 s).
"""

import collections
import gc
import os
import random
import threading
import time

import pytest
import torch

import cspmd as spmd
from cspmd import I, P, R, S, V, MeshAxis, SpmdTypeError
from cspmd.checker import is_type_checking, no_typecheck, typecheck
from conftest import key_included

ORIGINAL_BACKWARD = torch.autograd.backward
ORIGINAL_APPLY = torch.autograd.Function.__dict__["apply"]

SECONDS = float(os.environ.get("CSPMD_FUZZ_SECONDS", "0") or 0)
FIRST_SEED = int(os.environ.get("CSPMD_FUZZ_SEED", "0"))
LETTERS = {"R": R, "I": I, "V": V, "P": P}


# ---- the oracle: the local type rules, per axis, written out by hand -------

def coerce(types, grads):
    """The R/I coercion on one axis (as in spmd_types 0.3.1): R and I differ
    only in the gradient they accept, so where I meets another type the R
    and I operands that take no gradient read as the flavour of those that
    do -- I if those are I, R if they are R or there are none.  None when R
    and I operands both take one (the mix is an error)."""
    if "I" not in types or set(types) == {"I"}:
        return list(types)
    fixed_r = any(t == "R" and g for t, g in zip(types, grads))
    fixed_i = any(t == "I" and g for t, g in zip(types, grads))
    if fixed_r and fixed_i:
        return None
    flavour = "I" if fixed_i else "R"
    return [flavour if t in "RI" and not g else t for t, g in zip(types, grads)]


def oracle(kind, types, grads=None):
    """The result letter of an op of this kind over operand letters on one
    axis, or None when the op must be rejected.  grads[i]: operand i takes
    a gradient (default: none does)."""
    types = coerce(types, grads or [False] * len(types))
    if types is None:
        return None
    kinds = set(types)
    if "I" in kinds:
        return "I" if kinds == {"I"} else None
    if kind == "linear":  # sum of contributions: P only with P
        if "P" in kinds:
            return "P" if kinds == {"P"} else None
        return "V" if "V" in kinds else "R"
    if kind == "multilinear":  # one P factor, the others R
        n_p = types.count("P")
        if n_p > 1 or (n_p == 1 and "V" in kinds):
            return None
        if n_p == 1:
            return "P"
        return "V" if "V" in kinds else "R"
    assert kind == "nonlinear"
    if "P" in kinds:
        return None
    return "V" if "V" in kinds else "R"


OPS = [  # (name, kind, arity, fn)
    ("add", "linear", 2, torch.add),
    ("sub", "linear", 2, torch.sub),
    ("cat", "linear", 3, lambda *xs: torch.cat(xs)[2:6]),
    ("stack", "linear", 2, lambda *xs: torch.stack(xs).sum(0)),
    ("neg", "linear", 1, torch.neg),
    ("sum0", "linear", 1, lambda x: x.sum(0, keepdim=True).expand(4, 4)),
    ("t", "linear", 1, lambda x: x.t()),
    ("clone", "linear", 1, torch.clone),
    ("mul", "multilinear", 2, torch.mul),
    ("matmul", "multilinear", 2, torch.matmul),
    ("relu", "nonlinear", 1, torch.relu),
    ("exp", "nonlinear", 1, torch.exp),
    ("maximum", "nonlinear", 2, torch.maximum),
    ("sigmoid", "nonlinear", 1, torch.sigmoid),
]
COLLECTIVES = ["all_reduce_R", "all_reduce_I", "all_gather", "reinterpret_RV", "convert_RV",
               "reduce_scatter"]


def letters(x, axes):
    t = spmd.get_local_type(x)
    return tuple(t[a].name if a in t else "-" for a in axes)


DUAL = {"R": "P", "I": "I", "V": "V", "P": "R"}


def grad_ok(own, grad):
    """A gradient letter is the dual of its tensor's letter (V also where P
    is due; R and I stand for each other, both complete sums)."""
    due = DUAL[own]
    return grad == due or (due == "P" and grad == "V") or {due, grad} <= {"R", "I"}


class Program:
    """One random program: a pool of typed 4x4 tensors and random steps,
    each checked against the oracle; a rejected step must change nothing.
    With grad=True some tensors are leaves that require grad, and the
    program ends with loss.backward(): it must pass (the forward was
    accepted) and every leaf's gradient must be the dual of its type."""

    def __init__(self, seed, mesh, dp, tp, grad=False):
        self.rng = random.Random(seed)
        self.seed, self.mesh, self.groups = seed, mesh, (dp, tp)
        self.axes = (MeshAxis.of(dp), MeshAxis.of(tp))
        self.grad = grad
        self.log = []
        self.outcomes = {"accepted": 0, "rejected": 0, "backward": 0, "gradients": 0}
        self.leaves = []
        self.pool = [self.fresh() for _ in range(4)]

    def fresh(self):
        ty = tuple(self.rng.choice("RIVP") for _ in self.axes)
        with no_typecheck():
            x = torch.randn(4, 4)
        if self.grad and self.rng.random() < 0.6:
            x.requires_grad_()
            self.leaves.append((x, ty))
        spmd.assert_type(x, {a: LETTERS[c] for a, c in zip(self.axes, ty)})
        return x

    def fail(self, what):
        steps = "\n  ".join(self.log[-12:])
        pytest.fail(f"seed {self.seed}: {what}\n  last steps:\n  {steps}")

    def step(self):
        r = self.rng.random()
        if r < 0.15:
            self.pool.append(self.fresh())
            self.log.append("fresh")
        elif r < 0.3:
            self.collective()
        else:
            self.op()
        if len(self.pool) > 12:
            del self.pool[self.rng.randrange(len(self.pool))]

    def op(self):
        name, kind, arity, fn = self.rng.choice(OPS)
        args = [self.rng.choice(self.pool) for _ in range(arity)]
        before = [letters(x, self.axes) for x in args]
        grads = [x.requires_grad for x in args]
        want = [oracle(kind, [b[k] for b in before], grads) for k in range(len(self.axes))]
        self.log.append(f"{name}{tuple(''.join(b) for b in before)} -> {want}")
        try:
            y = fn(*args)
        except SpmdTypeError as e:
            if None not in want:
                self.fail(f"{name} rejected, oracle says {want}: {str(e)[:300]}")
            if [letters(x, self.axes) for x in args] != before:
                self.fail(f"rejected {name} changed an operand's type")
            self.outcomes["rejected"] += 1
            return
        if None in want:
            self.fail(f"{name} accepted, oracle rejects: got {letters(y, self.axes)}")
        if list(letters(y, self.axes)) != want:
            self.fail(f"{name}: got {letters(y, self.axes)}, oracle {want}")
        self.outcomes["accepted"] += 1
        self.pool.append(y)

    def collective(self):
        which = self.rng.choice(COLLECTIVES)
        k = self.rng.randrange(2)
        g, a = self.groups[k], self.axes[k]
        x = self.rng.choice(self.pool)
        before = letters(x, self.axes)
        have = before[k]
        if have == "I" and x.requires_grad and which in ("reinterpret_RV", "convert_RV"):
            # src=R reads an I as R only for a tensor that takes no gradient
            self.log.append(f"{which} skipped: I(grad) on axis {k}")
            return
        if which.startswith("all_reduce"):
            # src=P takes V too: a V tensor is read as its pending sum
            src, dst, ok, out = P, LETTERS[which[-1]], have in "PV", which[-1]
            call = lambda: spmd.all_reduce(x, g, src=src, dst=dst)  # noqa: E731
        elif which == "all_gather":
            ok, out = have == "V", "R"
            call = lambda: spmd.all_gather(x, g, src=S(0), dst=R)  # noqa: E731
        elif which == "reduce_scatter":
            ok, out = have in "PV", "V"
            call = lambda: spmd.reduce_scatter(x, g, src=P, dst=S(0))  # noqa: E731
        elif which == "reinterpret_RV":  # I is read as R: x takes no gradient
            ok, out = have in "RI", "V"
            call = lambda: spmd.reinterpret(x, g, src=R, dst=V,  # noqa: E731
                                                   expert_mode=True)
        else:
            ok, out = have in "RI", "V"
            call = lambda: spmd.convert(x, g, src=R, dst=S(0))  # noqa: E731
        self.log.append(f"{which} on axis {k} of {''.join(before)} -> {out if ok else None}")
        try:
            y = call()
        except SpmdTypeError as e:
            if ok:
                self.fail(f"{which} rejected: {str(e)[:300]}")
            if letters(x, self.axes) != before:
                self.fail(f"rejected {which} changed its input's type")
            return
        if not ok:
            self.fail(f"{which} accepted {''.join(before)} on axis {k}")
        want = list(before)
        want[k] = out
        if list(letters(y, self.axes)) != want:
            self.fail(f"{which}: got {letters(y, self.axes)}, want {want}")
        # back to 4 rows for the ops (slices and copies keep the type)
        y = y[:4] if y.shape[0] >= 4 else torch.cat([y] * (4 // y.shape[0]))
        if list(letters(y, self.axes)) != want:
            self.fail(f"reshaping {which}'s result changed its type")
        self.pool.append(y)

    def loss(self):
        """A scalar loss from a pool tensor that requires grad, made I or P
        on every axis (R -> P by convert, V -> P by reinterpret)."""
        ys = [y for y in self.pool if y.requires_grad]
        if not ys:
            return None
        loss = self.rng.choice(ys).sum()
        for k, (g, t) in enumerate(zip(self.groups, letters(loss, self.axes))):
            if t == "R":
                loss = spmd.convert(loss, g, src=R, dst=P)
            elif t == "V":
                loss = spmd.reinterpret(loss, g, src=V, dst=P)
        return loss

    def backward(self, interrupt):
        loss = self.loss()
        if loss is None:
            return
        self.log.append(f"backward of a {''.join(letters(loss, self.axes))} loss"
                        + (" (interrupted)" if interrupt else ""))
        if interrupt:  # an abnormal exit from inside the backward pass
            def hook(g):
                raise KeyboardInterrupt("fuzz: in backward")
            loss.register_hook(hook)
        try:
            loss.backward()
        except SpmdTypeError as e:
            self.fail(f"backward of an accepted program rejected: {str(e)[:400]}")
        self.outcomes["backward"] += 1
        for x, ty in self.leaves:
            if x.grad is None:
                continue
            got = letters(x.grad, self.axes)
            for own, g in zip(ty, got):
                if not grad_ok(own, g):
                    self.fail(f"leaf {''.join(ty)} got gradient {''.join(got)}")
            self.outcomes["gradients"] += 1

    def run(self, steps):
        with spmd.set_current_mesh(self.mesh):
            try:
                with typecheck():
                    for _ in range(steps):
                        self.step()
                    if self.grad:
                        self.backward(interrupt=self.rng.random() < 0.1)
                    if self.rng.random() < 0.3:  # an abnormal exit
                        raise KeyboardInterrupt("fuzz")
            except KeyboardInterrupt:
                pass
        if is_type_checking():
            self.fail("checking left on after the program")
        if key_included():
            self.fail("the dispatch key left on after the program")
        if threading.active_count() == 1 and (  # patches are process-wide
                torch.autograd.backward is not ORIGINAL_BACKWARD or
                torch.autograd.Function.__dict__["apply"] is not ORIGINAL_APPLY):
            self.fail("an autograd patch left installed after the program")


def seeds(default_count):
    """Seeds to run: default_count of them, or as many as fit in SECONDS."""
    deadline = time.monotonic() + SECONDS if SECONDS else None
    seed = FIRST_SEED
    while True:
        yield seed
        seed += 1
        if deadline is None and seed - FIRST_SEED >= default_count:
            return
        if deadline is not None and time.monotonic() > deadline:
            return


def test_oracle_is_the_rule_table():
    # The oracle itself, on the rules' textbook cases.
    assert oracle("linear", ["P", "P"]) == "P" and oracle("linear", ["P", "R"]) is None
    assert oracle("linear", ["R", "V"]) == "V" and oracle("linear", ["I", "R"]) == "R"
    assert oracle("multilinear", ["P", "R"]) == "P" and oracle("multilinear", ["P", "P"]) is None
    assert oracle("multilinear", ["P", "V"]) is None and oracle("nonlinear", ["P"]) is None
    assert oracle("nonlinear", ["I", "I"]) == "I" and oracle("nonlinear", ["R", "V"]) == "V"
    assert oracle("multilinear", ["P", "I"]) == "P" and oracle("linear", ["I", "P"]) is None
    # with gradients: R(grad) + I(grad) is an error, I(grad) + R reads R as I
    assert oracle("linear", ["R", "I"], [True, True]) is None
    assert oracle("linear", ["I", "R"], [True, False]) == "I"
    assert oracle("linear", ["I", "R"], [False, True]) == "R"
    assert oracle("linear", ["I", "V"], [True, False]) is None
    assert grad_ok("R", "P") and grad_ok("R", "V") and grad_ok("P", "R") and grad_ok("P", "I")
    assert grad_ok("I", "I") and grad_ok("V", "V")
    assert not grad_ok("V", "P") and not grad_ok("R", "R") and not grad_ok("I", "P")


def test_random_programs_agree_with_the_oracle(mesh, dp, tp):
    outcomes = collections.Counter()
    for seed in seeds(60):
        program = Program(seed, mesh, dp, tp)
        program.run(40)
        outcomes.update(program.outcomes)
    assert outcomes["accepted"] > 100 and outcomes["rejected"] > 100, outcomes


def test_random_programs_backward_gives_dual_gradients(mesh, dp, tp):
    outcomes = collections.Counter()
    for seed in seeds(60):
        program = Program(1_000_000 + seed, mesh, dp, tp, grad=True)
        program.run(25)
        outcomes.update(program.outcomes)
    assert outcomes["backward"] > 20 and outcomes["gradients"] > 40, outcomes
    assert outcomes["accepted"] > 100 and outcomes["rejected"] > 50, outcomes


# ---- hostile input to the public API ----------------------------------------

def garbage(rng, tp):
    pool = [None, 0, -1, 5, 2**70, 1.5, float("nan"), "tp", "nope", "", b"x", [], [1, 2],
            (None,), {}, {"tp": "R"}, {tp: "R"}, {5: R}, {None: R}, object(), R, P, S(0),
            S(-9), S(99), torch.randn(2), MeshAxis.of(4, 1), tp, type, lambda: None]
    return rng.choice(pool)


API = [
    ("assert_type", lambda x, g, tp: spmd.assert_type(x, g)),
    ("assert_type_dict", lambda x, g, tp: spmd.assert_type(x, {tp: g})),
    ("all_reduce", lambda x, g, tp: spmd.all_reduce(x, g, src=P, dst=R)),
    ("all_reduce_src", lambda x, g, tp: spmd.all_reduce(x, tp, src=g, dst=R)),
    ("all_gather", lambda x, g, tp: spmd.all_gather(x, tp, src=V, dst=R, gather_dim=g)),
    ("reduce_scatter", lambda x, g, tp: spmd.reduce_scatter(x, tp, src=P, dst=V,
                                                            scatter_dim=g)),
    ("all_to_all", lambda x, g, tp: spmd.all_to_all(x, tp, src=V, dst=V, split_dim=g)),
    ("convert", lambda x, g, tp: spmd.convert(x, tp, src=R, dst=g)),
    ("reinterpret", lambda x, g, tp: spmd.reinterpret(x, g, src=R, dst=V)),
    ("split_sizes", lambda x, g, tp: spmd.all_gather(x, tp, src=S(0), dst=R, split_sizes=g)),
    ("mesh_axis_of", lambda x, g, tp: MeshAxis.of(g)),
    ("mesh_axis_id", lambda x, g, tp: MeshAxis(g)),
    ("shard", lambda x, g, tp: S(g)),
    ("get_local_type", lambda x, g, tp: spmd.get_local_type(g)),
    ("set_current_mesh", lambda x, g, tp: enter_and_leave(spmd.set_current_mesh, g)),
    ("typecheck", lambda x, g, tp: enter_and_leave(lambda m: typecheck(strict_mode=m), g)),
]


def enter_and_leave(make, arg):
    with make(arg):
        pass
ALLOWED = (TypeError, ValueError, SpmdTypeError, NotImplementedError, KeyError)


def test_bad_input_to_the_public_api(mesh, dp, tp):
    rng = random.Random(FIRST_SEED)
    deadline = time.monotonic() + (SECONDS or 5.0)
    tp_axis = MeshAxis.of(tp)
    calls = 0
    while time.monotonic() < deadline:
        x = torch.randn(4, 4)
        spmd.assert_type(x, {MeshAxis.of(dp): R, tp_axis: rng.choice([R, V, P])})
        before = spmd.get_local_type(x)
        name, call = rng.choice(API)
        g = garbage(rng, tp)
        with spmd.set_current_mesh(mesh):
            checking = rng.random() < 0.5
            ctx = typecheck() if checking else no_typecheck()
            with ctx:
                try:
                    call(x, g, tp)
                    ok = True
                except ALLOWED as e:
                    ok = False
                    assert str(e), f"{name}({g!r}): an error with no message"
        if not ok:
            assert spmd.get_local_type(x) == before, f"{name}({g!r}) failed but retyped x"
        calls += 1
    assert calls > 10
    assert not is_type_checking()


# ---- threads ------------------------------------------------------------------

def rss_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs /proc")
def test_eight_threads_checking_concurrently(mesh, dp, tp):
    seconds = float(os.environ.get("CSPMD_STRESS_SECONDS", "3"))
    errors, counts = [], [0] * 8

    def worker(i):
        try:
            seed = 10_000 * (i + 1)
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                Program(seed, mesh, dp, tp).run(30)
                seed += 1
                counts[i] += 1
        except BaseException as e:  # noqa: B036 -- reported below
            errors.append(e)

    def run_all():
        ts = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()

    run_all()  # warm up: caches, interned types
    gc.collect()
    start = rss_kib()
    run_all()
    gc.collect()
    grown = rss_kib() - start
    assert not errors, errors[0]
    assert all(c > 0 for c in counts)
    assert grown < 64 * 1024, f"RSS grew {grown} KiB over {seconds} s of 8 checking threads"
