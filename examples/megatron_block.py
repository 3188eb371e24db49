"""A Megatron-style transformer block on a dp x tp mesh, type-checked forward
*and* backward.

Tensor parallelism follows Megatron-LM: column-parallel QKV and MLP-up
(weights sharded on the output dim, V on tp), row-parallel attention-out and
MLP-down (weights sharded on the input dim, so their outputs are P on tp and
get reduced), heads split over tp.  Without sequence parallelism the
residual stream is Invariant on tp (every tp rank holds the same activation
and repeats the layer norms); with sequence parallelism (``sp=True``) it is
sharded on the sequence dim (``S(1)``) and the reductions become
reduce-scatters / all-gathers.  Data parallelism: activations are V on dp,
parameters R on dp, so every parameter's gradient is P on dp (the pending
sum a data-parallel reducer would all-reduce).

Gradient types on tp follow duality: R -> P, I -> I, V -> V.  A V
gradient reaching an R parameter (e.g. a layer-norm weight applied to a
sequence shard) is a per-rank contribution to the pending sum and is typed P.

Usage (the fake process group is enough to check types)::

    block = build_block(dp, tp, sp=True)
    x = make_input(block)
    with spmd.set_current_mesh(mesh), typecheck():
        run_step(block, x)
    block.w1.grad  # typed {dp: P, tp: V}

``Block.enter_tp`` / ``Block.exit_tp`` are the "f" and "g" operators of the
Megatron paper (enter / leave the tensor-parallel region); the tests in
tests/python/test_backward_bugs.py override them to plant bugs.

Run as a script to print each parameter's type and gradient type.
"""

import torch
import torch.nn.functional as F

import cspmd as spmd
from cspmd import I, P, R, S, V

__all__ = ["Block", "build_block", "make_input", "loss_of", "run_step"]


class Block(torch.nn.Module):
    """Pre-LN transformer block: x + Attn(LN(x)), then + MLP(LN(.)).

    ``dp``/``tp`` are the process groups of the two mesh axes.  Sizes are the
    global ones; the tp-sharded dims are divided by the tp size.  The
    parameters are drawn on the CPU (the same values everywhere) and moved
    to ``device``.
    """

    def __init__(self, dp, tp, *, sp=False, hidden=32, ffn=64, heads=8, seed=0,
                 dtype=torch.float32, device=None):
        super().__init__()
        self.dp, self.tp, self.sp = dp, tp, sp
        self.tp_size = tp.size()
        if heads % self.tp_size or hidden % heads or ffn % self.tp_size:
            raise ValueError(f"heads ({heads}) and ffn ({ffn}) must divide by the tp size "
                             f"({self.tp_size}), and hidden ({hidden}) by heads")
        self.hidden, self.ffn, self.heads = hidden, ffn, heads
        self.local_heads = heads // self.tp_size
        self.head_dim = hidden // heads
        h_loc, f_loc = hidden // self.tp_size, ffn // self.tp_size
        g = torch.Generator().manual_seed(seed)

        def p(*shape, scale=0.1, fill=None):
            with spmd.no_typecheck():
                t = (torch.full(shape, fill, dtype=dtype) if fill is not None
                     else torch.randn(*shape, generator=g, dtype=dtype) * scale)
                t = t.to(device) if device is not None else t
            return torch.nn.Parameter(t)

        self.ln1_w, self.ln1_b = p(hidden, fill=1.0), p(hidden, fill=0.0)
        self.w_qkv, self.b_qkv = p(3 * h_loc, hidden), p(3 * h_loc)    # column-parallel
        self.w_o, self.b_o = p(hidden, h_loc), p(hidden)                # row-parallel
        self.ln2_w, self.ln2_b = p(hidden, fill=1.0), p(hidden, fill=0.0)
        self.w1, self.b1 = p(f_loc, hidden), p(f_loc)                   # column-parallel
        self.w2, self.b2 = p(hidden, f_loc), p(hidden)                  # row-parallel

    # -- types ---------------------------------------------------------------

    def param_types(self):
        """``{name: {dp: R, tp: R|I|V}}``: the forward type of each parameter."""
        dp, tp = self.dp, self.tp
        rep = R if self.sp else I   # layer norms and row-parallel biases
        tp_type = {"ln1_w": rep, "ln1_b": rep, "ln2_w": rep, "ln2_b": rep,
                   "w_qkv": V, "b_qkv": V, "w1": V, "b1": V, "w_o": V, "w2": V,
                   "b_o": rep, "b2": rep}
        return {n: {dp: R, tp: tp_type[n]} for n, _ in self.named_parameters()}

    def annotate(self):
        """assert_type every parameter (installs the gradient-duality check)."""
        types = self.param_types()
        for n, prm in self.named_parameters():
            spmd.assert_type(prm, types[n])
        return self

    def input_type(self):
        return {self.dp: V, self.tp: S(1) if self.sp else I}

    # -- entering / leaving the tensor-parallel region -----------------------

    def enter_tp(self, h):
        """f: the residual stream -> R on tp (backward reduces the gradient)."""
        if self.sp:
            return spmd.all_gather(h, self.tp, src=S(1), dst=R)
        return spmd.convert(h, self.tp, src=I, dst=R)

    def exit_tp(self, o):
        """g: P on tp -> the residual stream's type (backward: no reduction)."""
        if self.sp:
            return spmd.reduce_scatter(o, self.tp, src=P, dst=S(1))
        return spmd.all_reduce(o, self.tp, src=P, dst=I)

    # -- forward ---------------------------------------------------------------

    def attention(self, x):
        h = self.enter_tp(F.layer_norm(x, (self.hidden,), self.ln1_w, self.ln1_b))   # R
        b, s, _ = h.shape
        qkv = F.linear(h, self.w_qkv, self.b_qkv)                                     # V
        q, k, v = (t.view(b, s, self.local_heads, self.head_dim).transpose(1, 2)
                   for t in qkv.chunk(3, dim=-1))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        a = a.transpose(1, 2).reshape(b, s, self.local_heads * self.head_dim)          # V
        return self.exit_tp(F.linear(a, self.w_o)) + self.b_o                           # P -> I|S(1)

    def mlp(self, x):
        h = self.enter_tp(F.layer_norm(x, (self.hidden,), self.ln2_w, self.ln2_b))
        m = F.gelu(F.linear(h, self.w1, self.b1))                                      # V
        return self.exit_tp(F.linear(m, self.w2)) + self.b2

    def forward(self, x):
        x = x + self.attention(x)
        return x + self.mlp(x)


def build_block(dp, tp, *, sp=False, hidden=32, ffn=64, heads=8, seed=0, dtype=torch.float32,
                device=None, annotate=True):
    """A Block with its parameters annotated (``annotate=False``: left untyped,
    call ``block.annotate()`` later)."""
    block = Block(dp, tp, sp=sp, hidden=hidden, ffn=ffn, heads=heads, seed=seed, dtype=dtype,
                  device=device)
    return block.annotate() if annotate else block


def make_input(block, batch=2, seq=16, seed=1):
    """This rank's input: [batch, seq / tp if sp else seq, hidden], typed
    {dp: V, tp: S(1) | I}."""
    if block.sp and seq % block.tp_size:
        raise ValueError(f"seq ({seq}) must divide by the tp size ({block.tp_size})")
    s = seq // block.tp_size if block.sp else seq
    g = torch.Generator().manual_seed(seed)
    with spmd.no_typecheck():
        x = torch.randn(batch, s, block.hidden, generator=g, dtype=block.ln1_w.dtype)
        x = x.to(block.ln1_w.device)
    return spmd.assert_type(x, block.input_type())


def loss_of(block, y):
    """Mean square of the local output, declared the partial sum of the global
    loss on every axis where ranks hold different data."""
    loss = y.float().pow(2).mean()
    loss = spmd.reinterpret(loss, block.dp, src=V, dst=P)
    if block.sp:   # each tp rank holds a sequence shard
        loss = spmd.reinterpret(loss, block.tp, src=V, dst=P)
    return loss


def run_step(block, x, *, backward=True):
    """One training step's forward (+ backward): clears the gradients, returns
    the loss.  Checking is whatever the caller's context says."""
    for prm in block.parameters():
        prm.grad = None
    loss = loss_of(block, block(x))
    if backward:
        loss.backward()
    return loss


def _main():
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    import cspmd.checker

    if not dist.is_initialized():
        dist.init_process_group(backend="fake", rank=0, world_size=8)
    mesh = init_device_mesh("cpu", (2, 4), mesh_dim_names=("dp", "tp"))
    dp, tp = mesh.get_group("dp"), mesh.get_group("tp")

    def fmt(t):
        return "{" + ", ".join(f"{a!r}: {v!r}" for a, v in spmd.get_local_type(t).items()) + "}"

    for sp in (False, True):
        block = build_block(dp, tp, sp=sp)
        x = make_input(block)
        with spmd.set_current_mesh(mesh), cspmd.checker.typecheck():
            loss = run_step(block, x)
        print(f"sp={sp}: loss {fmt(loss)}")
        for n, prm in block.named_parameters():
            print(f"  {n:6s} {fmt(prm):32s} grad {fmt(prm.grad)}")


if __name__ == "__main__":
    _main()
