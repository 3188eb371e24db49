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


def _run(code):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, env=dict(os.environ))


@pytest.fixture(scope="module")
def results():
    """Run every block once, several at a time (each one imports torch)."""
    codes = [p.values[0] for p in BLOCKS]
    workers = max(2, min(8, os.cpu_count() or 2))
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        return dict(zip(codes, pool.map(_run, codes)))


@pytest.mark.parametrize("code", BLOCKS)
def test_doc_block_runs(code, results):
    proc = results[code]
    assert proc.returncode == 0, proc.stdout + proc.stderr


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
