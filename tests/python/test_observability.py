"""What a user's tools see of cspmd: CommDebugMode counts its collectives as
it counts functional collectives, a user's TorchDispatchMode and the profiler
see only user-meaningful ops (never bookkeeping such as get_type/set_type),
and trace() logs collectives with their src/dst types."""

import logging

import pytest
import torch
from torch.distributed.tensor.debug import CommDebugMode
from torch.utils._python_dispatch import TorchDispatchMode

import cspmd as spmd
from cspmd import I, P, R, S, V

funcol = torch.ops.c10d_functional


def program(dp, tp):
    """A short typed program: annotations, queries, arithmetic, one of each
    communicating collective."""
    x = torch.randn(8, 4)
    spmd.assert_type(x, {dp: R, tp: P})
    y = spmd.all_reduce(x, tp, src=P, dst=R)
    spmd.assert_type(y, {dp: R, tp: R})
    spmd.get_local_type(y)
    spmd.has_local_type(y)
    z = torch.mul(y, y) + 1
    g = spmd.all_gather(spmd.convert(z, tp, src=R, dst=S(0)), tp, src=S(0), dst=R)
    s = spmd.reduce_scatter(x, tp, src=P, dst=S(0))
    return g, spmd.all_to_all(s, tp, src=S(0), dst=S(1))


class OpRecorder(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


EXPECTED_COMMS = {funcol.all_reduce: 1, funcol.all_gather_into_tensor: 1,
                  funcol.reduce_scatter_tensor: 1, funcol.all_to_all_single: 1}


def test_comm_debug_mode_counts_cspmd_collectives(checked, dp, tp):
    with CommDebugMode() as comm:
        program(dp, tp)
    assert dict(comm.get_comm_counts()) == EXPECTED_COMMS
    assert comm.get_total_counts() == 4


def test_comm_debug_mode_counts_backward_collectives(checked, dp, tp):
    x = torch.randn(4, 4, requires_grad=True)
    spmd.assert_type(x, {dp: I, tp: V})
    with CommDebugMode() as comm:
        y = spmd.all_gather(x, tp, src=V, dst=R)
        assert dict(comm.get_comm_counts()) == {funcol.all_gather_into_tensor: 1}
        with spmd.no_typecheck():
            grad = torch.ones(y.shape)  # untyped, annotated below
        spmd.assert_type(grad, {dp: I, tp: P})  # the dual of y's {dp: I, tp: R}
        y.backward(grad)  # the backward of all_gather(V -> R): reduce_scatter(P -> V)
    assert dict(comm.get_comm_counts()) == {funcol.all_gather_into_tensor: 1,
                                            funcol.reduce_scatter_tensor: 1}


def test_comm_counts_match_the_reference(mesh, dp, tp):
    """The same collectives, counted alike under cspmd and spmd_types."""
    from reference import load

    ref = load()
    checker = load("spmd_types.checker")
    for lib, typecheck in ((spmd, spmd.checker.typecheck), (ref, checker.typecheck)):
        with lib.set_current_mesh(mesh), typecheck(), CommDebugMode() as comm:
            x = torch.randn(8, 4)
            lib.assert_type(x, {dp: lib.R, tp: lib.P})
            y = lib.all_reduce(x, tp, src=lib.P, dst=lib.R)
            lib.all_gather(lib.convert(y, tp, src=lib.R, dst=lib.S(0)), tp, src=lib.S(0),
                           dst=lib.R)
            lib.reduce_scatter(x, tp, src=lib.P, dst=lib.S(0))
        if lib is spmd:
            ours = dict(comm.get_comm_counts())
        else:
            theirs = dict(comm.get_comm_counts())
    assert ours == theirs and sum(ours.values()) == 3


def test_dispatch_mode_sees_no_bookkeeping(checked, dp, tp):
    with OpRecorder() as rec:
        program(dp, tp)
    assert rec.ops, "the mode saw nothing"
    assert not [op for op in rec.ops if op.startswith("cspmd.")], rec.ops
    # The collectives are there, under their functional names.
    for name in ("_c10d_functional.all_reduce.default",
                 "_c10d_functional.all_gather_into_tensor.default",
                 "_c10d_functional.reduce_scatter_tensor.default",
                 "_c10d_functional.all_to_all_single.default"):
        assert name in rec.ops, rec.ops


def test_checking_adds_no_ops_to_a_dispatch_mode(mesh, dp, tp):
    """A user's mode sees exactly the same ops with checking on as off."""
    seen = {}
    for on in (True, False):
        with spmd.set_current_mesh(mesh), spmd.checker.typecheck(), OpRecorder() as rec:
            if on:
                program(dp, tp)
            else:
                with spmd.no_typecheck():
                    program(dp, tp)
        seen[on] = rec.ops
    assert seen[True] == seen[False]


def profiled_names(fn):
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                acc_events=True) as prof:
        fn()
    return [e.name for e in prof.events()]


def test_profiler_sees_no_bookkeeping(mesh, dp, tp):
    def run(on):
        def go():
            with spmd.set_current_mesh(mesh), spmd.checker.typecheck():
                if on:
                    program(dp, tp)
                else:
                    with spmd.no_typecheck():
                        program(dp, tp)
        return go

    run(True)()  # warm up (first-call registration)
    on, off = profiled_names(run(True)), profiled_names(run(False))
    assert not [n for n in on if n.startswith("cspmd::") and n != "cspmd::collective"], on
    # Checking adds no events: the same ops, the same number of times.
    assert sorted(on) == sorted(off)
    # The collectives are there with readable names.
    assert on.count("cspmd::collective") == 5  # 4 communicating + one convert
    assert "_c10d_functional::all_reduce" in on


@pytest.mark.parametrize("fn,src,dst,expect", [
    ("all_reduce", P, R, "cspmd::all_reduce({mesh_dp: R, mesh_tp: P}, axis=mesh_tp, src=P, "
                         "dst=R) -> {mesh_dp: R, mesh_tp: R}"),
    ("all_reduce", P, I, "cspmd::all_reduce({mesh_dp: R, mesh_tp: P}, axis=mesh_tp, src=P, "
                         "dst=I) -> {mesh_dp: R, mesh_tp: I}"),
    ("reduce_scatter", P, S(0), "cspmd::reduce_scatter({mesh_dp: R, mesh_tp: P}, "
                                "axis=mesh_tp, src=P, dst=S(0)) -> {mesh_dp: R, mesh_tp: V}"),
])
def test_trace_lists_collectives(checked, typed, tp, caplog, fn, src, dst, expect):
    x = typed({"dp": R, "tp": P}, 8, 4)
    with caplog.at_level(logging.INFO, logger="cspmd.runtime.trace"), spmd.trace():
        getattr(spmd, fn)(x, tp, src=src, dst=dst)
    lines = [r.getMessage() for r in caplog.records if r.name == "cspmd.runtime.trace"]
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"{__file__}:") and lines[0].endswith("  " + expect), lines
