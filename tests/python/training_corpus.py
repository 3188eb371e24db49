"""A corpus of small but complete training loops, each correct and with
planted bugs (tests/python/test_training_corpus.py runs them).

Every loop is written once and runs three ways: unchecked, under
``typecheck()`` correct (no error, and the same losses and parameters bit
for bit), and with one planted bug (an ``SpmdTypeError`` whose "at
file:line" is the line marked ``# site: <bug>`` below).  A loop only touches
the process groups it is given, so the same code runs on the fake process
group and on Gloo ranks.

* ``dp_tp_mlp``       data parallel + tensor parallel MLP, SGD (foreach).
* ``tp_sp_block``     a TP + sequence-parallel transformer block
                      (examples/megatron_block.py), AdamW (fused), gradient
                      clipping by the global norm.
* ``ckpt_amp_accum``  activation checkpointing + bf16 autocast + gradient
                      accumulation over micro-batches, data parallel, Adam.
* ``pipeline``        two stages with an explicit gradient handed back from
                      stage 2 (send/recv on Gloo, in-process otherwise).
"""

import contextlib
import inspect
import os
import re
import sys
import traceback

import torch
import torch.distributed as dist
import torch.nn.functional as F
import torch.utils.checkpoint as cp

import cspmd as spmd
import cspmd.checker
from cspmd import I, P, R, S, V, SpmdTypeError

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "examples"))
from megatron_block import Block, loss_of, make_input  # noqa: E402

STEPS = 3
# Where the loops run: CPU here and in CI; tests/gpu/run.sh sets "cuda".
DEVICE = torch.device(os.environ.get("CSPMD_TEST_DEVICE", "cpu"))


def site(loop, bug):
    """The line marked ``# site: ... <bug>`` in ``loop``'s code (SOURCES)."""
    for fn in SOURCES[loop]:
        lines, start = inspect.getsourcelines(fn)
        for n, line in enumerate(lines, start):
            if "# site:" in line and bug in line.split("# site:")[1].replace(",", " ").split():
                return n
    raise KeyError(f"{loop}: no line marked '# site: {bug}'")


def rank():
    return dist.get_rank()


def data(*shape, seed, dtype=torch.float32):
    """This rank's data for ``seed`` (ranks hold different data)."""
    g = torch.Generator().manual_seed(1000 * seed + rank())
    with spmd.no_typecheck():
        return torch.randn(*shape, generator=g, dtype=dtype).to(DEVICE)


def param(*shape, seed, scale=0.3):
    """A parameter with the same values on every rank."""
    g = torch.Generator().manual_seed(seed)
    with spmd.no_typecheck():
        return torch.nn.Parameter((torch.randn(*shape, generator=g) * scale).to(DEVICE))


def checking(mesh, checked):
    if not checked:
        return contextlib.nullcontext()
    stack = contextlib.ExitStack()
    stack.enter_context(spmd.set_current_mesh(mesh))
    stack.enter_context(cspmd.checker.typecheck())
    return stack


def snapshot(losses, params):
    return ([x.detach().clone() for x in losses], [p.detach().clone() for p in params])


# ---------------------------------------------------------------------------
# 1. Data parallel + tensor parallel MLP with SGD
#
# x {dp: V, tp: I} -> replicated layer -> f (enter tp) -> column-parallel ->
# gelu -> row-parallel (P on tp) -> all-reduce -> loss.  Gradients are P on
# dp and are all-reduced before the step.
# ---------------------------------------------------------------------------

class EnterTP(torch.autograd.Function):
    """Megatron's f: identity forward (I -> R on tp), all-reduce of the
    gradient in backward (``reduce=False`` plants the bug)."""

    @staticmethod
    def forward(ctx, x, tp, reduce):
        ctx.tp, ctx.reduce = tp, reduce
        return spmd.convert(x, tp, src=I, dst=R)

    @staticmethod
    def backward(ctx, g):
        if ctx.reduce:
            g = spmd.all_reduce(g, ctx.tp, src=P, dst=I)
        return g, None, None


def dp_tp_mlp(mesh, bug=None, checked=True, steps=STEPS):
    dp, tp = (mesh.get_group(n) for n in mesh.mesh_dim_names)
    hidden, ffn = 8, 8 * tp.size()
    w0 = param(hidden, hidden, seed=1)
    w1 = param(hidden, ffn // tp.size(), seed=2 + tp.rank())        # column shard
    w2 = param(ffn // tp.size(), hidden, seed=5 + tp.rank())        # row shard
    params = [w0, w1, w2]
    opt = torch.optim.SGD(params, lr=0.05, momentum=0.9, foreach=True)
    losses = []
    with checking(mesh, checked):
        spmd.assert_type(w0, {dp: R, tp: I})
        spmd.assert_type(w1, {dp: R, tp: V})
        spmd.assert_type(w2, {dp: R, tp: V})
        for step in range(steps):
            x = spmd.assert_type(data(4, hidden, seed=step), {dp: V, tp: I})
            opt.zero_grad()
            h = F.gelu(x @ w0)
            h = EnterTP.apply(h, tp, bug != "wrong_collective_in_backward")
            o = spmd.reinterpret(F.gelu(h @ w1) @ w2, tp, src=V, dst=P)  # row-parallel: a partial sum
            y = o if bug == "p_through_nonlinearity" else spmd.all_reduce(o, tp, src=P, dst=I)
            loss = y.square().mean()                                     # site: p_through_nonlinearity
            loss = spmd.reinterpret(loss, dp, src=V, dst=P)
            loss.backward()                                              # site: wrong_collective_in_backward
            for p in params:
                if bug != "missing_grad_all_reduce":
                    p.grad = spmd.all_reduce(p.grad, dp, src=P, dst=R)
                if bug == "double_all_reduce":
                    p.grad = spmd.all_reduce(p.grad, dp, src=P, dst=R)   # site: double_all_reduce
            opt.step()                                                   # site: missing_grad_all_reduce
            losses.append(loss)
    return snapshot(losses, params)


# ---------------------------------------------------------------------------
# 2. TP + SP transformer block with AdamW and gradient clipping
#
# The residual stream is sequence-sharded (S(1)) on tp.  Layer-norm weights
# and row-parallel biases are R on tp: their gradients are P on tp (each
# rank saw a sequence shard) and need an all-reduce over tp as well as dp.
# The global gradient norm adds the replicated parameters' norm to the
# all-reduced squared norm of the shards.
# ---------------------------------------------------------------------------

def clip_by_global_norm(block, max_norm):
    rep = [p.grad for n, p in block.named_parameters() if replicated_on_tp(block, n)]
    shard = [p.grad for n, p in block.named_parameters() if not replicated_on_tp(block, n)]
    sq = torch.nn.utils.get_total_norm(rep).square()                    # site: missing_tp_grad_all_reduce, missing_dp_grad_all_reduce
    sq = sq + spmd.all_reduce(torch.nn.utils.get_total_norm(shard).square(), block.tp,
                              src=V, dst=R)
    torch.nn.utils.clip_grads_with_norm_(block.parameters(), max_norm, sq.sqrt())


def replicated_on_tp(block, name):
    return block.param_types()[name][block.tp] is R


def tp_sp_block(mesh, bug=None, checked=True, steps=STEPS):
    dp, tp = (mesh.get_group(n) for n in mesh.mesh_dim_names)
    with checking(mesh, checked):
        block = Block(dp, tp, sp=True, hidden=16, ffn=32, heads=4, seed=0,
                      device=DEVICE).annotate()
        params = list(block.parameters())
        opt = torch.optim.AdamW(params, lr=1e-2, fused=True)
        losses = []
        for step in range(steps):
            x = make_input(block, batch=2, seq=8, seed=10 * step + rank())
            opt.zero_grad()
            loss = loss_of(block, block(x))
            loss.backward()
            for n, p in block.named_parameters():
                if replicated_on_tp(block, n) and bug != "missing_tp_grad_all_reduce":
                    p.grad = spmd.all_reduce(p.grad, tp, src=P, dst=R)
                if bug != "missing_dp_grad_all_reduce":
                    p.grad = spmd.all_reduce(p.grad, dp, src=P, dst=R)
            if bug == "local_norm_clip":
                torch.nn.utils.clip_grad_norm_(params, 1.0)
            else:
                clip_by_global_norm(block, 1.0)
            opt.step()                                                   # site: local_norm_clip
            losses.append(loss)
    return snapshot(losses, params)


# ---------------------------------------------------------------------------
# 3. Activation checkpointing + bf16 autocast + gradient accumulation
#
# Data parallel: every micro-batch's backward accumulates a P gradient into
# .grad; the all-reduce comes once, after the last micro-batch.
# ---------------------------------------------------------------------------

def ckpt_amp_accum(mesh, bug=None, checked=True, steps=STEPS, micro=3):
    dp = mesh.get_group(mesh.mesh_dim_names[0])
    w1, w2 = param(8, 16, seed=21), param(16, 8, seed=22)
    params = [w1, w2]
    opt = torch.optim.Adam(params, lr=1e-2, foreach=False)

    def layer(x):
        h = x @ w1
        if bug == "p_through_nonlinearity":
            h = spmd.reinterpret(h, dp, src=V, dst=P)
        return F.gelu(h) @ w2                                            # site: p_through_nonlinearity

    losses = []
    with checking(mesh, checked):
        for p in params:
            spmd.assert_type(p, {dp: R})
        for step in range(steps):
            opt.zero_grad(set_to_none=step % 2 == 0)
            micro_losses = []
            for m in range(micro):
                x = spmd.assert_type(data(4, 8, seed=100 + 10 * step + m), {dp: V})
                with torch.autocast(DEVICE.type, dtype=torch.bfloat16):
                    y = cp.checkpoint(layer, x, use_reentrant=False)
                    loss = y.float().square().mean() / micro
                loss = spmd.reinterpret(loss, dp, src=V, dst=P)
                loss.backward()                                          # site: reduce_inside_accumulation
                micro_losses.append(loss.detach())
                if bug == "reduce_inside_accumulation":
                    for p in params:
                        p.grad = spmd.all_reduce(p.grad, dp, src=P, dst=R)
            if bug != "reduce_inside_accumulation":
                for p in params:
                    if bug != "missing_grad_all_reduce":
                        p.grad = spmd.all_reduce(p.grad, dp, src=P, dst=R)
            opt.step()                                                   # site: missing_grad_all_reduce
            losses.append(torch.stack(micro_losses).sum())
    return snapshot(losses, params)


# ---------------------------------------------------------------------------
# 4. Two-stage pipeline with an explicit gradient
#
# Stage 1 computes y and hands it to stage 2 (untyped, as a received tensor
# is); stage 2 computes the loss, calls backward and hands the gradient of
# its input back; stage 1 calls y.backward(received) -- untyped, so it takes
# the dual of y's type.  Each stage is data parallel over dp.  On Gloo the
# stages are different ranks (send/recv); otherwise both run here.
# ---------------------------------------------------------------------------

class InProcess:
    """Both stages in this process; a handed-over tensor arrives untyped."""

    stages = (0, 1)

    def __init__(self):
        self.box = None

    def send(self, t):
        with spmd.no_typecheck():
            self.box = t.detach().clone()

    def recv(self, like):
        t, self.box = self.box, None
        with spmd.no_typecheck():
            return t.clone()


class P2P:
    """One stage per rank group; ``peer`` is the matching rank of the other stage."""

    def __init__(self, stage, peer):
        self.stages, self.peer = (stage,), peer

    def send(self, t):
        with spmd.no_typecheck():
            dist.send(t.detach().contiguous(), self.peer)

    def recv(self, like):
        with spmd.no_typecheck():
            t = torch.empty_like(like)
            dist.recv(t, self.peer)
            return t


def pipeline(mesh, link, bug=None, checked=True, steps=STEPS):
    """``mesh`` is the stage's dp mesh; ``link`` an InProcess or P2P."""
    dp = mesh.get_group(mesh.mesh_dim_names[0])
    w = {0: param(8, 8, seed=31), 1: param(8, 8, seed=32)}
    opt = {s: torch.optim.SGD([w[s]], lr=0.1, foreach=False) for s in link.stages}
    params = [w[s] for s in link.stages]
    losses, error = [], None
    with checking(mesh, checked):
        for s in link.stages:
            spmd.assert_type(w[s], {dp: R})
        for step in range(steps):
            for s in link.stages:
                opt[s].zero_grad()
            try:
                if 0 in link.stages:
                    x = spmd.assert_type(data(4, 8, seed=200 + step), {dp: V})
                    y = torch.tanh(x @ w[0])
                    link.send(y)
                if 1 in link.stages:
                    h = link.recv(torch.empty(4, 8, device=DEVICE))
                    h = spmd.assert_type(h.requires_grad_(), {dp: V})
                    try:
                        z = torch.tanh(h @ w[1])
                        if bug == "p_through_nonlinearity":
                            z = spmd.reinterpret(z, dp, src=V, dst=P)
                        loss = spmd.reinterpret(z.square().mean(), dp, src=V, dst=P)  # site: p_through_nonlinearity
                        loss.backward()
                        losses.append(loss)
                    finally:   # the other stage waits for a gradient either way
                        link.send(h.grad if h.grad is not None else torch.zeros(4, 8, device=DEVICE))
                if 0 in link.stages:
                    g = link.recv(y)
                    if bug == "reduce_received_gradient":
                        g = spmd.all_reduce(spmd.assert_type(g, {dp: P}), dp, src=P, dst=R)
                    y.backward(g)                                        # site: reduce_received_gradient
            except SpmdTypeError as e:
                error = e
                break
            for s in link.stages:
                if bug != "missing_grad_all_reduce":
                    w[s].grad = spmd.all_reduce(w[s].grad, dp, src=P, dst=R)
                opt[s].step()                                            # site: missing_grad_all_reduce
    if error is not None:
        raise error
    return snapshot(losses, params)


# ---------------------------------------------------------------------------
# The catalogue: loop -> (the axis each planted bug lives on)
# ---------------------------------------------------------------------------

BUGS = {
    "dp_tp_mlp": {"missing_grad_all_reduce": "dp", "double_all_reduce": "dp",
                  "p_through_nonlinearity": "tp", "wrong_collective_in_backward": "tp"},
    "tp_sp_block": {"missing_tp_grad_all_reduce": "tp", "missing_dp_grad_all_reduce": "dp",
                    "local_norm_clip": "tp"},
    "ckpt_amp_accum": {"missing_grad_all_reduce": "dp", "reduce_inside_accumulation": "dp",
                       "p_through_nonlinearity": "dp"},
    "pipeline": {"missing_grad_all_reduce": "dp", "reduce_received_gradient": "dp",
                 "p_through_nonlinearity": "dp"},
}

SOURCES = {"dp_tp_mlp": [dp_tp_mlp], "tp_sp_block": [tp_sp_block, clip_by_global_norm],
           "ckpt_amp_accum": [ckpt_amp_accum], "pipeline": [pipeline]}

# Which pipeline stage raises for each bug (P2P: the other stage finishes).
PIPELINE_STAGE = {"missing_grad_all_reduce": (0, 1), "reduce_received_gradient": (0,),
                  "p_through_nonlinearity": (1,)}


# ---------------------------------------------------------------------------
# Running the catalogue
# ---------------------------------------------------------------------------

def two_axis_shapes(ws, axis=None):
    """(dp, tp) mesh shapes for ``ws`` ranks where ``axis`` has size > 1."""
    if ws == 2:
        return {"dp": [(2, 1)], "tp": [(1, 2)], None: [(2, 1), (1, 2)]}[axis]
    return [(2, ws // 2)]


def points_at(e, line):
    """The error names ``line`` of this file: in its "at file:line" when it
    has one (errors found in an op), else as the innermost frame of this
    file in its traceback (errors raised by backward() itself)."""
    here = os.path.abspath(__file__)
    named = [int(n) for f, n in re.findall(r"\bat (\S+):(\d+)\s*$", str(e), re.M)
             if os.path.abspath(f) == here]
    if named:
        return named[-1] == line
    if re.search(r"\bat \S+:\d+\s*$", str(e), re.M):
        return False      # it names some other file
    frames = [fr for fr in traceback.extract_tb(e.__traceback__)
              if os.path.abspath(fr.filename) == here]
    return bool(frames) and frames[-1].lineno == line


def check_correct(run, exact=True):
    """None if the checked run passes and equals the unchecked one bit for bit."""
    try:
        got = run(checked=True)
    except Exception as e:  # noqa: BLE001 -- reported to the parent
        return f"the correct loop raised {type(e).__name__}: {e}"
    if not exact:
        return None
    want = run(checked=False)
    for kind, g, w in zip(("losses", "parameters"), got, want):
        if len(g) != len(w) or not all(torch.equal(a, b) for a, b in zip(g, w)):
            return f"checked {kind} differ from unchecked: {g} vs {w}"
    return None


def check_bug(run, loop, bug, raises=True):
    """None if the planted ``bug`` raises SpmdTypeError at its marked line
    (or, with ``raises=False``, if this rank finishes: the bug is elsewhere)."""
    line = site(loop, bug)
    where = f"{os.path.basename(__file__)}:{line}"
    try:
        run(bug=bug, checked=True, steps=1)
    except SpmdTypeError as e:
        if not raises:
            return f"{bug}: raised on a rank without the bug: {e}"
        return None if points_at(e, line) else f"{bug}: error does not point at {where}:\n{e}"
    except Exception as e:  # noqa: BLE001
        return f"{bug}: raised {type(e).__name__}, not SpmdTypeError: {e}"
    return f"{bug}: not caught" if raises else None


def run_catalogue(ws, make_mesh, pipeline_link, gathers_exact=True, names=("dp", "tp")):
    """Every loop, correct and with each bug, on meshes of ``ws`` ranks.

    ``make_mesh(shape, names)`` builds a DeviceMesh; ``pipeline_link(ws)``
    returns (stage mesh, link factory, stages of this rank) for the pipeline.
    ``gathers_exact=False`` (the fake process group, whose all_gather and
    reduce_scatter leave their outputs uninitialized) skips the bit-for-bit
    comparison of the loop that gathers; it still must run without error.
    ``names``: the (data parallel, tensor parallel) mesh dim names.
    Returns {case name: None (passed) or a failure message}."""
    out = {}
    for loop in (dp_tp_mlp, tp_sp_block):
        name = loop.__name__
        for shape in two_axis_shapes(ws):
            mesh = make_mesh(shape, names)
            out[f"{name}{shape}/correct"] = check_correct(
                lambda **kw: loop(mesh, **kw), exact=gathers_exact or loop is dp_tp_mlp)
        for bug, axis in BUGS[name].items():
            for shape in two_axis_shapes(ws, axis):
                mesh = make_mesh(shape, names)
                out[f"{name}{shape}/{bug}"] = check_bug(lambda **kw: loop(mesh, **kw), name, bug)
    mesh = make_mesh((ws,), names[:1])
    out["ckpt_amp_accum/correct"] = check_correct(lambda **kw: ckpt_amp_accum(mesh, **kw))
    for bug in BUGS["ckpt_amp_accum"]:
        out[f"ckpt_amp_accum/{bug}"] = check_bug(lambda **kw: ckpt_amp_accum(mesh, **kw),
                                                 "ckpt_amp_accum", bug)
    mesh, link, stages = pipeline_link(ws)
    out["pipeline/correct"] = check_correct(lambda **kw: pipeline(mesh, link(), **kw))
    if mesh.size() > 1:   # types on a size-1 axis are trivial: nothing to plant on
        for bug in BUGS["pipeline"]:
            raises = any(s in PIPELINE_STAGE[bug] for s in stages)
            out[f"pipeline/{bug}"] = check_bug(lambda **kw: pipeline(mesh, link(), **kw),
                                               "pipeline", bug, raises)
    return out


def gloo_worker(rank_, ws):
    """One Gloo rank of test_training_corpus: the whole catalogue."""
    from torch.distributed.device_mesh import init_device_mesh

    torch.set_num_threads(1)
    meshes = {}

    def make_mesh(shape, names):
        if (shape, names) not in meshes:
            meshes[shape, names] = init_device_mesh("cpu", shape, mesh_dim_names=names)
        return meshes[shape, names]

    def pipeline_link(ws):
        m = make_mesh((2, ws // 2), ("pp", "dp"))
        stage = rank_ * 2 // ws
        peer = rank_ + ws // 2 if stage == 0 else rank_ - ws // 2
        return m["dp"], lambda: P2P(stage, peer), (stage,)

    return run_catalogue(ws, make_mesh, pipeline_link)
