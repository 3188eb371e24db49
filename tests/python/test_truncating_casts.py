"""Casts that truncate refuse Partial: the truncation of a partial sum is not
the partial sum of the truncations (rank values 0.6 and 0.6 sum to 1.2,
whose int is 1; their ints sum to 0).  Floating values cast to an integer
dtype, and anything but bool cast to bool, through ``.to``, ``.long()``,
``.bool()``, ``type_as`` and ``copy_`` into such a buffer.  Other casts stay
linear (a P tensor cast to bf16 or float64 stays P), and every cast of a
tensor that is not Partial keeps its type.  The reference refuses every cast
of a Partial tensor (it treats ``Tensor.to`` as non-linear), so it refuses
these too.
"""

import pytest
import torch

import cspmd as spmd
from cspmd import P, R, V
from conftest import ltype

CASTS = {
    "long()": lambda t: t.long(),
    "int()": lambda t: t.int(),
    "bool()": lambda t: t.bool(),
    "to(int64)": lambda t: t.to(torch.int64),
    "to(dtype=int16, copy=True)": lambda t: t.to(dtype=torch.int16, copy=True),
    "to(uint8)": lambda t: t.to(torch.uint8),
}
INTO_ANOTHER_TENSORS_DTYPE = {
    "type_as(long)": lambda t: t.type_as(torch.zeros(1, dtype=torch.long)),
    "long buffer.copy_": lambda t: torch.zeros(t.shape, dtype=torch.long).copy_(t),
}
TRUNCATING = {**CASTS, **INTO_ANOTHER_TENSORS_DTYPE}


@pytest.mark.parametrize("cast", TRUNCATING.values(), ids=TRUNCATING.keys())
def test_a_truncating_cast_of_a_partial_is_refused(cast, tp):
    p = spmd.assert_type(torch.full((4,), 0.6), {tp: P})
    with spmd.checker.typecheck():
        with pytest.raises(spmd.SpmdTypeError) as e:
            cast(p)
    msg = str(e.value)
    assert msg.startswith("Partial type on axis mesh_tp cannot be cast to an integer or bool "
                          "dtype (the truncation of a partial sum != the partial sum of "
                          "truncations)")
    assert "f32[4] {mesh_tp: P}" in msg


@pytest.mark.parametrize("lt", [R, V])
@pytest.mark.parametrize("cast", TRUNCATING.values(), ids=TRUNCATING.keys())
def test_a_truncating_cast_keeps_any_other_type(cast, lt, tp):
    x = spmd.assert_type(torch.full((4,), 0.6), {tp: lt})
    with spmd.checker.typecheck():
        out = cast(x)
    assert ltype(out) == {"mesh_tp": "R" if lt is R else "V"}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float64])
def test_a_floating_cast_of_a_partial_stays_partial(dtype, tp):
    p = spmd.assert_type(torch.full((4,), 0.6), {tp: P})
    with spmd.checker.typecheck():
        out = p.to(dtype)
    assert ltype(out) == {"mesh_tp": "P"}


def test_integer_partials_cast_between_integer_dtypes(tp):
    # A sum of integers is exact in any integer dtype wide enough; bool is not.
    p = spmd.assert_type(torch.arange(4), {tp: P})
    with spmd.checker.typecheck():
        assert ltype(p.to(torch.int32)) == {"mesh_tp": "P"}
        with pytest.raises(spmd.SpmdTypeError, match="cannot be cast to an integer or bool"):
            p.bool()


def test_reduce_then_cast(tp):
    """The fix the message names: reduce first."""
    p = spmd.assert_type(torch.full((4,), 0.6), {tp: P})
    with spmd.checker.typecheck():
        counts = spmd.all_reduce(p, tp, src=P, dst=R).long()
    assert ltype(counts) == {"mesh_tp": "R"}


def test_the_reference_refuses_the_same_casts(tp):
    import reference
    ref = reference.load()
    reference.load("spmd_types.checker")
    for lib in (spmd, ref):
        p = lib.assert_type(torch.full((4,), 0.6), {tp: lib.P})
        with lib.checker.typecheck():
            # (INTO_ANOTHER_TENSORS_DTYPE: it refuses the untyped second tensor first)
            for cast in CASTS.values():
                with pytest.raises(lib.SpmdTypeError, match="Partial"):
                    cast(p)
