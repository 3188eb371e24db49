"""cspmd ships ``py.typed`` and annotates its public API: ``mypy --strict``
accepts a user's module written against it and rejects misuses.

mypy is installed by scripts/setup.sh; without it the test is skipped
(outside CI) or fails (in CI).  Its cache lives in the build folder, so only
the first run analyses torch (tens of seconds), later ones take seconds.
"""

import os
import re
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
USER = os.path.join(HERE, "typing_user")


def _mypy(filename):
    try:
        import mypy  # noqa: F401
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("mypy is not installed (scripts/setup.sh installs it)")
        pytest.skip("mypy is not installed (scripts/setup.sh installs it)")
    env = dict(os.environ, MYPYPATH=os.path.join(ROOT, "torch_plugin"))
    cache = os.path.join(ROOT, "build", "mypy-cache")
    # --follow-imports=silent: cspmd's and torch's own modules are analysed
    # for their types, errors are reported for the user's file only.
    cmd = [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent",
           "--cache-dir", cache, "--no-error-summary", filename]
    return subprocess.run(cmd, cwd=USER, env=env, capture_output=True, text=True, timeout=900)


def test_py_typed_shipped():
    assert os.path.isfile(os.path.join(ROOT, "torch_plugin", "cspmd", "py.typed"))
    with open(os.path.join(ROOT, "torch_plugin", "meson.build")) as f:
        assert "'cspmd/py.typed'" in f.read()


def test_mypy_strict_accepts_user_code():
    r = _mypy("user_code.py")
    assert r.returncode == 0, r.stdout + r.stderr


def test_mypy_strict_rejects_misuse():
    r = _mypy("misuse.py")
    with open(os.path.join(USER, "misuse.py")) as f:
        wrong = {i for i, line in enumerate(f, 1) if line.rstrip().endswith("# wrong")}
    reported = {int(m.group(1)) for m in re.finditer(r"^misuse\.py:(\d+): error", r.stdout, re.M)}
    assert wrong and reported == wrong, r.stdout + r.stderr
