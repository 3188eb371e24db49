"""Ops torch declares linear (resampling, padding, pooling, shuffles, FFTs,
slice scatters) carry P forward and a P gradient backward, as real calls
under typecheck().  The reference types them as non-linear and rejects P:
docs/differences.md says why cspmd accepts (torch's derivatives.yaml marks
them auto_linear; test_linear_from_torch.py checks the whole list)."""

import contextlib

import pytest
import torch
import torch.nn.functional as F

import cspmd as spmd
import cspmd.checker
import reference
from cspmd import I, P, R, S, V

# name -> f(x) on a (1, 4, 8, 8) input
OPS = {
    "interpolate nearest": lambda x: F.interpolate(x, scale_factor=2),
    "interpolate bilinear": lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"),
    "interpolate bicubic aa": lambda x: F.interpolate(x, size=(5, 5), mode="bicubic",
                                                      antialias=True),
    "pad zeros": lambda x: F.pad(x, (1, 2)),
    "pad reflect": lambda x: F.pad(x, (1, 1, 1, 1), mode="reflect"),
    "pad replicate": lambda x: F.pad(x, (1, 1, 1, 1), mode="replicate"),
    "avg_pool2d": lambda x: F.avg_pool2d(x, 2),
    "adaptive_avg_pool2d": lambda x: F.adaptive_avg_pool2d(x, 3),
    "pixel_shuffle": lambda x: F.pixel_shuffle(x, 2),
    "pixel_unshuffle": lambda x: F.pixel_unshuffle(x, 2),
    "unfold (im2col)": lambda x: F.unfold(x, 2),
    "fold (col2im)": lambda x: F.fold(x.reshape(1, 16, 16), (5, 5), 2),
    "rfft": lambda x: torch.view_as_real(torch.fft.rfft(x)),
    "fft2": lambda x: torch.view_as_real(torch.fft.fft2(x)),
    "irfft": lambda x: torch.fft.irfft(x),
    "slice_scatter": lambda x: torch.slice_scatter(x, x[..., :2] * 2, dim=3, start=0, end=2),
}


def _typed(lib, letter, requires_grad=False):
    x = torch.randn(1, 4, 8, 8, requires_grad=requires_grad)
    return lib.assert_type(x, {"tp": getattr(lib, letter), "dp": lib.R})


@pytest.mark.parametrize("name", list(OPS))
def test_partial_flows_forward(mesh, name):
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck():
        y = OPS[name](_typed(spmd, "P"))
    assert {str(a): t.name for a, t in spmd.get_local_type(y).items()} == {
        "mesh_dp": "R", "mesh_tp": "P"}


@pytest.mark.parametrize("name", ["pad zeros", "avg_pool2d", "rfft", "pixel_shuffle"])
def test_the_reference_rejects_partial_here(mesh, name):
    """The deliberate difference: the reference types these as non-linear."""
    ref = reference.load()
    reference.load("spmd_types.checker")
    with ref.set_current_mesh(mesh), ref.checker.typecheck():
        with pytest.raises(ref.SpmdTypeError, match="non-linear"):
            OPS[name](_typed(ref, "P"))


def test_padding_with_a_nonzero_value_is_affine(mesh):
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck():
        x = _typed(spmd, "P")
        with pytest.raises(spmd.SpmdTypeError, match="constant_pad_nd"):
            F.pad(x, (1, 1), value=1.0)
        y = F.pad(_typed(spmd, "R"), (1, 1), value=1.0)
    assert spmd.get_local_type(y)[spmd.MeshAxis.of(mesh.get_group("tp"))] is R


def test_slice_scatter_is_linear_in_self_and_src_jointly(mesh):
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck():
        x, src = _typed(spmd, "P"), _typed(spmd, "R")[..., :2]
        with pytest.raises(spmd.SpmdTypeError, match="Found types: \\[P, R\\]"):
            torch.slice_scatter(x, src, dim=3, start=0, end=2)


@pytest.mark.parametrize("use_mesh", [True, False], ids=["mesh", "no mesh"])
@pytest.mark.parametrize("name", list(OPS))
def test_partial_gradient_flows_backward(mesh, dp, tp, name, use_mesh):
    # convert(R -> S(0)) has backward convert(S(0) -> P): y's gradient is P.
    x = spmd.assert_type(torch.randn(1, 4, 8, 8, requires_grad=True), {dp: I, tp: R})
    region = spmd.set_current_mesh(mesh) if use_mesh else contextlib.nullcontext()
    with region, spmd.checker.typecheck():
        y = OPS[name](x).reshape(-1)
        z = spmd.convert(y, tp, src=R, dst=S(0))
        spmd.reinterpret(z.sum(), tp, src=V, dst=P).backward()
    assert spmd.get_local_type(x.grad) == {spmd.MeshAxis.of(dp): I, spmd.MeshAxis.of(tp): P}
    assert x.grad.abs().sum() > 0


def test_partial_written_into_a_tensor_without_the_axis_is_an_error(tp):
    # zeros made without a current mesh are typed {}; keeping {} after a
    # Partial write would drop the pending sum unseen
    p = spmd.assert_type(torch.randn(4), {tp: P})
    with spmd.checker.typecheck():
        buf = torch.zeros(8)
        with pytest.raises(spmd.SpmdTypeError, match="no type on axis"):
            buf[:4].copy_(p)
    assert spmd.get_local_type(buf) == {}
    assert buf.abs().sum() == 0  # nothing was written
