"""Differential test in global mode (``typecheck(local=False)``) against the
reference, spmd_types 0.3.1: seeded random programs
(``differential.generate_global``: specs on one or two axes, pointwise,
matmul, reduction and view ops, collectives on global axes, a backward)
run under both, compared step by step as in test_differential.py (error
class, or result types per axis with the partition spec, and the operands'
types after the step).  A disagreement must be one that
docs/differences.md explains under a ``<!-- differential-global: NAME -->``
marker; an unexplained one fails with the seed and the program.

A fast slice (120 programs) runs by default.  The long run:

    CSPMD_DIFF_GLOBAL_PROGRAMS=3000 python -m pytest -q -s tests/python/test_differential_global.py

CSPMD_DIFF_GLOBAL_SEED picks the first seed (default 0).
"""

import os

import torch

import cspmd as spmd
import differential
from cspmd import I, P, S
from differential_driver import GLOBAL, check_markers, check_slice

PROGRAMS = int(os.environ.get("CSPMD_DIFF_GLOBAL_PROGRAMS", "120"))
FIRST_SEED = int(os.environ.get("CSPMD_DIFF_GLOBAL_SEED", "0"))


def test_every_global_explanation_is_documented_and_every_marker_used():
    check_markers(GLOBAL)


def test_random_global_programs_agree_with_the_reference(mesh):
    check_slice(mesh, GLOBAL, PROGRAMS, FIRST_SEED)


def test_global_generation_is_a_function_of_the_seed():
    a, b = differential.generate_global(7), differential.generate_global(7)
    assert a == b and a != differential.generate_global(8)
    assert a != differential.generate(7)


def test_index_select_backward_over_an_unindexed_shard(mesh, dp, tp):
    """Found by the global programs: index_select's backward adds the
    gradient's rows into zeros with index_add_, which had no shard rule
    (and DTensor no strategy), so the backward of an index_select over a
    tensor sharded on another dim was refused."""
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck(local=False):
        x = spmd.assert_type(torch.randn(4, 4, requires_grad=True), {dp: I, tp: S(1)})
        y = torch.index_select(x, 0, torch.tensor([1, 0, 3, 2]))
        loss = spmd.all_reduce((y * y).sum(), tp, src=P, dst=I)  # a sharded gradient
        loss.backward()
        assert spmd.get_partition_spec(x.grad) == spmd.get_partition_spec(x)
