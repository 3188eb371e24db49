"""Loads libcspmd (the C core, kernel and shim).

Loading it registers the checking kernels on the dispatch key and the
``cspmd::collective`` operator with torch; the same library is also the
extension module ``cspmd._C``, the control functions (axes, types, the mesh
stack, checker state) that the front calls directly -- not as dispatcher
ops, so that bookkeeping never shows up in a user's dispatch mode or in a
profiler trace.
"""

import importlib.machinery
import importlib.util
import json
import os
import sys

import torch

_NAME = "libcspmd.so"


def _find_library():
    env = os.environ.get("CSPMD_LIBRARY")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(here, _NAME)
    if os.path.exists(path):
        return path
    raise ImportError(
        f"cspmd: {_NAME} not found beside {here}; install cspmd (pip install .) "
        "or set CSPMD_LIBRARY to a built library")


def _minor(version):
    """'2.11.0+cpu' -> (2, 11)."""
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def _build_info(path):
    """cspmd_build_info.json beside the library: what it was built against.
    A torch of another minor has another C++ ABI: say so, naming both,
    before loading the library would fail with an undefined symbol."""
    info_path = os.path.join(os.path.dirname(path), "cspmd_build_info.json")
    try:
        with open(info_path) as f:
            info = json.load(f)
    except (OSError, ValueError) as e:
        raise ImportError(f"cspmd: cannot read {info_path} ({e}); rebuild cspmd") from None
    if _minor(info["torch"]) != _minor(torch.__version__):
        major, minor = _minor(info["torch"])
        raise ImportError(
            f"cspmd {info['version']} was built against torch {info['torch']}, but torch "
            f"{torch.__version__} is installed (a compiled extension needs the torch minor it "
            f"was built with): install torch=={major}.{minor}.* or rebuild cspmd against this "
            "torch (pip install --force-reinstall --no-deps <cspmd source>)")
    return info


def _load_extension(path):
    """The library's `cspmd._C` module (dlopen returns the handle torch loaded)."""
    loader = importlib.machinery.ExtensionFileLoader("cspmd._C", path)
    spec = importlib.util.spec_from_file_location("cspmd._C", path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules["cspmd._C"] = module
    return module


_path = _find_library()
build_info = _build_info(_path)
torch.ops.load_library(_path)
# The control functions (cspmd._C): ops.get_type(t), ops.type_make(...), ...
ops = _load_extension(_path)
# The differentiable collective, a real operator (collectives are user-visible).
collective = torch.ops.cspmd.collective
