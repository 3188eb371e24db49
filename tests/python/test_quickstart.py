"""examples/quickstart.py runs as a script."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_quickstart_runs():
    script = os.path.join(ROOT, "examples", "quickstart.py")
    proc = subprocess.run([sys.executable, script], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, env=dict(os.environ))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "quickstart: ok" in proc.stdout
