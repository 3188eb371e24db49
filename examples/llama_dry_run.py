"""A dry run of one training step of a Llama-style 8B decoder, type-checked on
the `meta` device: no parameter memory, no GPU, one process standing in for
all 64 ranks of a (dp=8, tp=8) mesh on the fake process group.

Parallelism (Megatron-LM style):
* data parallel over ``dp``: activations V on dp, parameters R on dp, so each
  gradient is a pending sum (P) that an all-reduce over dp settles;
* tensor parallel over ``tp``: column-parallel QKV / gate / up projections
  (weights V on tp: each rank holds some heads or some MLP columns),
  row-parallel attention-out / down projections whose outputs are partial
  sums (P on tp);
* sequence parallel: the residual stream is sharded on the sequence dim
  (S(1) on tp); an all-gather enters each tensor-parallel region and a
  reduce-scatter leaves it; RMSNorm weights are R on tp and see a sequence
  shard, so their gradients need an all-reduce over tp as well;
* vocab-parallel embedding (masked lookup, then reduce-scatter) and LM head
  (logits V on tp, gathered over the vocab dim before the cross-entropy).
Rotary embeddings are left out: they change no type.

    python examples/llama_dry_run.py                 # passes: prints the time
    python examples/llama_dry_run.py --bug 1         # one planted bug, caught
    python examples/llama_dry_run.py --layers 2      # a smaller model

Bugs: 1 = gradients not all-reduced over dp; 2 = attention output added to
the residual without its reduce-scatter; 3 = RMSNorm weight gradients not
all-reduced over tp.
"""

import argparse
import time

import torch
import torch.nn.functional as F

import cspmd as spmd
from cspmd import I, P, R, S, V

LLAMA_8B = dict(hidden=4096, layers=32, heads=32, kv_heads=8, ffn=14336, vocab=128256)


class Config:
    def __init__(self, dp, tp, *, hidden, layers, heads, kv_heads, ffn, vocab, bug=0):
        self.dp, self.tp, self.bug = dp, tp, bug
        self.hidden, self.layers, self.vocab = hidden, layers, vocab
        self.tp_size = tp.size()
        for what, n in (("heads", heads), ("kv_heads", kv_heads), ("ffn", ffn),
                        ("vocab", vocab)):
            if n % self.tp_size:
                raise ValueError(f"{what} ({n}) must divide by the tp size ({self.tp_size})")
        self.head_dim = hidden // heads
        self.local_heads, self.local_kv = heads // self.tp_size, kv_heads // self.tp_size
        self.local_ffn, self.local_vocab = ffn // self.tp_size, vocab // self.tp_size


def _param(cfg, shape, tp_type):
    """A parameter on meta, R on dp and ``tp_type`` on tp."""
    p = torch.nn.Parameter(torch.empty(*shape, device="meta"))
    return spmd.assert_type(p, {cfg.dp: R, cfg.tp: tp_type})


class Layer(torch.nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        h, hd = cfg.hidden, cfg.head_dim
        self.attn_norm = _param(cfg, (h,), R)
        self.wqkv = _param(cfg, (h, (cfg.local_heads + 2 * cfg.local_kv) * hd), V)
        self.wo = _param(cfg, (cfg.local_heads * hd, h), V)
        self.mlp_norm = _param(cfg, (h,), R)
        self.w_gate_up = _param(cfg, (h, 2 * cfg.local_ffn), V)
        self.w_down = _param(cfg, (cfg.local_ffn, h), V)

    def enter_tp(self, x):
        """Sequence shard -> whole sequence on every tp rank (backward:
        reduce-scatter of the partial gradients)."""
        return spmd.all_gather(x, self.cfg.tp, src=S(1), dst=R)

    def exit_tp(self, y):
        """Row-parallel partial sums -> the sequence shard of their sum."""
        y = spmd.reinterpret(y, self.cfg.tp, src=V, dst=P)
        return spmd.reduce_scatter(y, self.cfg.tp, src=P, dst=S(1))

    def attention(self, x):
        cfg = self.cfg
        b, s, _ = x.shape
        q, k, v = (x @ self.wqkv).split(
            [cfg.local_heads * cfg.head_dim, cfg.local_kv * cfg.head_dim,
             cfg.local_kv * cfg.head_dim], dim=-1)
        q = q.view(b, s, cfg.local_heads, cfg.head_dim).transpose(1, 2)
        k = k.view(b, s, cfg.local_kv, cfg.head_dim).transpose(1, 2)
        v = v.view(b, s, cfg.local_kv, cfg.head_dim).transpose(1, 2)
        rep = cfg.local_heads // cfg.local_kv
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return o.transpose(1, 2).reshape(b, s, -1) @ self.wo

    def mlp(self, x):
        gate, up = (x @ self.w_gate_up).chunk(2, dim=-1)
        return (F.silu(gate) * up) @ self.w_down

    def forward(self, x):
        norm = F.rms_norm(x, (self.cfg.hidden,), self.attn_norm)
        attn = self.attention(self.enter_tp(norm))
        if self.cfg.bug == 2:
            x = x + spmd.reinterpret(attn, self.cfg.tp, src=V, dst=P)  # bug 2: no reduce-scatter
        else:
            x = x + self.exit_tp(attn)
        norm = F.rms_norm(x, (self.cfg.hidden,), self.mlp_norm)
        return x + self.exit_tp(self.mlp(self.enter_tp(norm)))


class Decoder(torch.nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.embed = _param(cfg, (cfg.local_vocab, cfg.hidden), V)
        self.layers = torch.nn.ModuleList(Layer(cfg) for _ in range(cfg.layers))
        self.norm = _param(cfg, (cfg.hidden,), R)
        self.head = _param(cfg, (cfg.hidden, cfg.local_vocab), V)

    def embed_tokens(self, ids):
        """Vocab-parallel lookup: each tp rank looks up the ids in its vocab
        slice (zeros elsewhere); the reduce-scatter sums the slices and
        shards the sequence."""
        cfg = self.cfg
        # Rank r's slice starts at r * local_vocab; the process stands in for
        # rank 0, whose slice starts at 0.
        outside = (ids < 0) | (ids >= cfg.local_vocab)
        rows = F.embedding(ids.masked_fill(outside, 0), self.embed)
        rows = rows.masked_fill(outside.unsqueeze(-1), 0.0)
        rows = spmd.reinterpret(rows, cfg.tp, src=V, dst=P)
        return spmd.reduce_scatter(rows, cfg.tp, src=P, dst=S(1))

    def forward(self, ids, labels):
        cfg = self.cfg
        x = self.embed_tokens(ids)
        for layer in self.layers:
            x = layer(x)
        x = F.rms_norm(x, (cfg.hidden,), self.norm)
        logits = spmd.all_gather(x, cfg.tp, src=S(1), dst=R) @ self.head
        logits = spmd.all_gather(logits, cfg.tp, src=S(2), dst=I)  # same loss on every tp rank
        loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten())
        return spmd.reinterpret(loss, cfg.dp, src=V, dst=P)  # each dp rank: its batch


def reduce_gradients(model):
    """What a data-parallel reducer and Megatron's sequence-parallel
    gradient all-reduce do: settle every pending gradient sum."""
    cfg = model.cfg
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm") and cfg.bug != 3:
                p.grad = spmd.all_reduce(p.grad, cfg.tp, src=P, dst=R)
            if cfg.bug != 1:
                p.grad = spmd.all_reduce(p.grad, cfg.dp, src=P, dst=R)


def dry_run(dp, tp, *, batch=1, seq=4096, bug=0, **shape):
    """Build the model on meta and run one checked step (the caller holds
    the current mesh and typecheck()); returns the loss."""
    cfg = Config(dp, tp, bug=bug, **{**LLAMA_8B, **shape})
    model = Decoder(cfg)
    ids = spmd.assert_type(torch.empty(batch, seq, dtype=torch.long, device="meta"),
                           {dp: V, tp: R})
    # I on tp: the labels meet the logits, gathered as I, in the loss.
    labels = spmd.assert_type(torch.empty(batch, seq, dtype=torch.long, device="meta"),
                              {dp: V, tp: I})
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    loss = model(ids, labels)
    loss.backward()
    reduce_gradients(model)
    opt.step()
    return loss


def main(argv=None):
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    import cspmd.checker

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bug", type=int, default=0, choices=[0, 1, 2, 3])
    ap.add_argument("--layers", type=int, default=LLAMA_8B["layers"])
    args = ap.parse_args(argv)
    dist.init_process_group("fake", rank=0, world_size=64)
    mesh = init_device_mesh("cpu", (8, 8), mesh_dim_names=("dp", "tp"))
    start = time.perf_counter()
    try:
        with spmd.set_current_mesh(mesh), cspmd.checker.typecheck():
            dry_run(mesh.get_group("dp"), mesh.get_group("tp"), bug=args.bug,
                    layers=args.layers)
        print(f"dry run ok: {args.layers} layers, world size 64, "
              f"{time.perf_counter() - start:.1f} s")
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
