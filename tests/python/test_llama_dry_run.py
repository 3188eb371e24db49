"""examples/llama_dry_run.py: an 8B-shaped Llama step (2 of its 32 layers
here) on meta tensors under typecheck(), on the session's 2x4 mesh: passes
when correct, and each planted bug is caught at its line."""

import os
import sys

import pytest

import cspmd as spmd
import cspmd.checker

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples")
sys.path.insert(0, EXAMPLES)
import llama_dry_run  # noqa: E402

SOURCE = os.path.join(EXAMPLES, "llama_dry_run.py")


def _line_of(text):
    with open(SOURCE) as f:
        (n,) = [i + 1 for i, line in enumerate(f) if text in line]
    return n


def _run(mesh, dp, tp, bug):
    with spmd.set_current_mesh(mesh), spmd.checker.typecheck():
        return llama_dry_run.dry_run(dp, tp, bug=bug, layers=2, seq=256)


def test_correct_step_passes(mesh, dp, tp):
    loss = _run(mesh, dp, tp, bug=0)
    assert loss.device.type == "meta"
    assert spmd.get_axis_local_type(loss, dp) is spmd.P


@pytest.mark.parametrize("bug, site, words", [
    (1, "opt.step()", "mesh_dp"),
    (2, "# bug 2", "mesh_tp"),
    (3, "opt.step()", "mesh_tp"),
])
def test_planted_bug_is_caught_at_its_line(mesh, dp, tp, bug, site, words):
    with pytest.raises(spmd.SpmdTypeError) as e:
        _run(mesh, dp, tp, bug=bug)
    msg = str(e.value)
    assert f"llama_dry_run.py:{_line_of(site)}" in msg and words in msg
