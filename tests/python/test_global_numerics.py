"""Global mode on real ranks: a 2-D (dp x tp) MLP checked with
``typecheck(local=False)`` on 4 Gloo ranks, whose gathered output and
gradients equal the dense single-process computation, and whose
parameters' gradients carry the parameters' specs."""

import pytest
import torch

import cspmd as spmd
import gloo_harness
from cspmd import I, P, R, S

N, D, H = 8, 6, 8  # batch, model dim, hidden dim


def _dense():
    torch.manual_seed(0)
    x = torch.randn(N, D)
    w1 = torch.randn(D, H, requires_grad=True)
    w2 = torch.randn(H, D, requires_grad=True)
    return x, w1, w2


def _chunk(t, dim, i, n):
    return t.detach().chunk(n, dim)[i].contiguous()


def _mlp_rank(rank, ws):
    from torch.distributed.device_mesh import init_device_mesh

    x, w1, w2 = _dense()
    mesh = init_device_mesh("cpu", (2, ws // 2), mesh_dim_names=("dp", "tp"))
    dp, tp = mesh.get_group("dp"), mesh.get_group("tp")
    di, ti = mesh.get_coordinate()
    ndp, ntp = 2, ws // 2
    out = {}
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck(local=False):
        xl = spmd.assert_type(_chunk(x, 0, di, ndp), {dp: S(0), tp: R})
        w1l = spmd.assert_type(_chunk(w1, 1, ti, ntp).requires_grad_(), {dp: R, tp: S(1)})
        w2l = spmd.assert_type(_chunk(w2, 0, ti, ntp).requires_grad_(), {dp: R, tp: S(0)})
        h = torch.relu(xl @ w1l)                       # {dp: S(0), tp: S(1)}
        y = h @ w2l                                    # {dp: S(0), tp: P}
        y = spmd.all_reduce(y, tp, src=P, dst=I)       # {dp: S(0), tp: I}
        loss = spmd.all_reduce((y * y).sum(), dp, src=P, dst=I)
        loss.backward()
        out["y_spec"] = str(spmd.get_partition_spec(y))
        out["y"] = spmd.all_gather(y.detach(), dp, src=S(0), dst=R)
        out["loss"] = loss.detach()
        reduced = {}
        for name, w in (("w1", w1l), ("w2", w2l)):
            g = w.grad
            out[name + "_spec"] = (str(spmd.get_partition_spec(w)),
                                   str(spmd.get_partition_spec(g)))
            out[name + "_types"] = {str(a): str(getattr(t, "name", t))[-1]
                                    for a, t in spmd.get_local_type(g).items()}
            g = reduced[name] = spmd.all_reduce(g, dp, src=P, dst=R)
            dim = 1 if name == "w1" else 0
            out[name + "_grad"] = spmd.all_gather(g, tp, src=S(dim), dst=R)
        # an SGD step in global mode: the reduced gradient is sharded as w1
        with torch.no_grad():
            w1l -= 0.1 * reduced["w1"]
        out["step_spec"] = str(spmd.get_partition_spec(w1l))
    return out


@pytest.mark.parametrize("ws", [4])
def test_2d_mlp_on_gloo_matches_dense(ws):
    res = gloo_harness.run_world(ws, _mlp_rank, timeout=120)
    x, w1, w2 = _dense()
    y = (torch.relu(x @ w1) @ w2)
    (y * y).sum().backward()
    for out in res:
        assert out["y_spec"] == "PartitionSpec(mesh_dp, None)"
        torch.testing.assert_close(out["y"], y.detach())
        torch.testing.assert_close(out["loss"], (y * y).sum().detach())
        assert out["w1_spec"] == ("PartitionSpec(None, mesh_tp)",) * 2
        assert out["w2_spec"] == ("PartitionSpec(mesh_tp, None)",) * 2
        assert out["w1_types"] == out["w2_types"] == {"mesh_dp": "P", "mesh_tp": "V"}
        torch.testing.assert_close(out["w1_grad"], w1.grad)
        torch.testing.assert_close(out["w2_grad"], w2.grad)
        assert out["step_spec"] == "PartitionSpec(None, mesh_tp)"
