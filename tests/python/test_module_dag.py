"""The Python front's modules form a DAG: each module imports only modules
of lower layers (at the top of the file and inside functions alike), and
each one loads alone -- without the package's __init__ -- pulling in
nothing above it."""

import ast
import json
import os
import subprocess
import sys

import cspmd

PKG = os.path.dirname(cspmd.__file__)

# Lowest first.  A module may import only modules of an earlier layer;
# __init__ (the public namespace) sits on top and may import any.
LAYERS = [
    ["_errors", "_frames", "_lib", "_local_tensor", "_coverage", "_settings"],
    ["_codes", "_traceback", "trace", "_graph_check", "_open_regions", "_handlers"],
    ["mesh", "_ndim_type", "_hook_backward"],
    ["types", "testing"],
    ["_type_ids", "checker", "collectives", "_compile_markers"],
    ["scalar", "carry", "compiled_grads", "_dtensor_prop", "spec_redistribute"],
    ["runtime"],
    ["rules"],
    ["registration", "regions", "module", "reinterpret_mesh", "compiled"],
    ["dtensor", "pytest_plugin", "rulecheck"],
    ["__init__", "run"],  # run: the launcher, which imports the package by name
]
LAYER = {m: i for i, layer in enumerate(LAYERS) for m in layer}


def _modules():
    return sorted(f[:-3] for f in os.listdir(PKG) if f.endswith(".py"))


def _imports(name):
    """The package modules `name` imports (relative imports anywhere in it)."""
    with open(os.path.join(PKG, name + ".py")) as f:
        tree = ast.parse(f.read())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                out.add(node.module.split(".")[0])
            else:
                out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("cspmd."):
            out.add(node.module.split(".")[1])
    return out


def test_every_module_has_a_layer():
    assert sorted(LAYER) == _modules()


def test_imports_only_go_down():
    upward = [f"{m} imports {d}" for m in _modules() for d in sorted(_imports(m))
              if d in LAYER and LAYER[d] >= LAYER[m]]
    assert upward == []


_ALONE = r"""
import importlib.util, json, os, sys
pkg = sys.argv[1]
out = {}
for name in json.loads(sys.argv[2]):
    for k in [k for k in sys.modules if k == "cspmd" or k.startswith("cspmd.")]:
        if k not in ("cspmd._lib", "cspmd._C"):  # the library loads once per process
            del sys.modules[k]
    # The package without running its __init__: only `name` and what it imports load.
    spec = importlib.util.spec_from_file_location(
        "cspmd", os.path.join(pkg, "__init__.py"), submodule_search_locations=[pkg])
    sys.modules["cspmd"] = importlib.util.module_from_spec(spec)
    importlib.import_module("cspmd." + name)
    # (_lib, loaded once, is in the lowest layer: it is never above.)
    out[name] = sorted(k[6:] for k in sys.modules
                       if k.startswith("cspmd.") and k not in ("cspmd._lib", "cspmd._C"))
print(json.dumps(out))
"""


def test_each_module_imports_alone():
    names = [m for m in _modules() if m != "__init__"]
    # _lib first: the others reuse the library it loaded.
    names.sort(key=lambda m: m != "_lib")
    res = subprocess.run([sys.executable, "-c", _ALONE, PKG, json.dumps(names)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    loaded = json.loads(res.stdout.strip().splitlines()[-1])
    above = {m: [d for d in deps if d != m and LAYER[d] >= LAYER[m]]
             for m, deps in loaded.items()}
    assert above == {m: [] for m in names}
