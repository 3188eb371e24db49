"""Every ```python block of docs/*.md and docs/dev/*.md runs, each in a
fresh interpreter.

Snippets that cannot run here (they need torchrun, several processes or a
GPU) are fenced ```py instead: those are compiled, not run."""

import concurrent.futures
import glob
import os
import re
import subprocess
import sys

import pytest

import time_limits

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.M | re.S)
_SNIPPET = re.compile(r"^```py\n(.*?)^```", re.M | re.S)


def _doc_pages():
    return sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")) +
                  glob.glob(os.path.join(ROOT, "docs", "dev", "*.md")))


def _blocks():
    out = []
    for path in sorted(_doc_pages()):
        with open(path) as f:
            text = f.read()
        for i, m in enumerate(_BLOCK.finditer(text)):
            line = text.count("\n", 0, m.start()) + 1
            out.append(pytest.param(m.group(1), id=f"{os.path.basename(path)}:{line}"))
    return out


BLOCKS = _blocks()


def test_docs_have_blocks():
    assert len(BLOCKS) >= 10


def _python(code, seconds):
    return time_limits.run([sys.executable, "-c", code], seconds, text=True, cwd=ROOT,
                           env=dict(os.environ))


def _block_seconds():
    """Idle-machine seconds one block may take (time_limits.py: a loaded
    machine stretches them, a block that hangs still fails, naming itself):
    CSPMD_DOC_TIMEOUT if set, else 180 (the torch.compile blocks compile
    with inductor)."""
    return float(os.environ.get("CSPMD_DOC_TIMEOUT") or 180.0)


@pytest.fixture(scope="module")
def results():
    """Run every block once, several at a time (each one imports torch):
    {code: (returncode, output)}, returncode None for a block that ran
    past the timeout."""
    codes = [p.values[0] for p in BLOCKS]
    seconds = _block_seconds()

    def run(code):
        try:
            proc = _python(code, seconds)
        except subprocess.TimeoutExpired as e:
            out = "".join(x.decode(errors="replace") if isinstance(x, bytes) else x or ""
                          for x in (e.stdout, e.stderr))  # bytes even in text mode
            return None, (f"timed out after {seconds:.0f} idle-machine s (CSPMD_DOC_TIMEOUT "
                          f"sets it)\n{out}")
        return proc.returncode, proc.stdout + proc.stderr

    workers = max(2, min(8, os.cpu_count() or 2))
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        return dict(zip(codes, pool.map(run, codes)))


@pytest.mark.parametrize("code", BLOCKS)
def test_doc_block_runs(code, results):
    returncode, output = results[code]
    assert returncode == 0, output


def _snippets():
    out = []
    for path in sorted(_doc_pages()):
        with open(path) as f:
            text = f.read()
        for m in _SNIPPET.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            out.append(pytest.param(m.group(1), f"{os.path.basename(path)}:{line}",
                                    id=f"{os.path.basename(path)}:{line}"))
    return out


@pytest.mark.parametrize("code,where", _snippets())
def test_doc_snippet_compiles(code, where):
    compile(code, where, "exec")
