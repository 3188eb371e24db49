"""``redistribute_spec(x, src_partition_spec, dst_partition_spec)``: the
core plans a spec-to-spec change as cspmd collectives; on 4 Gloo ranks (a
2 x 2 dp x tp mesh) the result of many random (src, dst) pairs equals the
dense tensor laid out as dst says, and the gradient equals the dense one
laid out as src says.  Refused plans raise before anything runs."""

import random

import pytest
import torch

import cspmd as spmd
import gloo_harness
from cspmd import I, P, R, S, V, PartitionSpec as PS, SpmdTypeError
from cspmd.checker import typecheck
from cspmd.spec_redistribute import plan

SHAPE = (8, 8, 4)
AXES = ("dp", "tp")
PAIRS = 40


def _placement(rng, ndim):
    """A random layout: {axis: "R" | "I" | "P" | dim} plus each dim's axis order."""
    lay = {a: rng.choice(["R", "I", "P", 0, 1, 2][:3 + ndim]) for a in AXES}
    order = list(AXES)
    rng.shuffle(order)
    return lay, order


def _spec(lay, order, ndim, names):
    entries = []
    for d in range(ndim):
        axes = tuple(names[a] for a in order if lay[a] == d)
        entries.append(None if not axes else axes[0] if len(axes) == 1 else axes)
    return PS(*entries)


def _letters(lay):
    return {a: (V if isinstance(t, int) else {"R": R, "I": I, "P": P}[t]) for a, t in lay.items()}


def _layout(dense, lay, order, coord, sizes, weights=True):
    """This rank's local tensor of the dense one under lay (P axes: a
    weighted part, the parts summing to the chunk)."""
    t = dense
    for d in range(dense.dim()):
        axes = [a for a in order if lay[a] == d]
        idx, n = 0, 1
        for a in axes:
            idx, n = idx * sizes[a] + coord[a], n * sizes[a]
        t = t.chunk(n, d)[idx]
    if weights:
        for a in AXES:
            if lay[a] == "P":
                k = sizes[a]
                t = t * (2.0 * (coord[a] + 1) / (k * (k + 1)))
    return t.contiguous()


def _pairs(seed):
    rng = random.Random(seed)
    return [(_placement(rng, len(SHAPE)), _placement(rng, len(SHAPE))) for _ in range(PAIRS)]


def _redistribute_rank(rank, ws, seed):
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cpu", (2, ws // 2), mesh_dim_names=AXES)
    groups = {a: mesh.get_group(a) for a in AXES}
    coord = dict(zip(AXES, mesh.get_coordinate()))
    sizes = {"dp": 2, "tp": ws // 2}
    torch.manual_seed(0)
    X, C = torch.randn(*SHAPE), torch.randn(*SHAPE)
    report = []
    for (src, so), (dst, do) in _pairs(seed):
        nd = len(SHAPE)
        with spmd.set_current_mesh(mesh), typecheck(local=False):
            names = {a: spmd.MeshAxis.of(groups[a]) for a in AXES}
            sspec, dspec = _spec(src, so, nd, names), _spec(dst, do, nd, names)
            x = spmd.assert_type(_layout(X, src, so, coord, sizes).requires_grad_(),
                                 {groups[a]: t for a, t in _letters(src).items()}, sspec)
            dtypes = {groups[a]: t for a, t in _letters(dst).items() if t is not V}
            nsteps = len(plan(x, sspec, dspec, dtypes))
            y = spmd.redistribute_spec(x, sspec, dspec, dst_types=dtypes)
            got_spec = spmd.get_partition_spec(y)
            spec_ok = got_spec == dspec or (got_spec is None and all(e is None for e in dspec))
            got_types = {a: str(spmd.get_local_type(y)[spmd.MeshAxis.of(groups[a])])
                         for a in AXES}
            # loss = sum(y * C), C laid out as y (P axes read C replicated)
            c_lay = {a: ("R" if t == "P" else t) for a, t in dst.items()}
            c = spmd.assert_type(_layout(C, c_lay, do, coord, sizes),
                                 {groups[a]: t for a, t in _letters(c_lay).items()}, dspec)
            loss = (y * c).sum()
            for a in AXES:
                t = spmd.get_local_type(loss)[spmd.MeshAxis.of(groups[a])]
                if t is P:
                    loss = spmd.all_reduce(loss, groups[a], src=P, dst=I)
                elif t is R:
                    loss = spmd.redistribute(loss, groups[a], src=R, dst=I)
            loss.backward()
        with spmd.no_typecheck():
            yv = y.detach().clone()
            g = x.grad.detach().clone()
            for a in AXES:
                if dst[a] == "P":   # the parts must sum to the chunk
                    dist.all_reduce(yv, group=groups[a])
                if src[a] == "R":   # R's gradient is a Partial
                    dist.all_reduce(g, group=groups[a])
        want_y = _layout(X, dst, do, coord, sizes, weights=False)
        want_g = _layout(C, src, so, coord, sizes, weights=False)
        report.append({
            "pair": (src, so, dst, do), "spec": str(got_spec), "spec_ok": spec_ok,
            "types": got_types,
            "y_err": float((yv - want_y).abs().max()) if yv.shape == want_y.shape else None,
            "g_err": float((g - want_g).abs().max()) if g.shape == want_g.shape else None,
            "steps": nsteps,
        })
    return report


def test_random_pairs_on_gloo_match_dense():
    res = gloo_harness.run_world(4, _redistribute_rank, 7, timeout=300)
    multi = 0
    for rank_report in res:
        assert len(rank_report) == PAIRS
        for r in rank_report:
            src, so, dst, do = r["pair"]
            want_types = {a: ("V" if isinstance(t, int) else t) for a, t in dst.items()}
            assert r["types"] == want_types, r
            assert r["spec_ok"], r
            assert r["y_err"] is not None and r["y_err"] < 1e-5, r
            assert r["g_err"] is not None and r["g_err"] < 1e-5, r
            multi += r["steps"] > 1
    assert multi >= 10, "the random pairs should need multi-step plans"


def test_plans_and_refusals(mesh, dp, tp):
    ax = spmd.MeshAxis.of
    with spmd.set_current_mesh(mesh), typecheck(local=False):
        x = spmd.assert_type(torch.randn(8, 8), {dp: V, tp: V}, PS(("dp", "tp"), None))
        steps = plan(x, PS(("dp", "tp"), None), PS("tp", "dp"))
        assert [(f, a, str(s), str(d)) for f, a, s, d in steps] == [
            ("all_gather", ax(tp), "S(0)", "R"), ("all_to_all", ax(dp), "S(0)", "S(1)"),
            ("convert", ax(tp), "R", "S(0)")]
        y = spmd.redistribute_spec(x, PS(("dp", "tp"), None), PS("tp", "dp"))
        assert spmd.get_partition_spec(y) == PS(ax(tp), ax(dp))
        assert y.shape == (16, 4)  # global (64, 8): dim 0 over tp (4), dim 1 over dp (2)
        with pytest.raises(SpmdTypeError, match="src_partition_spec does not describe the "
                           "tensor"):
            spmd.redistribute_spec(x, PS("dp", "tp"), PS(None, None))
        with pytest.raises(ValueError, match="dim 1 of local size 6 cannot be sharded evenly "
                           "over axis mesh_tp of size 4"):
            spmd.redistribute_spec(spmd.assert_type(torch.randn(4, 6), {dp: R, tp: R}),
                                   None, PS(None, "tp"))
        with pytest.raises(ValueError, match="say where shards go with dst_partition_spec"):
            spmd.redistribute_spec(x, PS(("dp", "tp"), None), None, dst_types={tp: S(0)})
        with pytest.raises(SpmdTypeError, match="has no SPMD type"):
            spmd.redistribute_spec(torch.randn(2), None, None)
        with pytest.raises(TypeError, match="must be a PartitionSpec or None"):
            spmd.redistribute_spec(x, ("dp", None), None)
        p = spmd.assert_type(torch.randn(8, 8), {dp: R, tp: P})
        z = spmd.redistribute_spec(p, None, None)          # P kept when dst says nothing
        assert spmd.get_local_type(z)[ax(tp)] is P
        z = spmd.redistribute_spec(p, None, PS("tp", None))  # reduce_scatter
        assert spmd.get_partition_spec(z) == PS(ax(tp), None)
    with spmd.set_current_mesh(mesh, local_axes=("dp",)), typecheck(local=False):
        lx = spmd.assert_type(torch.randn(4, 8), {dp: V, tp: S(1)})
        with pytest.raises(SpmdTypeError, match="axis mesh_dp is Varying with no PartitionSpec"):
            spmd.redistribute_spec(lx, PS(None, "tp"), None, dst_types={dp: R})
        w = spmd.redistribute_spec(lx, PS(None, "tp"), None)  # dp stays V
        assert spmd.get_local_type(w) == {ax(dp): V, ax(tp): R}
