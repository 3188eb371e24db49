"""No silent limits: ops and groups of any size are checked whole.

Each test sits at or past a boundary that once truncated silently (64
tensors per op, 8 typed Scalars per op, 64 ranks per collective): the
checker must either see everything or raise an error naming the limit.
"""

import subprocess
import sys
import textwrap

import pytest
import torch

import cspmd as spmd
from cspmd import MeshAxis, P, R, V, SpmdTypeError
from cspmd._lib import ops
from conftest import ltype


@pytest.fixture
def full(dp, tp):
    """``full(t)``: the type t on tp, R on dp (strict mode wants both)."""
    return lambda t: {dp: R, tp: t}


def rs(n, t, shape=(2,)):
    xs = [torch.randn(*shape) for _ in range(n)]
    for x in xs:
        spmd.assert_type(x, t)
    return xs


@pytest.mark.parametrize("n,where", [(65, 64), (1000, 0), (1000, 517), (1000, 999)])
def test_cat_sees_every_tensor(full, checked, n, where):
    xs = rs(n, full(R))
    xs[where] = torch.randn(2)
    spmd.assert_type(xs[where], full(P))
    with pytest.raises(SpmdTypeError, match="Partial type on axis .* in a linear op") as e:
        torch.cat(xs)
    if n > 20:  # the context lists a few tensors, then says how many it left out
        assert f"... and {n - 16} more" in str(e.value)


def test_cat_of_many_types_the_result(full, checked):
    y = torch.cat(rs(1000, full(V)))
    assert ltype(y)["mesh_tp"] == "V"
    assert y.shape == (2000,)


def test_stack_with_one_untyped_among_many(full, checked):
    xs = rs(300, full(R))
    xs[250] = torch.randn(2)  # untyped: strict mode names it
    with pytest.raises(SpmdTypeError, match=r"args\[250\] missing axis"):
        torch.stack(xs)


@pytest.mark.parametrize("pieces", [64, 65, 100, 1000])
def test_split_types_every_piece(full, checked, pieces):
    x = torch.randn(pieces * 2)
    spmd.assert_type(x, full(V))
    outs = torch.split(x, 2)
    assert len(outs) == pieces
    assert all(ltype(o).get("mesh_tp") == "V" for o in outs)
    outs = torch.unbind(x.view(pieces, 2))
    assert all(ltype(o).get("mesh_tp") == "V" for o in outs)


def test_many_typed_scalars_are_all_operands(full, checked):
    x = torch.randn(3)
    spmd.assert_type(x, full(R))
    vid = spmd.Scalar(1.0, full(V))._type_id
    ops.pending_scalars([vid] * 40)
    y = x + 1
    assert ltype(y)["mesh_tp"] == "V"  # every parked V reached the op
    ops.pending_scalars([])


BIG_GROUP = textwrap.dedent(
    """
    import torch, torch.distributed as dist
    import cspmd as spmd, cspmd.checker
    from cspmd import R, V, S
    WS = {ws}
    dist.init_process_group(backend="fake", rank=3, world_size=WS)
    g = dist.group.WORLD
    with spmd.checker.typecheck():
        s = torch.randn(2, WS)
        spmd.assert_type(s, {{g: V}})
        y = spmd.all_to_all(s, g, src=S(0), dst=S(1))  # split dim 1, concat dim 0
        assert tuple(y.shape) == (2 * WS, 1), y.shape
        x = torch.randn(WS, 2)
        spmd.assert_type(x, {{g: V}})
        assert spmd.get_local_type(y)[spmd.MeshAxis.of(g)] is V
        z = spmd.all_to_all(x, g, src=V, dst=V)
        assert tuple(z.shape) == (WS, 2), z.shape
        piece = torch.randn(1, 2)
        spmd.assert_type(piece, {{g: V}})
        w = spmd.all_gather(piece, g, src=S(0), dst=R, split_sizes=[1] * WS)
        assert tuple(w.shape) == (WS, 2), w.shape
        u = spmd.all_to_all(x, g, src=V, dst=V, output_split_sizes=[1] * WS,
                            input_split_sizes=[1] * WS)
        assert tuple(u.shape) == (WS, 2), u.shape
    print("ok")
    """
)


@pytest.mark.parametrize("ws", [65, 4096])
def test_collectives_on_a_large_fake_group(ws):
    r = subprocess.run([sys.executable, "-c", BIG_GROUP.format(ws=ws)], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip().endswith("ok")


def test_foreach_over_ten_thousand_tensors_types_each(full, checked):
    xs = [torch.randn(2) for _ in range(10_000)]
    for i, x in enumerate(xs):
        spmd.assert_type(x, full(V if i % 3 == 0 else R))
    ys = torch._foreach_add(xs, 1.0)
    assert [ltype(y)["mesh_tp"] for y in ys] == ["V" if i % 3 == 0 else "R" for i in range(10_000)]
    torch._foreach_mul_(xs, ys)  # in place, element by element
    assert ltype(xs[9_999])["mesh_tp"] == "V" and ltype(xs[9_998])["mesh_tp"] == "R"


def test_foreach_with_one_partial_among_ten_thousand(full, checked):
    xs = rs(10_000, full(R))
    xs[9_999] = torch.randn(2)
    spmd.assert_type(xs[9_999], full(P))
    before = [x.clone() for x in xs[-2:]]
    with pytest.raises(SpmdTypeError, match=r"list element \[9999\]: Partial type on axis"):
        torch._foreach_exp_(xs)
    with spmd.checker.no_typecheck():  # nothing ran
        assert all(torch.equal(a, b) for a, b in zip(before, xs[-2:]))


# ---- the remaining fixed limits: each is an error naming it -----------------

NINE = [MeshAxis.of(2, 2**i) for i in range(9)]  # orthogonal, 512 ranks


def test_nine_axes_in_one_type_or_mesh_is_an_error():
    with pytest.raises(ValueError, match="at most 8 mesh axes are supported"):
        spmd.assert_type(torch.zeros(2), {a: R for a in NINE})
    with pytest.raises(ValueError, match="at most 8 mesh axes are supported"):
        with spmd.set_current_mesh({f"a{i}": a for i, a in enumerate(NINE)}):
            pass
    x = spmd.assert_type(torch.zeros(2), {a: R for a in NINE[:8]})  # 8 is fine
    assert len(spmd.get_local_type(x)) == 8


def test_partition_spec_over_sixteen_dims_is_an_error():
    x = torch.zeros([1] * 17)
    with pytest.raises(ValueError, match="partition specs support at most 16 tensor dims"):
        spmd.assert_type(x, {NINE[0]: spmd.S(16)})
    assert not spmd.has_local_type(x)
    spmd.assert_type(torch.zeros([1] * 16), {NINE[0]: spmd.S(15)})


def test_layout_modes_merge_before_the_eight_mode_limit():
    assert MeshAxis.of([2] * 9, [2**i for i in range(9)][::-1]) == MeshAxis.of(512, 1)
    with pytest.raises(ValueError, match="layout of 9 modes .*at most 8 modes"):
        MeshAxis.of([2] * 9, [3**i for i in range(9)][::-1])


def test_axis_containment_past_its_search_limit_is_an_error():
    assert MeshAxis.of(2**20, 1) <= MeshAxis.of(2**21, 1)  # a million ranks: decided
    assert not MeshAxis.of(2**21, 1) <= MeshAxis.of(2**20, 1)
    with pytest.raises(ValueError, match="cannot decide whether axis .* is within axis .*"
                                         "cspmd tests at most 67108864 ranks"):
        MeshAxis.of(2**27, 1) <= MeshAxis.of(2**28, 1)
