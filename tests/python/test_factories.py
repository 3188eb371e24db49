"""Factories, untyped results and *_like ops."""

import pytest
import torch

import cspmd as spmd
from cspmd import I, P, R, V, SpmdTypeError
from cspmd.checker import typecheck
from conftest import ltype


def both(letter):
    return {"mesh_dp": letter, "mesh_tp": letter}


DETERMINISTIC = {
    "zeros": lambda: torch.zeros(3),
    "ones": lambda: torch.ones(2, 3),
    "full": lambda: torch.full((3,), 2.0),
    "arange": lambda: torch.arange(5),
    "arange_float": lambda: torch.arange(0.0, 1.0, 0.25),
    "tensor_list": lambda: torch.tensor([1.0, 2.0]),
    "tensor_0d": lambda: torch.tensor(0.5),
    "linspace": lambda: torch.linspace(0, 1, 5),
    "eye": lambda: torch.eye(3),
}


@pytest.mark.parametrize("name", list(DETERMINISTIC))
def test_deterministic_factories_are_replicate(checked, name):
    out = DETERMINISTIC[name]()
    assert spmd.has_local_type(out)
    assert ltype(out) == both("R")


def test_deterministic_factory_values(checked):
    out = torch.arange(4)
    with spmd.no_typecheck():
        assert out.tolist() == [0, 1, 2, 3]


def test_factory_result_usable_in_strict(checked, typed):
    out = torch.zeros(4, 4) + typed(V)
    assert ltype(out) == both("V")


@pytest.mark.parametrize("name,fn", [
    ("randn", lambda: torch.randn(3)),
    ("rand", lambda: torch.rand(3)),
    ("randint", lambda: torch.randint(0, 5, (3,))),
])
def test_random_factories_are_typed_empty(checked, name, fn):
    out = fn()
    assert spmd.has_local_type(out)
    assert spmd.get_local_type(out) == {}


def test_empty_stays_untyped_but_fails_like_typed_empty(checked, typed):
    # The reference types torch.empty as {}.  At the dispatcher, `empty` is served
    # by BackendSelect and no op of it reaches cspmd's key, so the result has
    # no type at all (a documented deviation, docs/differences.md).  It
    # behaves as {} where it matters: used with a typed operand under a mesh
    # in strict mode it is rejected.
    out = torch.empty(3)
    assert not spmd.has_local_type(out)
    assert spmd.get_local_type(out) == {}
    with pytest.raises(spmd.SpmdTypeError, match=r"args\[0\] missing axis mesh_dp"):
        out + typed({"dp": R, "tp": R}, 3)


@pytest.mark.parametrize("t", [R, I, V])
@pytest.mark.parametrize("fn", [
    torch.zeros_like, torch.ones_like, torch.empty_like, torch.randn_like,
    lambda x: torch.full_like(x, 3.0),
], ids=["zeros_like", "ones_like", "empty_like", "randn_like", "full_like"])
def test_like_factories_inherit(checked, typed, fn, t):
    assert ltype(fn(typed(t))) == both(t.name)


LIKE_OF_PARTIAL = {  # fill -> the result's letter where the input is P
    "zeros_like": (torch.zeros_like, "P"),  # zeros are every type: P stays usable
    "full_like_0": (lambda x: torch.full_like(x, 0.0), "P"),
    "ones_like": (torch.ones_like, "R"),  # a fresh constant, the same on every rank
    "full_like_3": (lambda x: torch.full_like(x, 3.0), "R"),
    "empty_like": (torch.empty_like, "P"),  # contents only ever overwritten
}


@pytest.mark.parametrize("name", list(LIKE_OF_PARTIAL))
def test_like_of_partial(checked, typed, name):
    """Valid code the reference refuses (docs/differences.md): a buffer
    shaped like a partial sum, e.g. an accumulator that P terms are then
    added into in place."""
    fn, letter = LIKE_OF_PARTIAL[name]
    out = fn(typed({"dp": R, "tp": P}))
    assert ltype(out) == {"mesh_dp": "R", "mesh_tp": letter}


def test_zeros_like_partial_accumulates_partial_terms(checked, typed):
    terms = [typed({"dp": R, "tp": P}) for _ in range(3)]
    acc = torch.zeros_like(terms[0])
    for t in terms:
        acc += t
    assert ltype(acc) == {"mesh_dp": "R", "mesh_tp": "P"}
    ones = torch.ones_like(terms[0])
    with pytest.raises(SpmdTypeError):  # ones are R: relu fine, but not summed with P
        ones + terms[0]
    assert ltype(torch.relu(ones)) == {"mesh_dp": "R", "mesh_tp": "R"}


def test_random_like_of_partial_still_rejected(checked, typed):
    with pytest.raises(SpmdTypeError, match="Partial type on axis mesh_dp cannot propagate"):
        torch.randn_like(typed(P))


@pytest.mark.parametrize("name", list(LIKE_OF_PARTIAL))
def test_like_of_partial_against_the_reference(mesh, name):
    """The reference refuses every *_like of a P tensor (a nonlinear op);
    on R, I and V inputs both agree (test_like_factories_inherit)."""
    import reference
    ref = reference.load()
    reference.load("spmd_types.checker")
    fn, _ = LIKE_OF_PARTIAL[name]
    with ref.set_current_mesh(mesh), ref.checker.typecheck():
        x = ref.assert_type(torch.randn(4, 4), {"dp": ref.R, "tp": ref.P})
        with pytest.raises(ref.SpmdTypeError, match="non-linear"):
            fn(x)
    for t in ("R", "I", "V"):
        outs = []
        for lib in (spmd, ref):
            with lib.set_current_mesh(mesh), lib.checker.typecheck():
                y = fn(lib.assert_type(torch.randn(4, 4), {"dp": lib.R, "tp": getattr(lib, t)}))
                outs.append({str(a): repr(v).split(".")[-1] for a, v in
                             lib.get_local_type(y).items()})
        assert outs[0] == outs[1], (t, outs)


@pytest.mark.parametrize("t", [R, I, V, P])
@pytest.mark.parametrize("fn", [
    lambda x: x.new_zeros(3), lambda x: x.new_ones(2, 2), lambda x: x.new_full((3,), 1.0),
], ids=["new_zeros", "new_ones", "new_full"])
def test_new_factories_ignore_receiver(checked, typed, fn, t):
    out = fn(typed(t))
    assert ltype(out) == both("R")


def test_like_in_permissive_partial_annotation(mesh, typed, tp_axis):
    with spmd.set_current_mesh(mesh), typecheck("permissive"):
        out = torch.zeros_like(typed({tp_axis: V}))
    assert ltype(out) == {"mesh_tp": "V"}


@pytest.mark.parametrize("name", ["zeros", "arange", "tensor_0d"])
def test_factories_without_mesh_are_empty(name):
    with typecheck():
        out = DETERMINISTIC[name]()
    assert spmd.has_local_type(out)
    assert spmd.get_local_type(out) == {}


def test_randn_without_mesh_is_empty():
    with typecheck():
        out = torch.randn(2)
    assert spmd.has_local_type(out) and spmd.get_local_type(out) == {}


def test_factory_under_dict_mesh(tp_axis):
    with spmd.set_current_mesh({"tp": spmd.MeshAxis.of(4, 1)}), typecheck():
        out = torch.ones(2)
    assert spmd.get_local_type(out) == {tp_axis: R}


def test_factories_outside_checking_untyped():
    assert not spmd.has_local_type(torch.zeros(3))
    assert not spmd.has_local_type(torch.randn(3))
