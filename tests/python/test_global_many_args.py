"""Global mode and ops of many arguments or results.  Every schema
argument is read, however many (more than the 16 the kernel keeps on its
stack get a heap array: none is left out of the shard rule's view or the
memo key).  Shard rules place at most 4 results (CSPMD_MAX_RESULTS): an op
with more types every result like its local type when no operand is
sharded, and is refused when one is -- never typed by a guess."""

import pytest
import torch

import cspmd as spmd
from cspmd import R, S

NARGS = 40
_lib = torch.library.Library("cspmd_test_many", "DEF")
_lib.define("many(Tensor x, " + ", ".join(f"int a{i}" for i in range(NARGS)) + ") -> Tensor")


def _many(x, *ints):
    return x + sum(ints)


_lib.impl("many", _many, "CompositeExplicitAutograd")
_lib.define("six(Tensor x) -> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)")
_lib.impl("six", lambda x: tuple(x * i for i in range(6)), "CompositeExplicitAutograd")


def test_an_op_with_40_arguments_in_global_mode(mesh, dp, tp):
    ints = list(range(NARGS))
    a, b = torch.ones(4, 2), torch.ones(4, 2)
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck(local=False):
        r = spmd.assert_type(a, {dp: R, tp: R})
        y = torch.ops.cspmd_test_many.many(r, *ints)
        assert torch.equal(y, torch.ones(4, 2) + sum(ints))
        assert spmd.get_local_type(y) == spmd.get_local_type(r)
        s = spmd.assert_type(b, {dp: S(0), tp: R})
        for _ in range(2):   # the second call would hit the memo if the first were kept
            with pytest.raises(spmd.SpmdTypeError, match="cspmd_test_many::many"):
                torch.ops.cspmd_test_many.many(s, *ints)


def test_an_op_with_six_results_in_global_mode(mesh, dp, tp):
    a, b = torch.ones(4, 2), torch.ones(4, 2)
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck(local=False):
        r = spmd.assert_type(a, {dp: R, tp: R})
        outs = torch.ops.cspmd_test_many.six(r)
        assert len(outs) == 6
        for y in outs:
            assert spmd.get_local_type(y) == spmd.get_local_type(r)
        s = spmd.assert_type(b, {dp: S(0), tp: R})
        with pytest.raises(spmd.SpmdTypeError, match="cspmd_test_many::six"):
            torch.ops.cspmd_test_many.six(s)
