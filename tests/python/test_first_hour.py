"""What a new user meets first: the hint on a tensor that has no type, types
printed as R/I/V/P/S(d) in every message, ValueError/TypeError from the
public API filtered to the user's frames, and uneven convert/shard."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch

import cspmd as spmd
from cspmd import I, P, R, S, V


def frames(tb):
    out = []
    while tb is not None:
        out.append(tb.tb_frame.f_code.co_filename)
        tb = tb.tb_next
    return out


# ---- the untyped-operand hint ------------------------------------------------------


def test_untyped_operand_says_annotate_it(checked, typed):
    x = typed({"dp": R, "tp": R})
    with spmd.no_typecheck():
        u = torch.randn(4, 4)  # made with checking off: no type at all
    with pytest.raises(spmd.SpmdTypeError) as e:
        x + u
    first = str(e.value).splitlines()[0]
    assert first.startswith("args[1] missing axis mesh_dp from the current mesh")
    assert first.endswith("args[1] has no type at all: annotate it with assert_type().")


def test_typed_operand_missing_an_axis_gets_no_untyped_hint(checked, typed, dp_axis):
    x = typed({"dp": R, "tp": R})
    with spmd.no_typecheck():
        u = torch.randn(4, 4)
    with spmd.set_current_mesh(None):
        spmd.assert_type(u, {dp_axis: R})  # typed, on dp only
    with pytest.raises(spmd.SpmdTypeError) as e:
        x + u
    assert "missing axis mesh_tp" in str(e.value) and "no type at all" not in str(e.value)


HINT = "It has no type at all: annotate it with assert_type()."


COLLECTIVES = {
    "all_reduce": lambda u, tp: spmd.all_reduce(u, tp, src=P, dst=R),
    "all_gather": lambda u, tp: spmd.all_gather(u, tp, src=V, dst=R),
    "reinterpret": lambda u, tp: spmd.reinterpret(u, tp, src=V, dst=P),
    "convert": lambda u, tp: spmd.convert(u, tp, src=R, dst=V),
}
# (Raw c10d collectives of completely untyped data are not checked -- see
# differences.md -- so they raise no missing-axis error to hint in.)


@pytest.mark.parametrize("name", list(COLLECTIVES))
def test_collective_on_an_untyped_tensor_says_annotate_it(checked, tp, name):
    """Collectives give a never-annotated operand the ops' hint."""
    with spmd.no_typecheck():
        u = torch.randn(4, 4)
    with pytest.raises(spmd.SpmdTypeError) as e:
        COLLECTIVES[name](u, tp)
    first = str(e.value).splitlines()[0]
    assert "tensor has no type for axis mesh_tp" in first and first.endswith(HINT)
    assert not spmd.has_local_type(u)


def test_collective_on_a_tensor_typed_elsewhere_gets_no_hint(checked, dp_axis):
    with spmd.no_typecheck():
        u = torch.randn(4, 4)
    with spmd.set_current_mesh(None):
        spmd.assert_type(u, {dp_axis: R})
    with pytest.raises(spmd.SpmdTypeError) as e:
        spmd.all_reduce(u, "tp", src=P, dst=R)
    assert "no type for axis mesh_tp" in str(e.value) and "no type at all" not in str(e.value)


# ---- types as letters ---------------------------------------------------------------


@pytest.mark.parametrize("bad,expect", [
    (lambda x: spmd.assert_type(x, {"dp": R, "tp": V}),
     "SPMD type mismatch on axis mesh_tp: tensor has R, expected V"),
    (lambda x: spmd.mutate_type(x, "tp", src=V, dst=R),
     "mutate_type: expected current type V on axis mesh_tp, got R"),
    (lambda x: spmd.convert(x, "tp", src=V, dst=P),
     "convert(V, P) requires expert_mode=True"),
    (lambda x: spmd.all_reduce(x, "tp", src=P, dst=R),
     "all_reduce: expected input type P on axis mesh_tp, got R"),
])
def test_messages_print_type_letters(checked, typed, bad, expect):
    x = typed({"dp": R, "tp": R}, 4, 4)
    with pytest.raises((spmd.SpmdTypeError, ValueError)) as e:
        bad(x)
    assert expect in str(e.value)
    assert "PerMeshAxisLocalSpmdType" not in str(e.value)


def test_type_values_print_as_letters():
    assert [f"{t}" for t in (R, I, V, P, S(1))] == ["R", "I", "V", "P", "S(1)"]
    assert str({"tp": P}) == "{'tp': P}"


# ---- ValueError / TypeError filtered like SpmdTypeError --------------------------------


@pytest.mark.parametrize("exc,call", [
    (TypeError, lambda: spmd.get_local_type(3)),
    (TypeError, lambda: spmd.assert_type([1.0], {"tp": R})),
    (ValueError, lambda: spmd.convert(torch.zeros(3), "tp", src=R, dst=V)),
    (ValueError, lambda: spmd.all_reduce(torch.zeros(2), "tp", src=P, dst=V)),
])
def test_value_and_type_errors_filtered_to_user_frames(checked, exc, call):
    with spmd.traceback_filtering("remove_frames"):
        with pytest.raises(exc) as e:
            call()
    files = frames(e.value.__traceback__)
    assert files and not [f for f in files if "/cspmd/" in f], files
    assert str(e.value).count("SPMD_TYPES_TRACEBACK_FILTERING=off") == 1
    assert [f for f in frames(e.value.__cause__.__traceback__) if "/cspmd/" in f]


def test_value_error_filtered_in_a_script():
    """Outside pytest (auto mode = quiet_remove_frames) the traceback a user
    sees ends at their own line."""
    code = textwrap.dedent("""
        import torch, torch.distributed as dist
        import cspmd as spmd
        dist.init_process_group(backend="fake", rank=0, world_size=4)
        spmd.all_reduce(torch.zeros(2), dist.group.WORLD, src=spmd.P, dst=spmd.V)
    """)
    env = {k: v for k, v in os.environ.items() if not k.endswith("TRACEBACK_FILTERING")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 1
    tb = out.stderr[out.stderr.index("Traceback"):]
    assert 'File "<string>", line 5, in <module>' in tb
    assert "/cspmd/" not in tb, tb
    assert "ValueError: " in tb and "SPMD_TYPES_TRACEBACK_FILTERING=off" in tb


# ---- uneven convert / shard: torch.chunk sizing, as the reference ------------------


@pytest.mark.parametrize("n", [10, 9, 5, 4, 3])
def test_uneven_shard_is_torch_chunk_sizing_like_the_reference(mesh, tp, n):
    """convert(R -> S(0)) of a dim the group size does not divide: this rank
    keeps torch.chunk's piece (ceil(n / 4) rows, the last ranks short), which
    is what spmd_types 0.3.1 computes."""
    from reference import load

    ref = load()
    x = torch.arange(float(n * 2)).reshape(n, 2)
    ours = spmd.convert(x, tp, src=R, dst=S(0))
    theirs = ref.convert(x, tp, src=ref.R, dst=ref.S(0))
    assert torch.equal(ours, theirs) and torch.equal(ours, x.chunk(4, 0)[0])
    assert torch.equal(spmd.shard(x, tp, src=R, dst=S(0)), ours)


def test_rank_without_a_chunk_raises():
    """3 rows over 4 ranks: torch.chunk makes 3 pieces, so the last rank has
    none -- a clear ValueError (the reference's is an IndexError)."""
    code = textwrap.dedent("""
        import torch, torch.distributed as dist
        import cspmd as spmd
        dist.init_process_group(backend="fake", rank=3, world_size=4)
        try:
            spmd.convert(torch.zeros(3, 2), dist.group.WORLD, src=spmd.R, dst=spmd.S(0))
        except ValueError as e:
            print(e)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == "convert(R, S(0)): extent 3 splits into fewer than 4 chunks"
