"""Numerics of the differentiable collectives on real Gloo ranks.

Every case builds rank-dependent, integer-valued float inputs; each rank can
rebuild every other rank's input, so the expected forward output and the
expected input gradient (each collective's backward formula) are computed by
hand from all ranks' data and compared exactly (``torch.equal``).

One process launch per configuration runs every case: world size 2 and 4
with checking off, and world size 2 with ``typecheck()`` on and inputs and
gradients annotated (the typed path must compute the same values, and the
result/gradient types must be dst / the dual of src).  Each case is then
reported as its own test.
"""

import contextlib
import math
import os
import time

import pytest
import torch
import torch.distributed as dist

import cspmd as spmd
from cspmd import I, P, R, S, V

import gloo_harness

# ----------------------------------------------------------------------------------
# Data
# ----------------------------------------------------------------------------------


def X(r, shape, base=0.0):
    """Rank r's input: 0, 1, 2, ... + 100 * r (integer-valued float32)."""
    n = math.prod(shape)
    return torch.arange(n, dtype=torch.float32).reshape(shape) + 100.0 * r + base


def G(r, shape):
    """Rank r's incoming gradient: 3 * (0, 1, 2, ...) + 1000 * (r + 1)."""
    n = math.prod(shape)
    return torch.arange(n, dtype=torch.float32).reshape(shape) * 3.0 + 1000.0 * (r + 1)


def total(ts):
    out = ts[0].clone()
    for t in ts[1:]:
        out = out + t
    return out


def zeros_but(shape, r, keep, piece):
    """Zeros of ``shape``; on rank 0 (keep=0) or everywhere (keep=None), ``piece``."""
    return piece.clone() if keep is None or r == keep else torch.zeros(shape)


def base(t):
    return V if isinstance(t, S) else t


DUAL = {R: P, I: I, V: V, P: R}


def uneven_sizes(ws):
    return [1, 3] if ws == 2 else [2, 1, 0, 3]


def send_matrix(ws):
    """send[r][s]: rows rank r sends to rank s in the uneven all_to_all."""
    return [[(r + 2 * s) % 3 + 1 for s in range(ws)] for r in range(ws)]


def a2a_uneven(arrs, send, r):
    """Rank r's output of an uneven dim-0 all_to_all where rank s sends
    ``send[s][t]`` rows to rank t."""
    return torch.cat([torch.split(arrs[s], send[s])[r] for s in range(len(arrs))], 0)


def transpose(m):
    return [list(c) for c in zip(*m)]


# ----------------------------------------------------------------------------------
# Cases: (src, dst, x shape per rank, the call, expected y, expected x.grad)
# ----------------------------------------------------------------------------------


class Case:
    def __init__(self, src, dst, xshape, op, fwd, bwd, same_object=False):
        self.src, self.dst = src, dst
        self.xshape = xshape  # s -> shape of rank s's input
        self.op = op          # (x, pg) -> y
        self.fwd = fwd        # (xs, r) -> expected y on rank r
        self.bwd = bwd        # (gs, r) -> expected x.grad on rank r
        self.same_object = same_object  # the call must return x itself


CASES = {}


def case(fn):
    """Register ``fn(ws) -> Case`` under its name."""
    CASES[fn.__name__] = fn
    return fn


def const(shape):
    return lambda s: shape


# --- all_reduce (3.2) -------------------------------------------------------------


@case
def all_reduce_P_R(ws):
    return Case(P, R, const((2, 3)), lambda x, pg: spmd.all_reduce(x, pg, src=P, dst=R),
                lambda xs, r: total(xs), lambda gs, r: total(gs))


@case
def all_reduce_P_I(ws):
    return Case(P, I, const((2, 3)), lambda x, pg: spmd.all_reduce(x, pg, src=P, dst=I),
                lambda xs, r: total(xs), lambda gs, r: gs[r])


@case
def all_reduce_V_R(ws):
    return Case(V, R, const((2, 3)), lambda x, pg: spmd.all_reduce(x, pg, src=V, dst=R),
                lambda xs, r: total(xs), lambda gs, r: total(gs))


@case
def all_reduce_V_I(ws):
    return Case(V, I, const((2, 3)), lambda x, pg: spmd.all_reduce(x, pg, src=V, dst=I),
                lambda xs, r: total(xs), lambda gs, r: gs[r])


@case
def all_reduce_default_src_3d(ws):
    return Case(P, R, const((2, 1, 3)), lambda x, pg: spmd.all_reduce(x, pg, dst=R),
                lambda xs, r: total(xs), lambda gs, r: total(gs))


# --- all_gather (3.3) -------------------------------------------------------------


@case
def all_gather_V_R_dim0(ws):
    return Case(V, R, const((2, 3)), lambda x, pg: spmd.all_gather(x, pg, src=V, dst=R),
                lambda xs, r: torch.stack(xs, 0), lambda gs, r: total(gs)[r])


@case
def all_gather_V_R_dim1(ws):
    return Case(V, R, const((2, 3)),
                lambda x, pg: spmd.all_gather(x, pg, src=V, dst=R, gather_dim=1),
                lambda xs, r: torch.stack(xs, 1), lambda gs, r: total(gs).select(1, r))


@case
def all_gather_V_R_dim_neg1(ws):
    # -1 is resolved against the output rank (input rank + 1): the last dim.
    return Case(V, R, const((2, 3)),
                lambda x, pg: spmd.all_gather(x, pg, src=V, dst=R, gather_dim=-1),
                lambda xs, r: torch.stack(xs, 2), lambda gs, r: total(gs).select(2, r))


@case
def all_gather_V_R_0d(ws):
    return Case(V, R, const(()), lambda x, pg: spmd.all_gather(x, pg, src=V, dst=R),
                lambda xs, r: torch.stack(xs), lambda gs, r: total(gs)[r])


@case
def all_gather_V_I_dim0(ws):
    return Case(V, I, const((2, 3)), lambda x, pg: spmd.all_gather(x, pg, src=V, dst=I),
                lambda xs, r: torch.stack(xs, 0), lambda gs, r: gs[r].select(0, r))


@case
def all_gather_V_I_dim1(ws):
    # the reference's backward always splits dim 0 (a bug); a
    # reimplementation selects along gather_dim.
    return Case(V, I, const((2, 3)),
                lambda x, pg: spmd.all_gather(x, pg, src=V, dst=I, gather_dim=1),
                lambda xs, r: torch.stack(xs, 1), lambda gs, r: gs[r].select(1, r))


@case
def all_gather_S0_R(ws):
    return Case(S(0), R, const((2, 3)), lambda x, pg: spmd.all_gather(x, pg, src=S(0), dst=R),
                lambda xs, r: torch.cat(xs, 0), lambda gs, r: total(gs).chunk(ws, 0)[r])


@case
def all_gather_S1_R(ws):
    return Case(S(1), R, const((2, 3)), lambda x, pg: spmd.all_gather(x, pg, src=S(1), dst=R),
                lambda xs, r: torch.cat(xs, 1), lambda gs, r: total(gs).chunk(ws, 1)[r])


@case
def all_gather_S0_I(ws):
    return Case(S(0), I, const((2, 3)), lambda x, pg: spmd.all_gather(x, pg, src=S(0), dst=I),
                lambda xs, r: torch.cat(xs, 0), lambda gs, r: gs[r].chunk(ws, 0)[r])


@case
def all_gather_S1_I(ws):
    return Case(S(1), I, const((2, 3)), lambda x, pg: spmd.all_gather(x, pg, src=S(1), dst=I),
                lambda xs, r: torch.cat(xs, 1), lambda gs, r: gs[r].chunk(ws, 1)[r])


@case
def all_gather_S_neg1_R(ws):
    return Case(S(-1), R, const((2, 3)),
                lambda x, pg: spmd.all_gather(x, pg, src=S(-1), dst=R),
                lambda xs, r: torch.cat(xs, 1), lambda gs, r: total(gs).chunk(ws, 1)[r])


@case
def all_gather_S0_R_explicit_gather_dim(ws):
    return Case(S(0), R, const((2, 3)),
                lambda x, pg: spmd.all_gather(x, pg, src=S(0), dst=R, gather_dim=0),
                lambda xs, r: torch.cat(xs, 0), lambda gs, r: total(gs).chunk(ws, 0)[r])


@case
def all_gather_uneven_S0_R(ws):
    sz = uneven_sizes(ws)
    return Case(S(0), R, lambda s: (sz[s], 3),
                lambda x, pg: spmd.all_gather(x, pg, src=S(0), dst=R, split_sizes=sz),
                lambda xs, r: torch.cat(xs, 0), lambda gs, r: torch.split(total(gs), sz, 0)[r])


@case
def all_gather_uneven_S0_I(ws):
    sz = uneven_sizes(ws)
    return Case(S(0), I, lambda s: (sz[s], 3),
                lambda x, pg: spmd.all_gather(x, pg, src=S(0), dst=I, split_sizes=sz),
                lambda xs, r: torch.cat(xs, 0), lambda gs, r: torch.split(gs[r], sz, 0)[r])


@case
def all_gather_uneven_S1_R(ws):
    sz = uneven_sizes(ws)
    return Case(S(1), R, lambda s: (2, sz[s]),
                lambda x, pg: spmd.all_gather(x, pg, src=S(1), dst=R, split_sizes=sz),
                lambda xs, r: torch.cat(xs, 1), lambda gs, r: torch.split(total(gs), sz, 1)[r])


@case
def all_gather_uneven_S1_I(ws):
    sz = uneven_sizes(ws)
    return Case(S(1), I, lambda s: (2, sz[s]),
                lambda x, pg: spmd.all_gather(x, pg, src=S(1), dst=I, split_sizes=sz),
                lambda xs, r: torch.cat(xs, 1), lambda gs, r: torch.split(gs[r], sz, 1)[r])


# --- reduce_scatter (3.4) ---------------------------------------------------------


@case
def reduce_scatter_P_V(ws):
    return Case(P, V, const((ws, 3)), lambda x, pg: spmd.reduce_scatter(x, pg, src=P, dst=V),
                lambda xs, r: total(xs)[r], lambda gs, r: torch.stack(gs, 0))


@case
def reduce_scatter_P_V_dim1(ws):
    return Case(P, V, const((2, ws)),
                lambda x, pg: spmd.reduce_scatter(x, pg, src=P, dst=V, scatter_dim=1),
                lambda xs, r: total(xs).select(1, r), lambda gs, r: torch.stack(gs, 1))


@case
def reduce_scatter_defaults(ws):
    return Case(P, V, const((ws, 2)), lambda x, pg: spmd.reduce_scatter(x, pg),
                lambda xs, r: total(xs)[r], lambda gs, r: torch.stack(gs, 0))


@case
def reduce_scatter_P_S0(ws):
    return Case(P, S(0), const((2 * ws, 3)),
                lambda x, pg: spmd.reduce_scatter(x, pg, src=P, dst=S(0)),
                lambda xs, r: total(xs).chunk(ws, 0)[r], lambda gs, r: torch.cat(gs, 0))


@case
def reduce_scatter_P_S1(ws):
    return Case(P, S(1), const((3, 2 * ws)),
                lambda x, pg: spmd.reduce_scatter(x, pg, src=P, dst=S(1)),
                lambda xs, r: total(xs).chunk(ws, 1)[r], lambda gs, r: torch.cat(gs, 1))


@case
def reduce_scatter_V_S0(ws):
    return Case(V, S(0), const((2 * ws, 3)),
                lambda x, pg: spmd.reduce_scatter(x, pg, src=V, dst=S(0)),
                lambda xs, r: total(xs).chunk(ws, 0)[r], lambda gs, r: torch.cat(gs, 0))


@case
def reduce_scatter_uneven_S0(ws):
    sz = uneven_sizes(ws)
    return Case(P, S(0), const((sum(sz), 3)),
                lambda x, pg: spmd.reduce_scatter(x, pg, src=P, dst=S(0), split_sizes=sz),
                lambda xs, r: torch.split(total(xs), sz, 0)[r], lambda gs, r: torch.cat(gs, 0))


@case
def reduce_scatter_uneven_S1(ws):
    sz = uneven_sizes(ws)
    return Case(P, S(1), const((2, sum(sz))),
                lambda x, pg: spmd.reduce_scatter(x, pg, src=P, dst=S(1), split_sizes=sz),
                lambda xs, r: torch.split(total(xs), sz, 1)[r], lambda gs, r: torch.cat(gs, 1))


# --- all_to_all (3.5) -------------------------------------------------------------


def _chunks_cat(arrs, ws, r, split, concat):
    return torch.cat([a.chunk(ws, split)[r] for a in arrs], concat)


@case
def all_to_all_V_V(ws):
    return Case(V, V, const((ws, 3)), lambda x, pg: spmd.all_to_all(x, pg, src=V, dst=V),
                lambda xs, r: torch.stack([x[r] for x in xs], 0),
                lambda gs, r: torch.stack([g[r] for g in gs], 0))


@case
def all_to_all_V_V_split1_concat0(ws):
    return Case(V, V, const((3, ws)),
                lambda x, pg: spmd.all_to_all(x, pg, src=V, dst=V, split_dim=1, concat_dim=0),
                lambda xs, r: torch.stack([x.select(1, r) for x in xs], 0),
                lambda gs, r: torch.stack([g.select(0, r) for g in gs], 1))


@case
def all_to_all_S0_S1(ws):
    return Case(S(0), S(1), const((2, 2 * ws)),
                lambda x, pg: spmd.all_to_all(x, pg, src=S(0), dst=S(1)),
                lambda xs, r: _chunks_cat(xs, ws, r, 1, 0),
                lambda gs, r: _chunks_cat(gs, ws, r, 0, 1))


@case
def all_to_all_S1_S0(ws):
    return Case(S(1), S(0), const((2 * ws, 3)),
                lambda x, pg: spmd.all_to_all(x, pg, src=S(1), dst=S(0)),
                lambda xs, r: _chunks_cat(xs, ws, r, 0, 1),
                lambda gs, r: _chunks_cat(gs, ws, r, 1, 0))


@case
def all_to_all_S1_V(ws):
    return Case(S(1), V, const((3, 2 * ws)),
                lambda x, pg: spmd.all_to_all(x, pg, src=S(1), dst=V),
                lambda xs, r: _chunks_cat(xs, ws, r, 1, 0),
                lambda gs, r: _chunks_cat(gs, ws, r, 0, 1))


@case
def all_to_all_S0_V(ws):
    return Case(S(0), V, const((2 * ws, 3)),
                lambda x, pg: spmd.all_to_all(x, pg, src=S(0), dst=V),
                lambda xs, r: _chunks_cat(xs, ws, r, 0, 0),
                lambda gs, r: _chunks_cat(gs, ws, r, 0, 0))


@case
def all_to_all_V_S1(ws):
    return Case(V, S(1), const((2 * ws, 3)),
                lambda x, pg: spmd.all_to_all(x, pg, src=V, dst=S(1)),
                lambda xs, r: _chunks_cat(xs, ws, r, 0, 1),
                lambda gs, r: _chunks_cat(gs, ws, r, 1, 0))


@case
def all_to_all_V_S0(ws):
    return Case(V, S(0), const((2 * ws, 3)),
                lambda x, pg: spmd.all_to_all(x, pg, src=V, dst=S(0)),
                lambda xs, r: _chunks_cat(xs, ws, r, 0, 0),
                lambda gs, r: _chunks_cat(gs, ws, r, 0, 0))


@case
def all_to_all_uneven_S0_S0(ws):
    m = send_matrix(ws)
    return Case(S(0), S(0), lambda s: (sum(m[s]), 2),
                lambda x, pg: spmd.all_to_all(
                    x, pg, src=S(0), dst=S(0), input_split_sizes=m[dist.get_rank()],
                    output_split_sizes=[m[s][dist.get_rank()] for s in range(ws)]),
                lambda xs, r: a2a_uneven(xs, m, r),
                lambda gs, r: a2a_uneven(gs, transpose(m), r))


@case
def all_to_all_uneven_V_V(ws):
    m = send_matrix(ws)
    return Case(V, V, lambda s: (sum(m[s]), 2),
                lambda x, pg: spmd.all_to_all(
                    x, pg, src=V, dst=V, input_split_sizes=m[dist.get_rank()],
                    output_split_sizes=[m[s][dist.get_rank()] for s in range(ws)]),
                lambda xs, r: a2a_uneven(xs, m, r),
                lambda gs, r: a2a_uneven(gs, transpose(m), r))


# --- reinterpret (3.6) ------------------------------------------------------------

ident_fwd = lambda xs, r: xs[r]  # noqa: E731


def _reinterpret(src, dst, expert, bwd):
    return lambda ws: Case(
        src, dst, const((2, 3)),
        lambda x, pg: spmd.reinterpret(x, pg, src=src, dst=dst, expert_mode=expert),
        ident_fwd, bwd)


own_grad = lambda gs, r: gs[r]  # noqa: E731
sum_grad = lambda gs, r: total(gs)  # noqa: E731
rank0_grad = lambda gs, r: zeros_but(gs[r].shape, r, 0, gs[r])  # noqa: E731

for _n, _src, _dst, _exp, _bwd in [
    ("R_V", R, V, True, own_grad),     # backward reinterpret(V, P)
    ("V_P", V, P, False, own_grad),    # backward reinterpret(R, V)
    ("R_P", R, P, True, own_grad),     # backward reinterpret(R, P)
    ("R_I", R, I, True, rank0_grad),   # backward convert(I, P)
    ("I_R", I, R, True, sum_grad),     # backward all_reduce(P, I)
    ("I_V", I, V, False, sum_grad),    # I->R->V: reinterpret(V,P) then all_reduce(P,I)
    ("I_P", I, P, False, sum_grad),    # I->R->P: reinterpret(R,P) then all_reduce(P,I)
]:
    CASES["reinterpret_" + _n] = _reinterpret(_src, _dst, _exp, _bwd)


@case
def reinterpret_same_type_returns_input(ws):
    return Case(V, V, const((2, 3)), lambda x, pg: spmd.reinterpret(x, pg, src=V, dst=V),
                ident_fwd, own_grad, same_object=True)


# --- convert (3.7) ----------------------------------------------------------------


def _scatter_into(shape, dim, r, piece):
    """Zeros of ``shape`` with ``piece`` at chunk r of ``dim``."""
    z = torch.zeros(shape)
    n = piece.shape[dim]
    z.narrow(dim, r * n, n).copy_(piece)
    return z


def _stack_at(ws, r, piece):
    z = torch.zeros((ws,) + tuple(piece.shape))
    z[r] = piece
    return z


CONVERTS = {
    # name: (src, dst, expert, xshape(ws), fwd, bwd)
    "I_R": (I, R, False, lambda ws: (2, 3), ident_fwd, sum_grad),
    "R_I": (R, I, True, lambda ws: (2, 3), ident_fwd, rank0_grad),
    "R_V": (R, V, False, lambda ws: (ws, 3), lambda xs, r: xs[r][r],
            lambda gs, r: _stack_at(len(gs), r, gs[r])),
    "R_S0": (R, S(0), False, lambda ws: (2 * ws, 3),
             lambda xs, r: xs[r].chunk(len(xs), 0)[r],
             lambda gs, r: _scatter_into((2 * len(gs), 3), 0, r, gs[r])),
    "R_S1": (R, S(1), False, lambda ws: (3, 2 * ws),
             lambda xs, r: xs[r].chunk(len(xs), 1)[r],
             lambda gs, r: _scatter_into((3, 2 * len(gs)), 1, r, gs[r])),
    "R_S_neg1": (R, S(-1), False, lambda ws: (3, 2 * ws),
                 lambda xs, r: xs[r].chunk(len(xs), 1)[r],
                 lambda gs, r: _scatter_into((3, 2 * len(gs)), 1, r, gs[r])),
    "I_V": (I, V, False, lambda ws: (ws, 3), lambda xs, r: xs[r][r],
            lambda gs, r: torch.stack(gs, 0)),
    "I_S0": (I, S(0), False, lambda ws: (2 * ws, 3), lambda xs, r: xs[r].chunk(len(xs), 0)[r],
             lambda gs, r: torch.cat(gs, 0)),
    "I_S1": (I, S(1), False, lambda ws: (3, 2 * ws), lambda xs, r: xs[r].chunk(len(xs), 1)[r],
             lambda gs, r: torch.cat(gs, 1)),
    "R_P": (R, P, False, lambda ws: (2, 3), lambda xs, r: zeros_but((2, 3), r, 0, xs[r]),
            rank0_grad),
    "I_P": (I, P, True, lambda ws: (2, 3), lambda xs, r: zeros_but((2, 3), r, 0, xs[r]),
            own_grad),
    "V_P": (V, P, True, lambda ws: (2, 3), lambda xs, r: _stack_at(len(xs), r, xs[r]),
            lambda gs, r: gs[r][r]),
    "S0_P": (S(0), P, True, lambda ws: (2, 3),
             lambda xs, r: _scatter_into((2 * len(xs), 3), 0, r, xs[r]),
             lambda gs, r: gs[r].chunk(len(gs), 0)[r]),
    "S1_P": (S(1), P, True, lambda ws: (3, 2),
             lambda xs, r: _scatter_into((3, 2 * len(xs)), 1, r, xs[r]),
             lambda gs, r: gs[r].chunk(len(gs), 1)[r]),
}


def _convert(src, dst, expert, xshape, fwd, bwd):
    return lambda ws: Case(
        src, dst, const(xshape(ws)),
        lambda x, pg: spmd.convert(x, pg, src=src, dst=dst, expert_mode=expert), fwd, bwd)


for _n, _args in CONVERTS.items():
    CASES["convert_" + _n] = _convert(*_args)

for _n, (_src, _dst) in {"V_S0": (V, S(0)), "S1_V": (S(1), V), "R_R": (R, R),
                         "I_I": (I, I), "P_P": (P, P), "S0_S0": (S(0), S(0))}.items():
    CASES["convert_noop_" + _n] = (lambda src, dst: lambda ws: Case(
        src, dst, const((2, 4)), lambda x, pg: spmd.convert(x, pg, src=src, dst=dst),
        ident_fwd, own_grad, same_object=True))(_src, _dst)


@case
def convert_R_S0_torch_chunk_sizing(ws):
    # extent 2*ws-1: torch.chunk sizing, ceil(n/ws) rows per rank, last one short.
    n = 2 * ws - 1

    def bwd(gs, r):  # convert(S(0), P): this rank's gradient at its own rows, zeros elsewhere
        k = (n + ws - 1) // ws
        out = torch.zeros(n, 3)
        start = min(r * k, n)
        out[start:start + gs[r].shape[0]] = gs[r]
        return out

    return Case(R, S(0), const((n, 3)), lambda x, pg: spmd.convert(x, pg, src=R, dst=S(0)),
                lambda xs, r: xs[r].chunk(ws, 0)[r], bwd)


# --- redistribute (3.8): same numbers as the op it routes to ----------------------


def _redistribute(like, src, dst, same_object=False):
    def make(ws):
        c = CASES[like](ws)
        return Case(src, dst, c.xshape, lambda x, pg: spmd.redistribute(x, pg, src=src, dst=dst),
                    c.fwd, c.bwd, same_object)
    return make


for _n, _like, _src, _dst in [
    ("S0_S1", "all_to_all_S0_S1", S(0), S(1)),
    ("S0_R", "all_gather_S0_R", S(0), R),
    ("S1_I", "all_gather_S1_I", S(1), I),
    ("V_R", "all_gather_V_R_dim0", V, R),
    ("V_I", "all_gather_V_I_dim0", V, I),
    ("P_R", "all_reduce_P_R", P, R),
    ("P_I", "all_reduce_P_I", P, I),
    ("P_V", "reduce_scatter_P_V", P, V),
    ("P_S1", "reduce_scatter_P_S1", P, S(1)),
    ("R_I", "convert_R_I", R, I),
    ("I_R", "convert_I_R", I, R),
    ("R_V", "convert_R_V", R, V),
    ("R_S1", "convert_R_S1", R, S(1)),
    ("R_P", "convert_R_P", R, P),
    ("I_V", "convert_I_V", I, V),
    ("I_S0", "convert_I_S0", I, S(0)),
    ("I_P", "convert_I_P", I, P),
    ("V_P", "convert_V_P", V, P),
    ("S1_P", "convert_S1_P", S(1), P),
]:
    CASES["redistribute_" + _n] = _redistribute(_like, _src, _dst)

for _n, (_src, _dst) in {"V_S0": (V, S(0)), "S1_V": (S(1), V), "R_R": (R, R), "I_I": (I, I),
                         "P_P": (P, P), "V_V": (V, V)}.items():
    CASES["redistribute_noop_" + _n] = (lambda src, dst: lambda ws: Case(
        src, dst, const((2, 4)), lambda x, pg: spmd.redistribute(x, pg, src=src, dst=dst),
        ident_fwd, own_grad, same_object=True))(_src, _dst)


# --- shard / unshard / invariant_to_replicate (3.7) -------------------------------


def _alias(like, src, dst, op):
    def make(ws):
        c = CASES[like](ws)
        return Case(src, dst, c.xshape, op, c.fwd, c.bwd)
    return make


CASES["shard_R_S1"] = _alias("convert_R_S1", R, S(1),
                             lambda x, pg: spmd.shard(x, pg, src=R, dst=S(1)))
CASES["shard_I_S0"] = _alias("convert_I_S0", I, S(0),
                             lambda x, pg: spmd.shard(x, pg, src=I, dst=S(0)))
CASES["unshard_S0_R"] = _alias("all_gather_S0_R", S(0), R,
                               lambda x, pg: spmd.unshard(x, pg, src=S(0), dst=R))
CASES["unshard_S1_I"] = _alias("all_gather_S1_I", S(1), I,
                               lambda x, pg: spmd.unshard(x, pg, src=S(1), dst=I))
CASES["invariant_to_replicate"] = _alias("convert_I_R", I, R,
                                         lambda x, pg: spmd.invariant_to_replicate(x, pg))


# --- broadcast (cspmd's own) ------------------------------------------------------


def _broadcast(dst, root_of):
    """broadcast(V -> dst) from root_of(ws): every rank gets root's x; the
    gradient comes back to root only -- summed over the ranks for dst=R (a
    P gradient), root's own for dst=I -- and zeros elsewhere."""
    def make(ws):
        root = root_of(ws)
        return Case(V, dst, const((2, 3)),
                    lambda x, pg: spmd.broadcast(x, pg, root=root, src=V, dst=dst),
                    lambda xs, r: xs[root],
                    lambda gs, r: zeros_but((2, 3), r, root,
                                            total(gs) if dst is R else gs[root]))
    return make


CASES["broadcast_V_R"] = _broadcast(R, lambda ws: ws - 1)
CASES["broadcast_V_R_root0"] = _broadcast(R, lambda ws: 0)
CASES["broadcast_V_I"] = _broadcast(I, lambda ws: 1)
for _n, _t in {"R_R": R, "I_I": I}.items():  # the value is everywhere already
    CASES["broadcast_noop_" + _n] = (lambda t: lambda ws: Case(
        t, t, const((2, 4)), lambda x, pg: spmd.broadcast(x, pg, root=1, src=t, dst=t),
        ident_fwd, own_grad, same_object=True))(_t)


# ----------------------------------------------------------------------------------
# The per-rank runner
# ----------------------------------------------------------------------------------


def _typecheck(typed):
    if not typed:
        return contextlib.nullcontext()
    import cspmd.checker
    return cspmd.checker.typecheck()


def _axis_type(t, pg):
    return spmd.get_local_type(t).get(spmd.MeshAxis.of(pg))


def _eq(what, got, want):
    assert got is not None, f"{what}: got None"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, expected {want.dtype}"
    assert got.shape == want.shape, \
        f"{what}: shape {tuple(got.shape)}, expected {tuple(want.shape)}"
    assert torch.equal(got, want), f"{what}:\n got {got}\n expected {want}"


def run_case(c, rank, ws, pg, typed):
    xs = [X(s, c.xshape(s)) for s in range(ws)]
    x = xs[rank].clone().requires_grad_()
    if typed:
        spmd.assert_type(x, {pg: base(c.src)})
    with _typecheck(typed):
        y = c.op(x, pg)
    if c.same_object:
        assert y is x, "a no-op must return its input itself"
    _eq("forward", y.detach(), c.fwd(xs, rank))
    if typed:
        assert _axis_type(y, pg) is base(c.dst), \
            f"output type {_axis_type(y, pg)!r}, expected {base(c.dst)!r}"
    gs = [G(s, c.fwd(xs, s).shape) for s in range(ws)]
    want = c.bwd(gs, rank)
    if want is None:
        return
    g = gs[rank].clone()
    if typed:
        spmd.assert_type(g, {pg: DUAL[base(c.dst)]})
    with _typecheck(typed):
        y.backward(g)
    _eq("backward", x.grad.detach(), want)
    if typed:
        assert _axis_type(x.grad, pg) is DUAL[base(c.src)], \
            f"gradient type {_axis_type(x.grad, pg)!r}, expected {DUAL[base(c.src)]!r}"


# ----------------------------------------------------------------------------------
# Extra checks (not of the Case shape)
# ----------------------------------------------------------------------------------

EXTRAS = {}


def extra(fn):
    EXTRAS[fn.__name__] = fn
    return fn


@extra
def all_reduce_inplace(rank, ws, pg, typed):
    xs = [X(s, (2, 3)) for s in range(ws)]
    x = xs[rank].clone()
    if typed:
        spmd.assert_type(x, {pg: P})
    with _typecheck(typed):
        y = spmd.all_reduce(x, pg, src=P, dst=R, inplace=True)
    assert y is x, "inplace=True must return the input"
    _eq("inplace result", x, total(xs))
    if typed:  # inplace changes x's own type
        assert _axis_type(x, pg) is R


@extra
def all_reduce_inplace_backward(rank, ws, pg, typed):
    xs = [X(s, (2, 3)) for s in range(ws)]
    leaf = xs[rank].clone().requires_grad_()
    gs = [G(s, (2, 3)) for s in range(ws)]
    g = gs[rank].clone()
    if typed:
        spmd.assert_type(leaf, {pg: P})
        spmd.assert_type(g, {pg: P})
    with _typecheck(typed):
        x = leaf * 1.0
        y = spmd.all_reduce(x, pg, src=P, dst=R, inplace=True)
        assert y is x
        y.backward(g)
    _eq("forward", y.detach(), total(xs))
    _eq("backward", leaf.grad.detach(), total(gs))


@extra
def all_reduce_out_dtype(rank, ws, pg, typed):
    xs = [X(s, (2, 3)) for s in range(ws)]
    x = xs[rank].clone().requires_grad_()
    gs = [G(s, (2, 3)).double() for s in range(ws)]
    if typed:
        spmd.assert_type(x, {pg: P})
        spmd.assert_type(gs[rank], {pg: P})
    with _typecheck(typed):
        y = spmd.all_reduce(x, pg, src=P, dst=R, out_dtype=torch.float64)
        y.backward(gs[rank])
    _eq("forward", y.detach(), total(xs).double())
    # backward_options default out_dtype = the input's dtype
    _eq("backward", x.grad.detach(), total(gs).float())


@extra
def all_gather_op_dtype(rank, ws, pg, typed):
    xs = [X(s, (2, 3)) for s in range(ws)]
    x = xs[rank].clone().requires_grad_()
    with _typecheck(False):
        y = spmd.all_gather(x, pg, src=S(0), dst=R, op_dtype=torch.float64)
    _eq("forward", y.detach(), torch.cat(xs, 0).double())
    gs = [G(s, (2 * ws, 3)).double() for s in range(ws)]
    y.backward(gs[rank])
    _eq("backward", x.grad.detach(), total(gs).chunk(ws, 0)[rank].float())


@extra
def convert_result_does_not_alias(rank, ws, pg, typed):
    x = X(rank, (ws, 3))
    if typed:
        spmd.assert_type(x, {pg: R})
    with _typecheck(typed):
        y = spmd.convert(x, pg, src=R, dst=V)
        z = spmd.convert(x, pg, src=R, dst=S(0))
    before = x.clone()
    with torch.no_grad():
        y.add_(1000.0)
        z.add_(1000.0)
    _eq("input untouched", x, before)


def _raises(exc, fn, match=None):
    try:
        fn()
    except exc as e:
        if match is not None:
            assert match in str(e), f"message {str(e)!r} does not contain {match!r}"
        return
    except BaseException as e:  # noqa: BLE001
        raise AssertionError(f"expected {exc.__name__}, got {type(e).__name__}: {e}") from e
    raise AssertionError(f"expected {exc.__name__}, nothing raised")


@extra
def bad_reduce_scatter_not_divisible(rank, ws, pg, typed):
    x = X(rank, (5, 2))  # 5 is not a multiple of 2 or 4
    _raises(ValueError, lambda: spmd.reduce_scatter(x, pg, src=P, dst=S(0)),
            "must be a multiple of group_size")
    y = X(rank, (2, 5))
    _raises(ValueError, lambda: spmd.reduce_scatter(y, pg, src=P, dst=S(1)))


@extra
def bad_reduce_scatter_V_wrong_extent(rank, ws, pg, typed):
    x = X(rank, (ws + 1, 2))
    _raises(ValueError, lambda: spmd.reduce_scatter(x, pg, src=P, dst=V))


@extra
def bad_all_to_all_not_divisible(rank, ws, pg, typed):
    x = X(rank, (2, 5))
    _raises(ValueError, lambda: spmd.all_to_all(x, pg, src=S(0), dst=S(1)),
            f"all_to_all: tensor dimension 1 (size 5) is not evenly divisible by "
            f"world_size ({ws})")
    z = X(rank, (5, 2))
    _raises(ValueError, lambda: spmd.all_to_all(z, pg, src=S(0), dst=V))


@extra
def bad_all_to_all_V_V_wrong_extent(rank, ws, pg, typed):
    x = X(rank, (ws + 1, 2))
    _raises(ValueError, lambda: spmd.all_to_all(x, pg, src=V, dst=V))


@extra
def bad_split_sizes_wrong_count(rank, ws, pg, typed):
    bad = [1] * (ws + 1)
    x = X(rank, (1, 3))
    _raises(ValueError, lambda: spmd.all_gather(x, pg, src=S(0), dst=R, split_sizes=bad))
    y = X(rank, (ws + 1, 3))
    _raises(ValueError, lambda: spmd.reduce_scatter(y, pg, src=P, dst=S(0), split_sizes=bad))
    _raises(ValueError, lambda: spmd.all_to_all(
        y, pg, src=S(0), dst=S(0), input_split_sizes=bad, output_split_sizes=[1] * ws))
    _raises(ValueError, lambda: spmd.all_to_all(
        y, pg, src=S(0), dst=S(0), input_split_sizes=[1] * ws, output_split_sizes=bad))


@extra
def bad_split_sizes_wrong_sum(rank, ws, pg, typed):
    y = X(rank, (2 * ws, 3))
    _raises(ValueError, lambda: spmd.reduce_scatter(
        y, pg, src=P, dst=S(0), split_sizes=[1] * ws))  # sums to ws != 2 * ws
    _raises(ValueError, lambda: spmd.all_to_all(
        y, pg, src=S(0), dst=S(0), input_split_sizes=[1] * ws, output_split_sizes=[2] * ws))
    # every rank's extent disagrees with split_sizes[rank]
    x = X(rank, (3, 3))
    _raises(ValueError, lambda: spmd.all_gather(x, pg, src=S(0), dst=R, split_sizes=[2] * ws))


@extra
def bad_split_sizes_option_misuse(rank, ws, pg, typed):
    x = X(rank, (ws, 3))
    _raises(ValueError, lambda: spmd.all_gather(x, pg, src=V, dst=R, split_sizes=[1] * ws),
            "only supported with src=S(i)")
    _raises(ValueError, lambda: spmd.reduce_scatter(x, pg, src=P, dst=V, split_sizes=[1] * ws),
            "only supported with dst=S(i)")
    z = X(rank, (2, 2 * ws))
    _raises(ValueError, lambda: spmd.all_to_all(
        z, pg, src=S(0), dst=S(1), input_split_sizes=[2] * ws, output_split_sizes=[2] * ws))


@extra
def bad_dim_conflicts(rank, ws, pg, typed):
    x = X(rank, (2 * ws, 2 * ws))
    _raises(ValueError, lambda: spmd.all_gather(x, pg, src=S(0), dst=R, gather_dim=1),
            "conflict")
    _raises(ValueError, lambda: spmd.reduce_scatter(x, pg, src=P, dst=S(1), scatter_dim=0),
            "conflict")
    _raises(ValueError, lambda: spmd.all_to_all(x, pg, src=S(0), dst=S(1), split_dim=0))
    _raises(ValueError, lambda: spmd.all_to_all(x, pg, src=S(0), dst=S(1), concat_dim=1))


@extra
def bad_convert_R_V_wrong_extent(rank, ws, pg, typed):
    x = X(rank, (ws + 1, 3))
    _raises((ValueError, AssertionError), lambda: spmd.convert(x, pg, src=R, dst=V))


@extra
def bad_convert_shard_dim_change(rank, ws, pg, typed):
    x = X(rank, (2, 2))
    _raises(ValueError, lambda: spmd.convert(x, pg, src=S(0), dst=S(1)),
            "convert(S(0), S(1)) cannot change the shard dimension without communication. "
            "Use all_to_all() instead.")


@extra
def broadcast_double_backward(rank, ws, pg, typed):
    # broadcast's backward is a broadcast call of its own (P -> V, summing
    # onto root), so the gradient of the gradient is broadcast(V -> R) again
    xs = [X(s, (2, 3)) for s in range(ws)]
    x = xs[rank].clone().requires_grad_()
    gs = [G(s, (2, 3)) for s in range(ws)]
    g = gs[rank].clone().requires_grad_()
    if typed:
        spmd.assert_type(x, {pg: V})
        spmd.assert_type(g, {pg: P})
    with _typecheck(typed):
        y = spmd.broadcast(x, pg, root=1, src=V, dst=R)
        (gx,) = torch.autograd.grad(y, x, g, create_graph=True)
        h = X(rank, (2, 3), base=7.0)
        if typed:
            spmd.assert_type(h, {pg: V})
        (gg,) = torch.autograd.grad(gx, g, h)
    _eq("gradient", gx.detach(), zeros_but((2, 3), rank, 1, total(gs)))
    _eq("gradient of the gradient", gg.detach(), X(1, (2, 3), base=7.0))
    if typed:
        assert _axis_type(gx, pg) is V and _axis_type(gg, pg) is R


@extra
def bad_broadcast_root(rank, ws, pg, typed):
    x = X(rank, (2, 3))
    msg = (f"broadcast: root={ws} is out of range for an axis group of {ws} ranks "
           f"(expected 0..{ws - 1}")
    _raises(ValueError, lambda: spmd.broadcast(x, pg, root=ws, src=V, dst=R), msg)
    _raises(ValueError, lambda: spmd.broadcast(x, pg, root=-1, src=V, dst=R), "root=-1")
    _raises(ValueError, lambda: spmd.broadcast(x, pg, root=ws, src=R, dst=R), msg)
    _raises(TypeError, lambda: spmd.broadcast(x, pg, root=1.0, src=V, dst=R), "root")


@extra
def collectives_still_in_sync(rank, ws, pg, typed):
    # After all the rejected calls above, the ranks still pair collectives up.
    x = X(rank, (2,))
    _eq("sync", spmd.all_reduce(x, pg, src=P, dst=R), total([X(s, (2,)) for s in range(ws)]))


NAMES = list(CASES) + list(EXTRAS)


def worker(rank, ws, typed):
    """Runs in each Gloo rank: every case, each failure as a string."""
    pg = dist.group.WORLD
    assert dist.get_rank() == rank and dist.get_world_size() == ws
    out = {}
    for name in NAMES:
        try:
            if name in CASES:
                run_case(CASES[name](ws), rank, ws, pg, typed)
            else:
                EXTRAS[name](rank, ws, pg, typed)
            out[name] = None
        except BaseException as e:  # noqa: BLE001
            import traceback
            out[name] = f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=-3)}"
        assert not spmd.is_type_checking()
    return out


# ----------------------------------------------------------------------------------
# The tests (parent side)
# ----------------------------------------------------------------------------------

LAUNCHES = {"ws2": (2, False), "ws4": (4, False), "ws2_typed": (2, True)}
_launched = {}


def _results(launch):
    if launch not in _launched:
        ws, typed = LAUNCHES[launch]
        try:
            _launched[launch] = gloo_harness.run_world(ws, worker, typed, timeout=90.0)
        except BaseException as e:  # noqa: BLE001 -- every test of the launch fails with it
            _launched[launch] = e
    res = _launched[launch]
    if isinstance(res, BaseException):
        raise AssertionError(f"launch {launch} failed: {res}")
    return res


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("launch", list(LAUNCHES))
def test_gloo(launch, name):
    res = _results(launch)
    failures = [f"rank {r}: {out[name]}" for r, out in enumerate(res) if out.get(name, "missing")]
    assert all(name in out for out in res), f"{name} did not run"
    assert not failures, "\n".join(failures)


def _fail_on_rank1(rank, ws, pidfile):
    if rank == 1:
        # Fail only once rank 0 is stuck (its pid written): on a loaded machine
        # rank 0 may still be starting when the short grace period runs out.
        # (The harness's timeout bounds this wait.)
        while not os.path.exists(pidfile):
            time.sleep(0.05)
        raise RuntimeError("rank 1 fails on purpose")
    with open(pidfile, "w") as f:
        f.write(str(os.getpid()))
    time.sleep(600)  # stuck: only the harness's kill ends this
    return "unreachable"


def test_harness_fails_fast_and_kills_stuck_ranks(tmp_path):
    """The grace after rank 1's failure, not the timeout, ends the run (the
    message says which; no wall-clock bound that a loaded machine breaks)."""
    pidfile = str(tmp_path / "pid")
    with pytest.raises(gloo_harness.WorkerError) as ei:
        gloo_harness.run_world(2, _fail_on_rank1, pidfile, timeout=120.0, grace=1.0)
    assert "rank 1 fails on purpose" in str(ei.value)
    assert "did not finish within the 1.0 s grace (killed)" in str(ei.value)
    pid = int(open(pidfile).read())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_every_allowed_pair_is_covered():
    """The table of cases names every (src, dst) pair the collectives allow."""
    want = ["all_reduce_P_R", "all_reduce_P_I", "all_reduce_V_R", "all_gather_V_R_dim0",
            "all_gather_V_I_dim0", "all_gather_S0_R", "all_gather_S1_I", "reduce_scatter_P_V",
            "reduce_scatter_P_S0", "reduce_scatter_P_S1", "all_to_all_V_V", "all_to_all_S0_S1",
            "all_to_all_S1_S0", "all_to_all_S1_V", "all_to_all_V_S1"]
    want += ["reinterpret_" + p for p in ("R_V", "V_P", "R_P", "R_I", "I_R", "I_V", "I_P")]
    want += ["convert_" + p for p in ("I_R", "R_I", "R_V", "R_S0", "I_V", "I_S0", "R_P", "I_P",
                                      "V_P", "S1_P")]
    missing = [n for n in want if n not in CASES]
    assert not missing
