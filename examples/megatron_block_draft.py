import torch, torch.distributed as dist, torch.nn.functional as F
import cspmd as spmd, cspmd.checker
from cspmd import R, I, V, P, S
dist.init_process_group(backend="fake", rank=0, world_size=8)
from torch.distributed.device_mesh import init_device_mesh
mesh = init_device_mesh("cpu", (2, 4), mesh_dim_names=("dp", "tp"))
dp, tp = mesh.get_group("dp"), mesh.get_group("tp")
T = spmd.get_local_type
torch.manual_seed(0)
H, FF, B, Sq, NH = 16, 32, 2, 8, 2
def param(*shape, t_tp):
    with spmd.no_typecheck(): p = torch.nn.Parameter(torch.randn(*shape) * 0.1)
    spmd.assert_type(p, {dp: R, tp: t_tp}); return p
ln_w, ln_b = param(H, t_tp=R), param(H, t_tp=R)
w_qkv, b_qkv = param(3 * H // 4, H, t_tp=V), param(3 * H // 4, t_tp=V)
w_o, b_o = param(H, H // 4, t_tp=V), param(H, t_tp=R)
w1, w2 = param(FF // 4, H, t_tp=V), param(H, FF // 4, t_tp=V)
with spmd.set_current_mesh(mesh), spmd.checker.typecheck():
    for sp in (False, True):
        ln_w, ln_b = param(H, t_tp=R if sp else I), param(H, t_tp=R if sp else I)
        with spmd.no_typecheck(): x = torch.randn(B, Sq // 4 if sp else Sq, H)
        spmd.assert_type(x, {dp: V, tp: S(1) if sp else I})
        if sp:
            h = F.layer_norm(x, (H,), ln_w, ln_b)
            h = spmd.all_gather(h, tp, src=S(1), dst=R)
        else:
            h = spmd.convert(F.layer_norm(x, (H,), ln_w, ln_b), tp, src=I, dst=R)
        qkv = F.linear(h, w_qkv, b_qkv)
        q, k, v = qkv.chunk(3, -1)
        q, k, v = [t.view(B, Sq, NH // 2, -1).transpose(1, 2) for t in (q, k, v)]
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        a = a.transpose(1, 2).reshape(B, Sq, -1)
        o = F.linear(a, w_o)            # P on tp
        if sp:
            o = spmd.reduce_scatter(o, tp, src=P, dst=S(1))
        else:
            o = spmd.all_reduce(o, tp, src=P, dst=I)
        x2 = x + o
        m = F.gelu(F.linear(spmd.convert(x2, tp, src=I, dst=R) if not sp else spmd.all_gather(x2, tp, src=S(1), dst=R), w1))
        m = F.linear(m, w2)
        m = spmd.all_reduce(m, tp, src=P, dst=I) if not sp else spmd.reduce_scatter(m, tp, src=P, dst=S(1))
        y = x2 + m
        loss = y.float().pow(2).mean()
        print("sp", sp, "loss", T(loss))
        loss = spmd.reinterpret(loss, dp, src=V, dst=P)
        if sp: loss = spmd.reinterpret(loss, tp, src=V, dst=P)
        loss.backward()
        for n, p in [("ln_w", ln_w), ("b_qkv", b_qkv), ("w_qkv", w_qkv), ("w_o", w_o), ("w1", w1), ("w2", w2)]:
            print("  ", n, T(p), "grad", T(p.grad))
            p.grad = None
