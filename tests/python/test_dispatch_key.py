"""The checker's dispatch key: the one docs/dev/architecture.md names for this
torch minor, and refused at import when torch or another library already
has a kernel on it (ops would then not reach the checker)."""

import os
import re
import subprocess
import sys
import textwrap

import pytest
import torch

import cspmd as spmd

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MINOR = ".".join(torch.__version__.split(".")[:2])


def _documented_keys():
    """{minor: key} from architecture.md's table of keys per torch minor."""
    with open(os.path.join(ROOT, "docs", "dev", "architecture.md")) as f:
        text = f.read()
    rows = re.findall(r"^\| (2\.\d+) \| `(\w+)` \|", text, re.M)
    assert rows, "architecture.md has no table of keys per torch minor"
    return dict(rows)


def test_key_is_the_documented_one_for_this_torch():
    assert _documented_keys()[MINOR] == spmd._lib.ops.checker_key()


def test_every_supported_minor_has_a_documented_key():
    assert sorted(_documented_keys(), key=lambda v: int(v.split(".")[1])) == [
        f"2.{m}" for m in range(10, 16)]


def _import_after(setup):
    """`import cspmd` in a fresh interpreter after `setup` ran there."""
    code = textwrap.dedent(f"""
        import torch
        key = {spmd._lib.ops.checker_key()!r}
        {setup}
        try:
            import cspmd
        except ImportError as e:
            print("ImportError:", e)
        else:
            print("imported")
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_import_refuses_a_key_that_already_has_a_fallback():
    out = _import_after("lib = torch.library.Library('_', 'IMPL')\n"
                        "        lib.fallback(torch.library.fallthrough_kernel, dispatch_key=key)")
    key = spmd._lib.ops.checker_key()
    assert out.startswith("ImportError: cspmd cannot check ops on torch " + MINOR), out
    assert f"dispatch key, {key}, already has a fallback kernel" in out


def test_import_refuses_a_key_where_an_op_has_its_own_kernel():
    out = _import_after("lib = torch.library.Library('aten', 'IMPL')\n"
                        "        lib.impl('add.Tensor', lambda *a: None, key)")
    assert "already has a kernel for aten::add.Tensor registered by torch or another" in out, out


def test_import_succeeds_on_a_free_key():
    assert _import_after("pass").strip() == "imported"
