"""Random short programs run under cspmd and under the reference
(spmd_types 0.3.1), step by step, and the first step where they disagree.

A program is data drawn from a seed before it runs: a mesh (the 2x4 mesh or
its tp axis alone), whether grad mode is on, and a list of steps.  A step
either makes a fresh tensor annotated on the mesh's axes (some axis left out
now and then), applies an op to tensors picked from the pool, runs a
collective or a conversion, or ends the program with a backward.  The same
program runs once per library (`run`); each step's outcome is the error's
class name, or the result's local type per axis with its partition spec.
The pools stay the same while the outcomes agree, so `first_disagreement`
compares the two traces up to the first step that differs.

Used by tests/python/test_differential.py (a fast slice, and the long run
behind CSPMD_DIFF_PROGRAMS).  `generate_global` draws programs for global
mode (``typecheck(local=False)``): fresh tensors carry partition specs on
one or two axes (S(0), S(1), a two-axis entry, or V with no spec), and
collectives move shards; tests/python/test_differential_global.py runs them.
"""

import random
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn.functional as F

LETTERS = "RIVP"


@dataclass
class Step:
    kind: str            # "fresh", "op", "coll", "backward"
    name: str            # op or collective name
    picks: tuple = ()    # pool picks (taken modulo the pool's length)
    arg: object = None   # the step's own parameters


@dataclass
class Program:
    seed: int
    axes: tuple          # mesh dim names the program's mesh has
    grad_mode: bool
    steps: list = field(default_factory=list)


@dataclass
class Outcome:
    line: str            # the step as run, with its resolved operands
    result: str          # error class name, or the result's types
    operands: tuple = () # operands' types as text, before the step
    after: tuple = ()    # and after it (a step may retype its operands)
    error: str = ""      # the first line of the error message


# ---- the program's vocabulary ------------------------------------------------

def _typ(lib, letter):
    if letter in ("S0", "S1"):
        return lib.S(int(letter[1]))
    return getattr(lib, letter)


def _scalar(lib, arg):
    return lib.Scalar(2.0, {ax: _typ(lib, c) for ax, c in arg})


def _square(y):
    """Back to 4x4 after a collective changed the rows, with ops both
    libraries type as linear views (no indexing: the reference types
    ``__getitem__`` as non-linear)."""
    if y.dim() == 0:
        return y.expand(4, 4)
    rows = y.shape[0]
    if y.dim() != 2 or y.shape[1] != 4 or (rows < 4 and 4 % rows):
        return y
    if rows >= 4:
        return y.narrow(0, 0, 4)
    return y.unsqueeze(0).expand(4 // rows, rows, 4).reshape(4, 4)


# name -> (arity, fn(lib, arg, *tensors))
OPS = {
    "add": (2, lambda lib, a, x, y: x + y),
    "sub": (2, lambda lib, a, x, y: x - y),
    "neg": (1, lambda lib, a, x: -x),
    "mul": (2, lambda lib, a, x, y: x * y),
    "div": (2, lambda lib, a, x, y: x / y),
    "matmul": (2, lambda lib, a, x, y: x @ y),
    "mm": (2, lambda lib, a, x, y: torch.mm(x, y)),
    "linear": (2, lambda lib, a, x, y: F.linear(x, y)),
    "einsum": (2, lambda lib, a, x, y: torch.einsum("ij,jk->ik", x, y)),
    "addmm": (3, lambda lib, a, x, y, z: torch.addmm(x, y, z)),
    "sum0": (1, lambda lib, a, x: x.sum(0, keepdim=True).expand(4, 4)),
    "sum": (1, lambda lib, a, x: x.sum()),
    "mean1": (1, lambda lib, a, x: x.mean(1, keepdim=True).expand(4, 4)),
    "amax": (1, lambda lib, a, x: x.amax(0, keepdim=True).expand(4, 4)),
    "t": (1, lambda lib, a, x: x.t()),
    "transpose": (1, lambda lib, a, x: x.transpose(0, 1)),
    "reshape": (1, lambda lib, a, x: x.reshape(-1).view(4, 4)),
    "unsqueeze": (1, lambda lib, a, x: x.unsqueeze(0).squeeze(0)),
    "slice": (1, lambda lib, a, x: x.narrow(0, 1, 2).repeat(2, 1)),
    "clone": (1, lambda lib, a, x: x.clone()),
    "cat": (2, lambda lib, a, x, y: torch.cat([x, y]).narrow(0, 2, 4)),
    "stack": (2, lambda lib, a, x, y: torch.stack([x, y]).sum(0)),
    "mul_number": (1, lambda lib, a, x: x * 2.0),
    "add_number": (1, lambda lib, a, x: x + 1.0),
    "mul_scalar": (1, lambda lib, a, x: x * _scalar(lib, a)),
    "add_scalar": (1, lambda lib, a, x: x + _scalar(lib, a)),
    "relu": (1, lambda lib, a, x: torch.relu(x)),
    "exp": (1, lambda lib, a, x: torch.exp(x)),
    "tanh": (1, lambda lib, a, x: torch.tanh(x)),
    "softmax": (1, lambda lib, a, x: torch.softmax(x, -1)),
    "maximum": (2, lambda lib, a, x, y: torch.maximum(x, y)),
    "where": (3, lambda lib, a, c, x, y: torch.where(c > 0, x, y)),
    "pow": (1, lambda lib, a, x: x.pow(2)),
    "add_": (2, lambda lib, a, x, y: x.clone().add_(y)),
    "index_select": (1, lambda lib, a, x: torch.index_select(x, 0, torch.tensor([1, 0, 3, 2]))),
    "cumsum": (1, lambda lib, a, x: torch.cumsum(x, 0)),
    "flip": (1, lambda lib, a, x: torch.flip(x, [0])),
    "permute": (1, lambda lib, a, x: x.permute(1, 0)),
    "sigmoid": (1, lambda lib, a, x: torch.sigmoid(x)),
    "square": (1, lambda lib, a, x: x * x),
    "rsub_number": (1, lambda lib, a, x: 1.0 - x),
    "div_number": (1, lambda lib, a, x: x / 2.0),
    "rdiv_number": (1, lambda lib, a, x: 2.0 / x),
    "mean": (1, lambda lib, a, x: x.mean()),
    "dot": (2, lambda lib, a, x, y: torch.dot(x.reshape(-1), y.reshape(-1))),
    "bmm": (2, lambda lib, a, x, y: torch.bmm(x.unsqueeze(0), y.unsqueeze(0)).squeeze(0)),
    "chunk": (1, lambda lib, a, x: torch.cat(x.chunk(2, 0), 0)),
    "expand_as": (2, lambda lib, a, x, y: x.sum(0).expand_as(y)),
    "sub_": (2, lambda lib, a, x, y: x.clone().sub_(y)),
    "div_": (2, lambda lib, a, x, y: x.clone().div_(y)),
    "mul_": (2, lambda lib, a, x, y: x.clone().mul_(y)),
}

COLLS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "convert",
         "reinterpret", "redistribute")


def _collective(lib, name, arg, x):
    axis, src, dst, extra = arg
    s, d = _typ(lib, src), _typ(lib, dst)
    if name == "all_reduce":
        return lib.all_reduce(x, axis, src=s, dst=d)
    if name == "all_gather":
        return _square(lib.all_gather(x, axis, src=s, dst=d))
    if name == "reduce_scatter":
        return _square(lib.reduce_scatter(x, axis, src=s, dst=d))
    if name == "all_to_all":
        return lib.all_to_all(x, axis, src=s, dst=d)
    if name == "redistribute":
        return _square(lib.redistribute(x, axis, src=s, dst=d))
    fn = lib.convert if name == "convert" else lib.reinterpret
    return _square(fn(x, axis, src=s, dst=d, expert_mode=extra))


# ---- generation ----------------------------------------------------------------
#
# Both modes draw a program the same way (_draw); a _Draws says what differs:
# the fresh tensors' types, a collective's src / dst, a typed Scalar's
# letters, and how often a collective or a closing backward comes.

@dataclass(frozen=True)
class _Draws:
    rng_seed: Callable   # the seed -> the seed of the program's Random
    fresh: Callable      # (rng, axes) -> a fresh step's arg
    coll_until: float    # a step is a collective when 0.15 <= r < coll_until
    coll_type: Callable  # rng -> a collective's src or dst
    scalar_letters: str  # a typed Scalar's local types
    backward_p: float    # how often the program ends with a backward


def _draw(draws, seed, n_steps):
    rng = random.Random(draws.rng_seed(seed))
    axes = ("dp", "tp") if rng.random() < 0.75 else ("tp",)
    prog = Program(seed, axes, grad_mode=rng.random() < 0.85)

    def fresh():
        prog.steps.append(Step("fresh", "assert_type", (), draws.fresh(rng, axes)))

    def pick(n):
        return tuple(rng.randrange(1 << 30) for _ in range(n))

    for _ in range(2 + rng.randrange(2)):
        fresh()
    for _ in range(n_steps):
        r = rng.random()
        if r < 0.15:
            fresh()
        elif r < draws.coll_until:
            name = rng.choice(COLLS)
            ax = rng.choice(axes)
            src, dst = draws.coll_type(rng), draws.coll_type(rng)
            prog.steps.append(Step("coll", name, pick(1), (ax, src, dst, rng.random() < 0.5)))
        else:
            name = rng.choice(sorted(OPS))
            arg = None
            if name.endswith("_scalar"):
                arg = tuple((ax, rng.choice(draws.scalar_letters)) for ax in axes)
            prog.steps.append(Step("op", name, pick(OPS[name][0]), arg))
    if rng.random() < draws.backward_p:
        # a loss: the picked tensor summed and, per axis, reinterpreted or
        # converted to P or left as it is; then backward
        fixes = tuple((ax, rng.choice(("none", "reinterpret", "convert"))) for ax in axes)
        prog.steps.append(Step("backward", "backward", pick(1), fixes))
    return prog


def _fresh_local(rng, axes):
    types = []
    for ax in axes:
        if rng.random() < 0.03:
            continue  # an axis left out: strict mode rejects its use
        r = rng.random()
        types.append((ax, "S0" if r < 0.08 else rng.choice(LETTERS)))
    return tuple(types), rng.random() < 0.5


def _coll_type_local(rng):
    letter = rng.choice(LETTERS + "S")
    return "S0" if letter == "S" else letter


LOCAL_DRAWS = _Draws(rng_seed=lambda seed: seed, fresh=_fresh_local, coll_until=0.45,
                     coll_type=_coll_type_local, scalar_letters=LETTERS, backward_p=0.5)


def generate(seed, n_steps=8):
    """A program for local mode, drawn from seed."""
    return _draw(LOCAL_DRAWS, seed, n_steps)


# Global mode's fresh tensors: per axis R, I, P, S(0), S(1) or (rarely) V
# with no spec, which global mode refuses; now and then one spec entry
# naming both axes, in either order.
GLOBAL_LETTERS = ("R", "I", "P", "S0", "S1", "S0", "S1")
GLOBAL_COLL_TYPES = ("R", "I", "V", "P", "S0", "S1")


def _fresh_global(rng, axes):
    grad = rng.random() < 0.5
    if len(axes) == 2 and rng.random() < 0.12:
        order = ("dp", "tp") if rng.random() < 0.7 else ("tp", "dp")
        return tuple((ax, "V") for ax in axes), grad, (order, rng.randrange(2))
    types = []
    for ax in axes:
        r = rng.random()
        letter = "V" if r < 0.03 else rng.choice(GLOBAL_LETTERS)
        if letter in ("S0", "S1") and any(c == letter for _, c in types):
            letter = "R"  # one axis per dim without an explicit spec
        types.append((ax, letter))
    return tuple(types), grad


GLOBAL_DRAWS = _Draws(rng_seed=lambda seed: f"global-{seed}", fresh=_fresh_global,
                      coll_until=0.4, coll_type=lambda rng: rng.choice(GLOBAL_COLL_TYPES),
                      scalar_letters="RIP", backward_p=0.4)


def generate_global(seed, n_steps=8):
    """A program for global mode, drawn from seed as generate() draws one."""
    return _draw(GLOBAL_DRAWS, seed, n_steps)


# ---- running -----------------------------------------------------------------

def _letter(t):
    return repr(t).split(".")[-1]


def types_text(lib, x):
    if not isinstance(x, torch.Tensor):
        return "not a tensor"
    if not lib.has_local_type(x):
        return "untyped"
    lt = lib.get_local_type(x)
    text = ", ".join(f"{a}: {_letter(t)}" for a, t in sorted(lt.items(), key=lambda kv: str(kv[0])))
    try:
        spec = lib.get_partition_spec(x)
    except Exception as e:  # noqa: BLE001 -- a spec with no PartitionSpec form
        return "{" + text + f" spec {type(e).__name__}" + "}"
    if spec is not None and any(e is not None for e in spec):
        text += " spec (" + ", ".join(_entry_text(e) for e in spec) + ")"
    return "{" + text + "}"


def _entry_text(e):
    """A spec entry with axes by name (the two libraries' MeshAxis reprs differ)."""
    if e is None:
        return "None"
    if isinstance(e, tuple):
        return "(" + ", ".join(_entry_text(a) for a in e) + ")"
    return str(e).split("mesh_")[-1].rstrip(")'\"")


def _backward(lib, arg, x):
    loss = x.sum()
    if lib.has_local_type(loss):
        for ax, fix in arg:
            have = lib.get_local_type(loss).get(_axis_of(lib, loss, ax))
            if have is None or _letter(have) == "P" or fix == "none":
                continue
            src = lib.R if _letter(have) == "I" else have
            if fix == "reinterpret":
                loss = lib.reinterpret(loss, ax, src=src, dst=lib.P, expert_mode=True)
            else:
                loss = lib.convert(loss, ax, src=src, dst=lib.P)
    loss.backward()
    return loss


def _axis_of(lib, x, name):
    for a in lib.get_local_type(x):
        if str(a).endswith(name):
            return a
    return None


def _line(step, argn):
    if step.kind == "fresh":
        types, grad = step.arg[:2]
        spec = f", PartitionSpec({step.arg[2][0]} on dim {step.arg[2][1]})" if len(step.arg) > 2 else ""
        return f"assert_type(randn(4, 4{', grad' if grad else ''}), {dict(types)}{spec})"
    if step.kind == "op":
        return f"{step.name}({', '.join(argn)})" + (f" scalar {dict(step.arg)}" if step.arg else "")
    if step.kind == "coll":
        ax, s, d, expert = step.arg
        return f"{step.name}({argn[0]}, {ax}, src={s}, dst={d}" + (
            ", expert_mode" if expert and step.name in ("convert", "reinterpret") else "") + ")"
    return f"backward({argn[0]}.sum(), loss fixes {dict(step.arg)})"


def _fresh(lib, arg):
    types, grad = arg[:2]
    with lib.no_typecheck():
        x = torch.randn(4, 4, requires_grad=grad)
    ty = {ax: _typ(lib, c) for ax, c in types}
    if len(arg) > 2:
        order, dim = arg[2]
        entries = [None, None]
        entries[dim] = order
        return lib.assert_type(x, ty, lib.PartitionSpec(*entries))
    return lib.assert_type(x, ty)


def run(lib, mesh, prog, local=True):
    """Run ``prog`` under ``lib`` (cspmd or the reference), in local or
    global mode; a list of Outcomes, one per step."""
    m = mesh if len(prog.axes) == 2 else mesh[prog.axes[0]]
    pool, names, leaves, trace = [], [], [], []
    with lib.set_current_mesh(m), lib.checker.typecheck(local=local), \
            torch.set_grad_enabled(prog.grad_mode):
        for step in prog.steps:
            args = [pool[p % len(pool)] for p in step.picks] if pool else []
            argn = [names[p % len(names)] for p in step.picks] if names else []
            ops = tuple(types_text(lib, a) for a in args)
            out, err = None, ""
            line = _line(step, argn)
            try:
                if step.kind == "fresh":
                    out = _fresh(lib, step.arg)
                    if step.arg[1]:
                        leaves.append(out)
                elif step.kind == "op":
                    out = OPS[step.name][1](lib, step.arg, *args)
                elif step.kind == "coll":
                    out = _collective(lib, step.name, step.arg, args[0])
                else:
                    _backward(lib, step.arg, args[0])
                    result = "ok"
            except Exception as e:  # noqa: BLE001 -- the class is the outcome
                result = type(e).__name__
                err = (str(e).strip().splitlines() or [""])[0][:200]
            else:
                if step.kind != "backward":
                    result = types_text(lib, out)
                    pool.append(out)
                    names.append(f"t{len(names)}")
                    line = f"t{len(names) - 1} = {line}"
            after = tuple(types_text(lib, a) for a in args)
            trace.append(Outcome(line, result, ops, after, err))
            if step.kind == "backward":
                break
    return trace


def first_disagreement(mine, theirs):
    """Index of the first step whose outcomes differ, or None."""
    for i, (a, b) in enumerate(zip(mine, theirs)):
        if a.result != b.result or a.after != b.after:
            return i
    return None


def render(prog, trace, upto):
    mesh = "2x4 mesh (dp, tp)" if len(prog.axes) == 2 else "tp axis (4 ranks)"
    lines = [f"seed {prog.seed}: {mesh}, grad mode {'on' if prog.grad_mode else 'off'}"]
    for o in trace[:upto + 1]:
        lines.append(f"  {o.line:70s} -> {o.result}")
    return "\n".join(lines)


# ---- explained disagreements ---------------------------------------------------
#
# Each entry is a deliberate difference that docs/differences.md describes
# under the marker ``<!-- differential: NAME -->``; the predicate recognizes
# it from the step and the two outcomes (cspmd's, the reference's).

def _typed(result):
    return result.startswith("{")


EXPLAINED = {
    # addmm applies the R/I coercion as mm then add do
    "fused-matmuls": lambda st, a, b, prior: (
        st.name == "addmm" and _typed(a.result) and b.result == "SpmdTypeError"),
    # a condition, mask or index is a coefficient, not an operand of the sum
    "coefficients": lambda st, a, b, prior: (
        st.name in ("where", "index_select") and _typed(a.result)
        and b.result == "SpmdTypeError"),
    # expand_as(x, y) reads only y's shape: y's type takes no part
    "shape-only-operands": lambda st, a, b, prior: (
        st.name == "expand_as" and _typed(a.result)
        and a.result.split(" spec")[0].rstrip("}") == a.operands[0].split(" spec")[0].rstrip("}")),
    # F.linear decomposes into t + mm/addmm, multilinear
    "linear-decomposes": lambda st, a, b, prior: (
        st.name == "linear" and _typed(a.result) and b.result == "SpmdTypeError"),
    # the op fails in both; cspmd's type check runs before the op does
    "checked-before-running": lambda st, a, b, prior: (
        a.result == "SpmdTypeError" and b.result == "RuntimeError"),
    # the reference runs the collective before checking its input, and
    # fails inside it where the input does not fit src
    "reference-fails-inside": lambda st, a, b, prior: (
        st.kind == "coll" and a.result in ("SpmdTypeError", "ValueError")
        and b.result in ("AssertionError", "IndexError")),
    # the reference's collectives assert a contiguous input (forward, and
    # the backward collective on a gradient); cspmd's take any layout
    "non-contiguous-inputs": lambda st, a, b, prior: (
        st.kind in ("coll", "backward") and (_typed(a.result) or a.result == "ok")
        and b.result == "AssertionError"
        and "contiguous" in b.error),
    # cspmd checks the local extent a V scatter or split needs
    "collective-extents": lambda st, a, b, prior: (
        st.kind == "coll" and a.result == "ValueError" and "extent" in a.error
        and (_typed(b.result) or (b.result == "RuntimeError" and (
            "same size as output size times world size" in b.error
            or "does not match world size" in b.error)))),
    # a conversion that changes nothing leaves its input's type alone
    "unchanged-conversion-input": lambda st, a, b, prior: (
        st.kind == "coll" and a.result == b.result and a.after != b.after),
    # cspmd checks the backward pass, where a typed Scalar's type is not
    # seen: the gradient through x * Scalar(P or V) is typed as through a
    # plain number (docs/limits.md)
    "typed-scalar-backward": lambda st, a, b, prior: (
        st.kind == "backward" and a.result == "SpmdTypeError" and b.result == "ok"
        and "Gradient type mismatch" in a.error
        and any(p.name == "mul_scalar" and any(c in "PV" for _, c in p.arg) for p in prior)),
}


def explain(prog, i, mine, theirs):
    """The markers of EXPLAINED that match step i's disagreement."""
    st, prior = prog.steps[i], prog.steps[:i]
    return [name for name, pred in EXPLAINED.items() if pred(st, mine[i], theirs[i], prior)]


# ---- explained disagreements in global mode ----------------------------------
#
# Markers ``<!-- differential-global: NAME -->`` in docs/differences.md.  The
# local-mode explanations (EXPLAINED) hold in global mode too and are tried
# after these.

def _err(result):
    return not _typed(result) and result != "ok"


def _plain_v_coll(st):
    return st.kind == "coll" and "V" in (st.arg[1], st.arg[2])


EXPLAINED_GLOBAL = {
    # mean / amax over a sharded dim: SpmdTypeError, the reference ValueError
    "no-sum-reduction": lambda st, a, b, prior: (
        st.kind == "op" and a.result == "SpmdTypeError" and b.result == "ValueError"
        and "Only sum-Partial" in b.error),
    # a view that splits a sharded dim, or merges it behind others (strided)
    # (the collectives' steps reshape their results back to 4 x 4 too)
    "view-shards": lambda st, a, b, prior: (
        _typed(a.result) and b.result in ("SpmdTypeError", "DTensorPropagationError")
        and ((st.kind == "op" and st.name in ("reshape", "bmm", "cat", "stack", "chunk"))
             or "reshape" in b.error or "Reshaping" in b.error)),
    # torch 2.12+'s DTensor gives a strided shard inside an op, which the
    # reference refuses; cspmd's rules refuse the op for their own reason
    "reference-strided-shard": lambda st, a, b, prior: (
        _err(a.result) and b.result == "DTensorPropagationError"
        and "_StridedShard placement" in b.error),
    # the reference retypes a collective's input before failing
    "failed-step-keeps-operands": lambda st, a, b, prior: (
        a.result == b.result and _err(a.result) and a.after != b.after),
    # cspmd checks a collective's src/dst before the input's spec
    "collective-arguments-first": lambda st, a, b, prior: (
        st.kind == "coll" and a.result == "ValueError" and _err(b.result)
        and "no PartitionSpec entry" in b.error),
    # a collective's src or dst V (no dim) on a global axis: cspmd asks for S(i)
    "plain-v-collective": lambda st, a, b, prior: (
        _plain_v_coll(st) and (
            (a.result == "SpmdTypeError"
             and ("instead of V" in a.error or "no PartitionSpec entry" in a.error))
            or (_typed(a.result) and "no PartitionSpec entry" in b.error))),
    # the reference cannot hand a two-axis spec entry to DTensor in some ops
    "reference-two-axis-entry": lambda st, a, b, prior: (
        a.result == "SpmdTypeError" and b.result == "ValueError"
        and "Cannot convert" in b.error),
    # a gradient that is R because the forward summed over a sharded dim
    # reaches a collective's backward, which declares V (cspmd checks
    # backward; the reference does not)
    "replicated-gradient-into-collective": lambda st, a, b, prior: (
        st.kind == "backward" and a.result == "SpmdTypeError" and b.result == "ok"
        and "expected input type V" in a.error and "got R" in a.error),
    # torch's own argument check (einsum's subscripts) fails before any
    # aten op reaches cspmd; the reference checks the operands first
    "torch-argument-check-first": lambda st, a, b, prior: (
        a.result == "RuntimeError" and b.result == "SpmdTypeError"),
    # expand_as(x, y) reads only y's shape (y's spec and type take no part)
    "shape-only-operands-global": lambda st, a, b, prior: (
        st.name == "expand_as" and _typed(a.result) and a.result != b.result),
}


def explain_global(prog, i, mine, theirs):
    """The markers of EXPLAINED_GLOBAL, then of EXPLAINED, that match step i."""
    st, prior = prog.steps[i], prog.steps[:i]
    out = [n for n, pred in EXPLAINED_GLOBAL.items() if pred(st, mine[i], theirs[i], prior)]
    return out + explain(prog, i, mine, theirs)
