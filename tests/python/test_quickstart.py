"""examples/quickstart.py (the README's first command runs it) shows the
checker working: the inferred types of a short program, then a caught
SpmdTypeError naming the op, the types and the user's line."""

import os
import re
import sys

import cspmd
import time_limits

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "examples", "quickstart.py")


def test_quickstart_shows_types_and_a_caught_error():
    proc = time_limits.run([sys.executable, SCRIPT], 120, text=True, cwd=ROOT,
                           env=dict(os.environ))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert out.startswith(f"cspmd {cspmd.__version__}, torch ")
    types = re.findall(r"^  (\S.*?)\s+# (\{.*\})$", out, re.M)
    assert types == [
        ("spmd.assert_type(x, {dp: R, tp: P})", "{mesh_dp: R, mesh_tp: P}"),
        ("y = spmd.all_reduce(x, tp, src=P, dst=R)", "{mesh_dp: R, mesh_tp: R}"),
        ("z = torch.mul(y, y)", "{mesh_dp: R, mesh_tp: R}"),
        ("w = x * 2", "{mesh_dp: R, mesh_tp: P}"),
    ]
    with open(SCRIPT) as f:
        relu_line = [i for i, l in enumerate(f, 1) if l.strip() == "torch.relu(x)"][0]
    err = out[out.index("SpmdTypeError: "):]
    assert err.startswith("SpmdTypeError: Partial type on axis mesh_tp cannot propagate "
                          "through non-linear ops")
    assert "In aten::relu(" in err and f"at {SCRIPT}:{relu_line}" in err
    assert out.rstrip().endswith("quickstart: ok")
