"""torch.complex and torch.polar build complex tensors linearly: complex in
(real, imag) jointly, polar in abs with the angle a coefficient, so a
pending sum stays one (docs/differences.md; the reference refuses P)."""

import pytest
import torch

import cspmd as spmd
import cspmd.checker
import reference
from cspmd import I, P, R, S, V


def _typed(lib, tp, requires_grad=False):
    x = torch.rand(4, 3, requires_grad=requires_grad)
    return lib.assert_type(x, {"tp": getattr(lib, tp), "dp": lib.R})


def _tp(y):
    return {str(a): t.name for a, t in spmd.get_local_type(y).items()}["mesh_tp"]


@pytest.mark.parametrize("parts,want", [(("P", "P"), "P"), (("R", "R"), "R"),
                                        (("V", "R"), "V"), (("I", "I"), "I")])
def test_complex_is_linear_in_both_parts(mesh, parts, want):
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck():
        y = torch.complex(_typed(spmd, parts[0]), _typed(spmd, parts[1]))
    assert y.dtype == torch.complex64 and _tp(y) == want


def test_complex_refuses_partial_with_replicated(mesh):
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck():
        with pytest.raises(spmd.SpmdTypeError, match=r"Found types: \[P, R\](.|\n)*In aten::complex\("):
            torch.complex(_typed(spmd, "P"), _typed(spmd, "R"))


def test_polar_is_linear_in_abs(mesh):
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck():
        assert _tp(torch.polar(_typed(spmd, "P"), _typed(spmd, "R"))) == "P"
        assert _tp(torch.polar(_typed(spmd, "V"), _typed(spmd, "V"))) == "V"
        with pytest.raises(spmd.SpmdTypeError, match=r"In aten::polar\("):
            torch.polar(_typed(spmd, "R"), _typed(spmd, "P"))  # the angle is no sum


def test_complex_backward_gives_each_part_a_partial_gradient(mesh, dp, tp):
    # convert(R -> S(0)) has backward convert(S(0) -> P): the gradient is P.
    parts = [spmd.assert_type(torch.randn(8, requires_grad=True), {dp: I, tp: R})
             for _ in range(2)]
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck():
        y = torch.view_as_real(torch.complex(*parts)).reshape(-1)
        z = spmd.convert(y, tp, src=R, dst=S(0))
        spmd.reinterpret(z.sum(), tp, src=V, dst=P).backward()
    for x in parts:
        assert spmd.get_local_type(x.grad) == {spmd.MeshAxis.of(dp): I,
                                               spmd.MeshAxis.of(tp): P}


@pytest.mark.parametrize("fn", ["complex", "polar"])
def test_the_reference_refuses_partial(mesh, fn):
    ref = reference.load()
    reference.load("spmd_types.checker")
    with ref.set_current_mesh(mesh), ref.checker.typecheck():
        with pytest.raises(ref.SpmdTypeError, match="non-linear"):
            getattr(torch, fn)(_typed(ref, "P"), _typed(ref, "R"))
