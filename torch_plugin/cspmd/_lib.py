"""Loads libcspmd (the C core, kernel and shim) into torch's op registry."""

import os

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
        f"cspmd: {_NAME} not found beside {here}; build and install cspmd "
        "(pip install --no-build-isolation .) or set CSPMD_LIBRARY to the built library")


torch.ops.load_library(_find_library())
ops = torch.ops.cspmd
