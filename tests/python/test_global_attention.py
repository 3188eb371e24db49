"""Global mode on real ranks: a 2-D (dp x tp) causal self-attention block
checked with ``typecheck(local=False)`` on 4 Gloo ranks -- q/k/v
projections column-parallel, the heads split out of the tp-sharded feature
dim by a view, scaled_dot_product_attention per local head, the output
projection row-parallel with its all_reduce (or, sequence parallel, an
all_gather before and a reduce_scatter after) -- whose gathered output and
gradients equal the dense single-process computation.  The explicit form,
softmax(q @ k^T) @ v with the batch on dp and the heads on tp, is checked
the same way: torch's matmul folds (batch, heads) into one dim, whose
shard is strided (docs/global.md)."""

import pytest
import torch
import torch.nn.functional as F

import cspmd as spmd
import gloo_harness
from cspmd import I, P, R, S

B, T, D, H = 4, 4, 8, 4  # batch, sequence, model dim, heads
HD = D // H


def _dense():
    torch.manual_seed(0)
    x = torch.randn(B, T, D)
    ws = {n: (torch.randn(D, D) / D ** 0.5).requires_grad_() for n in ("wq", "wk", "wv", "wo")}
    return x, ws


def _attention(x, ws, heads, project=lambda t: t, explicit=False):
    """The block on whatever x and weights hold: dense, or one rank's part
    (heads: the number of local heads); explicit: softmax(q @ k^T) @ v
    under a causal mask instead of scaled_dot_product_attention."""
    b, t = x.shape[0], x.shape[1]

    def split(w):  # (b, t, heads * HD) -> (b, heads, t, HD)
        return (x @ w).view(b, t, heads, HD).transpose(1, 2)

    q, k, v = split(ws["wq"]), split(ws["wk"]), split(ws["wv"])
    if explicit:
        causal = torch.ones(t, t, dtype=torch.bool).tril()
        s = (q @ k.transpose(-2, -1) / HD ** 0.5).masked_fill(~causal, float("-inf"))
        o = torch.softmax(s, -1) @ v
    else:
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return project(o.transpose(1, 2).reshape(b, t, heads * HD)) @ ws["wo"]


def _chunk(t, dim, i, n):
    return t.detach().chunk(n, dim)[i].contiguous()


def _attention_rank(rank, ws_n, sequence_parallel, explicit=False):
    from torch.distributed.device_mesh import init_device_mesh

    x, ws = _dense()
    ndp, ntp = 2, ws_n // 2
    mesh = init_device_mesh("cpu", (ndp, ntp), mesh_dim_names=("dp", "tp"))
    dp, tp = mesh.get_group("dp"), mesh.get_group("tp")
    di, ti = mesh.get_coordinate()
    out = {}
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck(local=False):
        xb = _chunk(x, 0, di, ndp)
        if sequence_parallel:  # the block's input arrives sharded on the sequence
            xl = spmd.assert_type(_chunk(xb, 1, ti, ntp), {dp: S(0), tp: S(1)})
            xin = spmd.all_gather(xl, tp, src=S(1), dst=R)
        else:
            xin = spmd.assert_type(xb, {dp: S(0), tp: R})
        local = {}
        for n in ("wq", "wk", "wv"):  # column-parallel: heads split across tp
            local[n] = spmd.assert_type(_chunk(ws[n], 1, ti, ntp).requires_grad_(),
                                        {dp: R, tp: S(1)})
        local["wo"] = spmd.assert_type(_chunk(ws["wo"], 0, ti, ntp).requires_grad_(),
                                       {dp: R, tp: S(0)})
        seen = {}

        def project(o):
            seen["o"] = str(spmd.get_partition_spec(o))
            return o

        y = _attention(xin, local, H // ntp, project, explicit)   # row-parallel: {tp: P}
        out["y_types"] = str(spmd.get_local_type(y)[spmd.MeshAxis.of(tp)])
        if sequence_parallel:
            y = spmd.reduce_scatter(y, tp, src=P, dst=S(1))   # {dp: S(0), tp: S(1)}
        else:
            y = spmd.all_reduce(y, tp, src=P, dst=I)          # {dp: S(0), tp: I}
        out["o_spec"], out["y_spec"] = seen["o"], str(spmd.get_partition_spec(y))
        part = (y * y).sum()
        if sequence_parallel:
            part = spmd.all_reduce(part, tp, src=P, dst=I)
        loss = spmd.all_reduce(part, dp, src=P, dst=I)
        loss.backward()
        out["loss"] = loss.detach()
        if sequence_parallel:
            y = spmd.all_gather(y.detach(), tp, src=S(1), dst=R)
        out["y"] = spmd.all_gather(y.detach(), dp, src=S(0), dst=R)
        for n, w in local.items():
            dim = 0 if n == "wo" else 1
            g = w.grad
            out[n + "_spec"] = str(spmd.get_partition_spec(g))
            g = spmd.all_reduce(g, dp, src=P, dst=R)
            out[n + "_grad"] = spmd.all_gather(g, tp, src=S(dim), dst=R)
    return out


@pytest.mark.parametrize("sequence_parallel,explicit", [(False, False), (True, False),
                                                       (False, True)],
                         ids=["all_reduce", "seq_parallel", "explicit_softmax"])
def test_2d_attention_on_gloo_matches_dense(sequence_parallel, explicit):
    res = gloo_harness.run_world(4, _attention_rank, sequence_parallel, explicit, timeout=180)
    x, ws = _dense()
    y = _attention(x, ws, H, explicit=explicit)
    (y * y).sum().backward()
    for out in res:
        assert out["o_spec"] == "PartitionSpec(mesh_dp, None, mesh_tp)"
        assert out["y_types"] == "P"
        assert out["y_spec"] == ("PartitionSpec(mesh_dp, mesh_tp, None)" if sequence_parallel
                                 else "PartitionSpec(mesh_dp, None, None)")
        torch.testing.assert_close(out["y"], y.detach())
        torch.testing.assert_close(out["loss"], (y * y).sum().detach())
        for n in ("wq", "wk", "wv"):
            assert out[n + "_spec"] == "PartitionSpec(None, mesh_tp)"
            torch.testing.assert_close(out[n + "_grad"], ws[n].grad)
        assert out["wo_spec"] == "PartitionSpec(mesh_tp, None)"
        torch.testing.assert_close(out["wo_grad"], ws["wo"].grad)


def test_explicit_attention_over_two_sharded_batch_dims(mesh, dp, tp):
    """q @ k^T with the batch on dp and the heads on tp: torch's matmul
    merges (batch, heads) into one dim, whose per-rank part is a strided
    shard of the global merged dim; the bmm keeps it and the view back
    makes it ordinary: the result is sharded as scaled_dot_product_attention's."""
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck(local=False):
        q = spmd.assert_type(torch.randn(2, 3, 5, 4), {dp: S(0), tp: S(1)})
        o = torch.softmax(q @ q.transpose(-2, -1), -1) @ q
        assert spmd.get_partition_spec(o) == spmd.get_partition_spec(q)
        o = F.scaled_dot_product_attention(q, q, q)
        assert spmd.get_partition_spec(o) == spmd.get_partition_spec(q)


def test_attention_shard_rule_refusals(mesh, dp, tp):
    """The sdpa rule: the key's sequence dim, the head dim, mixed placements
    and a sequence-sharded query under a causal mask are refused."""
    ax = spmd.MeshAxis.of
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck(local=False):
        def t(tp_ty):
            return spmd.assert_type(torch.randn(2, 4, 8, 4), {dp: R, tp: tp_ty})

        q2, r = t(S(2)), t(R)
        o = F.scaled_dot_product_attention(q2, r, r)          # queries split: fine
        assert spmd.get_partition_spec(o) == spmd.PartitionSpec(None, None, ax(tp), None)
        for args, kw, why in [
            ((q2, r, r), {"is_causal": True}, "under a causal mask"),
            ((r, t(S(2)), r), {}, "key / value sequence dim 2 is sharded"),
            ((t(S(3)), r, r), {}, "head dim 3 is sharded"),
            ((t(S(1)), t(S(0)), t(S(1))), {}, "placed S\\(1\\), S\\(0\\), S\\(1\\)"),
        ]:
            with pytest.raises(spmd.SpmdTypeError, match="No valid sharding strategy for "
                               "aten::_scaled_dot_product_flash_attention_for_cpu on axis "
                               "mesh_tp: .*" + why):
                F.scaled_dot_product_attention(*args, **kw)
