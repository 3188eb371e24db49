"""The reference implementation, spmd_types 0.3.1, for tests only.

scripts/setup.sh installs it with ``pip install --no-deps --target`` into a
folder of its own (``$CSPMD_REF_DIR``, default
``~/.cache/cspmd/spmd_types-ref``); it is never a dependency of cspmd.  Tests
that compare against it call :func:`load`, which puts that folder on
``sys.path`` and imports it, or skips the test when it is not installed
outside CI (in CI, a missing reference is a failure).
"""

import importlib
import os
import sys

import pytest

VERSION = "0.3.1"


def ref_dir():
    return os.environ.get("CSPMD_REF_DIR") or os.path.expanduser(
        "~/.cache/cspmd/spmd_types-ref")


def load(module="spmd_types"):
    """Import ``module`` from the installed reference (skip if absent)."""
    path = ref_dir()
    if not os.path.isdir(os.path.join(path, "spmd_types")):
        if os.environ.get("CI"):
            pytest.fail(f"the reference spmd_types is not installed in {path}")
        pytest.skip(f"the reference spmd_types is not installed in {path}")
    if path not in sys.path:
        sys.path.append(path)
    mod = importlib.import_module(module)
    import spmd_types

    version = getattr(spmd_types, "__version__", None)
    assert version in (None, VERSION), f"reference is {version}, want {VERSION}"
    return mod
