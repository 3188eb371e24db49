"""The code examples of spmd_types 0.3.1's docstrings and README run under
``import cspmd as spmd``: every example that runs under the reference runs
under cspmd too.

The examples are taken from the installed reference: each ``::`` block of a
docstring that parses as Python, and each python block of its README
(the package METADATA).  Many are fragments that name values they do not
define (``x``, ``y``, ``tp``, a process group ``pg``); each runs in a fresh
namespace given the same prelude under both libraries: a fake 8-rank
process group, a 2x4 cpu mesh (dp, tp) and typed tensors for those names.
An example that makes its own process group gets no prelude group.
Module names are the only text changed: ``spmd_types`` becomes ``cspmd``,
and a ``"cuda"`` device mesh is made on ``"cpu"`` (no GPU here) for both.
Each library runs all examples in one subprocess.
"""

import ast
import json
import os
import re
import subprocess
import sys
import textwrap

import reference

PRELUDE = """
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
import {lib} as spmd
import {lib}.checker
from {lib} import *
from {lib}.checker import typecheck, SpmdTypeMode
try:
    from {lib} import rules
except ImportError:  # (cspmd.rules is not written yet)
    pass
if not _EXAMPLE_MAKES_ITS_GROUP:
    dist.init_process_group(backend="fake", rank=0, world_size=8)
    mesh = init_device_mesh("cpu", (2, 4), mesh_dim_names=("dp", "tp"))
    dp, tp = mesh.get_group("dp"), mesh.get_group("tp")
    pg = ddp = tp
    x = assert_type(torch.randn(4, 4), {{dp: R, tp: R}})
    y = assert_type(torch.randn(4, 4), {{dp: R, tp: V}})
out, weight, bias = torch.randn(4, 4), torch.randn(4, 4), torch.randn(4)
q = k = v = torch.randn(2, 4)
attention = lambda q, k, v, *rest: q
rank, world_size, local_sum = 0, 8, 1.0
"""

RUNNER = r"""
import json, sys, traceback
examples = json.load(open(sys.argv[1]))
prelude = sys.argv[2]
results = []
for name, code in examples:
    import torch.distributed as dist
    ns = {"_EXAMPLE_MAKES_ITS_GROUP": "init_process_group" in code}
    try:
        exec(compile(prelude, "<prelude>", "exec"), ns)
        exec(compile(code, name, "exec"), ns)
        results.append([name, "ok"])
    except BaseException as e:  # noqa: BLE001 -- the outcome is reported
        results.append([name, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"])
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
print(json.dumps(results))
"""


def _blocks(doc):
    """The ``::`` literal blocks of a docstring."""
    lines, i = doc.split("\n"), 0
    while i < len(lines):
        if not lines[i].rstrip().endswith("::"):
            i += 1
            continue
        j = i + 1
        while j < len(lines) and not lines[j].strip():
            j += 1
        block = []
        while j < len(lines) and (not lines[j].strip() or lines[j].startswith(" ")):
            block.append(lines[j])
            j += 1
        code = textwrap.dedent("\n".join(block)).strip()
        if code:
            yield code
        i = j


def _parses(code):
    try:
        ast.parse(code)
        return True
    except SyntaxError:
        return False


def reference_examples():
    """[(name, code)] for every example of the installed reference."""
    root = os.path.join(reference.ref_dir(), "spmd_types")
    out = []
    for dirpath, _, files in os.walk(root):
        for f in sorted(files):
            if not f.endswith(".py") or f.startswith("_test"):
                continue
            path = os.path.join(dirpath, f)
            tree = ast.parse(open(path).read())
            nodes = [tree] + [n for n in ast.walk(tree)
                              if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
            for node in nodes:
                doc = ast.get_docstring(node, clean=True)
                for k, code in enumerate(_blocks(doc or "")):
                    if _parses(code):
                        rel = os.path.relpath(path, root)
                        out.append((f"{rel}:{getattr(node, 'name', '<module>')}#{k}", code))
    meta = [os.path.join(reference.ref_dir(), d, "METADATA")
            for d in os.listdir(reference.ref_dir()) if d.startswith("spmd_types-")]
    for path in meta:
        text = open(path).read()
        for k, code in enumerate(re.findall(r"```python\n(.*?)```", text, re.S)):
            out.append((f"README#{k}", code))
    return out


def _for(lib, code):
    code = re.sub(r"\bspmd_types\b", lib, code)
    return code.replace('init_device_mesh("cuda"', 'init_device_mesh("cpu"')


def _run_all(lib, examples, tmp_path):
    path = tmp_path / f"examples_{lib}.json"
    path.write_text(json.dumps([(n, _for(lib, c)) for n, c in examples]))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [reference.ref_dir(), env.get("PYTHONPATH", "")])
    env["SPMD_TYPES_TRACEBACK_FILTERING"] = "off"
    res = subprocess.run([sys.executable, "-c", RUNNER, str(path), PRELUDE.format(lib=lib)],
                         capture_output=True, text=True, env=env, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    return dict(json.loads(res.stdout.strip().splitlines()[-1]))


def test_reference_examples_run_under_cspmd(tmp_path):
    reference.load()
    examples = reference_examples()
    assert len(examples) >= 10, [n for n, _ in examples]
    theirs = _run_all("spmd_types", examples, tmp_path)
    mine = _run_all("cspmd", examples, tmp_path)
    ran = [n for n, r in theirs.items() if r == "ok"]
    failing = {n: mine[n] for n in ran if mine[n] != "ok"}
    print(f"\n{len(examples)} examples; {len(ran)} run under the reference; "
          f"{sum(r == 'ok' for r in mine.values())} under cspmd")
    assert not failing, failing
    assert len(ran) >= 10, theirs
