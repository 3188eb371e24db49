"""Not spmd_types: cspmd standing in for it in processes that ``python -m
cspmd.run`` starts, and in their children (spawned workers, torchrun's
ranks), which find this folder through PYTHONPATH.  It hands the name to
cspmd.run's alias, so ``spmd_types`` and its submodules are cspmd's."""

import sys

import cspmd.run

cspmd.run.install()
sys.modules[__name__] = sys.modules["cspmd"]
