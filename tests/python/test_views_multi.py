"""Views, detach, no_grad and multi-output ops."""

import pytest
import torch

import cspmd as spmd
from cspmd import I, P, R, V, SpmdTypeError
from conftest import ltype


def both(letter):
    return {"mesh_dp": letter, "mesh_tp": letter}


VIEWS = {
    "view": lambda x: x.view(6, 4),
    "reshape": lambda x: x.reshape(-1),
    "transpose": lambda x: x.transpose(0, 1),
    "permute": lambda x: x.permute(2, 0, 1),
    "unsqueeze": lambda x: x.unsqueeze(0),
    "squeeze": lambda x: x.unsqueeze(1).squeeze(1),
    "select": lambda x: x.select(0, 1),
    "index_0": lambda x: x[0],
    "slice": lambda x: x[:, 1:],
    "narrow": lambda x: x.narrow(2, 0, 2),
    "flatten": lambda x: x.flatten(),
    "expand": lambda x: x[:, :1].expand(2, 3, 4),
    "t_contiguous": lambda x: x.transpose(0, 2).contiguous(),
    "mT": lambda x: x.mT,
    "detach": lambda x: x.detach(),
}


@pytest.mark.parametrize("t", [R, I, V, P])
@pytest.mark.parametrize("name", list(VIEWS))
def test_view_keeps_type(checked, typed, name, t):
    # At aten level select/slice are LINEAR, so P survives x[0] and x[:, 1:]
    # (the reference's Python-level __getitem__ is NONLINEAR).
    x = typed(t, 2, 3, 4)
    out = VIEWS[name](x)
    assert spmd.has_local_type(out)
    assert ltype(out) == both(t.name)


def test_view_gets_its_own_type(checked, typed):
    # no aliasing model: changing the base's stored type leaves the view's
    x = typed(V, 2, 3)
    v = x.view(6)
    spmd.mutate_type(x, src=V, dst=P)
    assert ltype(v) == both("V")
    assert ltype(x) == both("P")


def test_view_data_shared(checked, typed):
    x = spmd.assert_type(torch.zeros(2, 3), R)
    v = x[0]
    v.add_(1.0)
    with spmd.no_typecheck():
        assert x[0].tolist() == [1.0, 1.0, 1.0]


def test_detach_keeps_partial_and_grad_free(checked, typed):
    p = typed(P, requires_grad=True)
    d = p.detach()
    assert not d.requires_grad
    assert ltype(d) == both("P")


def test_no_grad_tracks_types(checked, typed):
    with torch.no_grad():
        assert ltype(typed(R) * typed(R)) == both("R")
        assert ltype(typed(I) + typed(I)) == both("I")
        assert ltype(typed(R) + typed(V)) == both("V")
        with pytest.raises(SpmdTypeError, match="in a linear op requires all operands"):
            typed(P) + typed(R)


def test_inference_mode_tracks_types(checked, typed):
    with torch.inference_mode():
        x = typed(I)
        assert ltype(x * 2) == both("I")


MULTI = {
    "split": lambda x: x.split(1),
    "split_sizes": lambda x: x.split([1, 1], dim=0),
    "chunk": lambda x: x.chunk(2, dim=2),
    "unbind": lambda x: x.unbind(0),
    "topk": lambda x: tuple(x.topk(2)),
    "sort": lambda x: tuple(x.sort()),
    "max_dim": lambda x: tuple(x.max(dim=0)),
}
LINEAR_MULTI = {"split", "split_sizes", "chunk", "unbind"}


@pytest.mark.parametrize("t", [R, I, V])
@pytest.mark.parametrize("name", list(MULTI))
def test_multi_output_same_type(checked, typed, name, t):
    outs = MULTI[name](typed(t, 2, 3, 4))
    assert len(outs) >= 2
    for o in outs:
        assert ltype(o) == both(t.name)


@pytest.mark.parametrize("name", sorted(LINEAR_MULTI))
def test_linear_multi_output_keeps_partial(checked, typed, name):
    for o in MULTI[name](typed(P, 2, 3, 4)):
        assert ltype(o) == both("P")


@pytest.mark.parametrize("name", ["topk", "sort", "max_dim"])
def test_nonlinear_multi_output_rejects_partial(checked, typed, name):
    with pytest.raises(SpmdTypeError, match="cannot propagate through non-linear ops"):
        MULTI[name](typed(P, 2, 3, 4))


def test_topk_indices_are_typed_like_values(checked, typed, dp_axis, tp_axis):
    vals, idx = typed({dp_axis: R, tp_axis: V}, 5).topk(2)
    assert ltype(vals) == {"mesh_dp": "R", "mesh_tp": "V"}
    assert ltype(idx) == {"mesh_dp": "R", "mesh_tp": "V"}
    assert idx.dtype == torch.int64


def test_setitem_retypes_destination(checked, typed):
    x = typed(R)
    x[0] = typed(V, 4)            # select + copy_ into a fresh view
    assert ltype(x) == both("V")  # part of x now differs across ranks


def test_setitem_into_partial_rejected(checked, typed):
    x = typed(P)
    with pytest.raises(SpmdTypeError):
        x[0] = typed(R, 4)


def test_item_of_partial_rejected(checked, typed):
    with pytest.raises(SpmdTypeError, match="cannot propagate through non-linear ops"):
        typed(P).sum().item()
    val = typed(R, 1).item()
    assert isinstance(val, float)


def test_metadata_queries_unchecked(checked, typed):
    p = typed(P, 2, 3)
    assert p.shape == (2, 3) and p.numel() == 6 and p.dim() == 2
    assert p.is_contiguous()
