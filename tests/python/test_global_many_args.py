"""Global mode reads every schema argument of an op, however many: an op
with more than the 16 the kernel keeps on its stack gets a heap array
(none is left out of the shard rule's view or the memo key)."""

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
