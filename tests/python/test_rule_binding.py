"""Op rules name their arguments by schema name; the kernel binds a row to
an operator's schema at the operator's first call.  An overload the row's
names do not fit (a defect of cspmd's table) raises a clear error at every
call of that op and is never checked with wrong positions."""

import pytest
import torch

import cspmd as spmd
import cspmd.checker
from cspmd._lib import ops

@pytest.fixture
def misspelt_gather():
    """An overload of aten::gather whose index argument is spelt 'idx':
    gather's row ("*": every overload) names 'index', so binding fails.
    Registered for this test only (the table test binds every overload)."""
    lib = torch.library.Library("aten", "FRAGMENT")
    try:
        lib.define("gather.cspmd_test_misspelt(Tensor self, Tensor idx, int dim) -> Tensor")
        lib.impl("gather.cspmd_test_misspelt", lambda self, idx, dim: self.clone(),
                 "CompositeExplicitAutograd")
        yield torch.ops.aten.gather.cspmd_test_misspelt
    finally:
        lib._destroy()


def _typed(x):
    return spmd.assert_type(x, {"tp": spmd.R, "dp": spmd.R})


def test_a_table_defect_raises_at_every_call(mesh, misspelt_gather):
    op = misspelt_gather
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck():
        x, idx = _typed(torch.ones(4)), _typed(torch.zeros(4, dtype=torch.long))
        for _ in range(2):  # not cached as if it had bound
            with pytest.raises(RuntimeError, match=r"aten::gather.cspmd_test_misspelt: "
                               r"cspmd's rule table is wrong for this op: its row "
                               r"aten::gather.\* names 'index' as a coefficient, which this "
                               r"overload does not have \(the overload's arguments: "
                               r"self, idx, dim\)"):
                op(x, idx, 0)
        # the row's other overloads still bind and check
        y = torch.gather(x, 0, idx)
    assert spmd.get_local_type(y) == spmd.get_local_type(x)


def test_ops_bind_at_their_first_call(mesh):
    row = ops.rule_find("aten::index_select", "")
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck():
        x = _typed(torch.ones(4))
        torch.index_select(x, 0, _typed(torch.zeros(2, dtype=torch.long)))
    assert ops.rule_info(row)[12]  # bound
    assert ops.rule_info(row)[5] == 1 << 2  # 'index' is argument 2


def test_rule_bind_rejects_bad_input():
    gather = ops.rule_find("aten::gather", "")
    with pytest.raises(ValueError, match="differ in length"):
        ops.rule_bind(gather, "aten::gather", ["self", "dim"], [True])
    with pytest.raises(RuntimeError, match="unknown rule"):
        ops.rule_bind(ops.rule_count() + 5, "x", [], [])


def test_the_test_overload_is_gone():
    names = torch._C._dispatch_get_all_op_names()
    assert "aten::gather.cspmd_test_misspelt" not in names
