"""Run a program written for ``spmd_types`` with cspmd, unchanged.

    python -m cspmd.run train.py --steps 10
    python -m cspmd.run -m pytest tests/unit_tests/test_loss.py
    torchrun --nproc-per-node 2 -m cspmd.run train.py

``import spmd_types`` (and ``spmd_types.checker``, ``.runtime``, ``.types``,
``.rules``, ``.rulecheck``, and the private ``_checker`` and ``_mesh_axis``
that torchtitan and torch's FSDP import from) then gives cspmd's modules;
nothing named ``spmd_types`` is installed or read.  ``install()`` does the same from
Python (a conftest.py, say).  Processes the program starts get the alias
too (see STAND_IN_DIR).
"""

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import runpy
import sys

ALIAS = "spmd_types"

# spmd_types' private modules that its clients import, and cspmd's module
# for each: torchtitan takes typecheck from _checker; torch 2.15's FSDP
# (when it finds spmd_types) flatten_axes from _mesh_axis, and its local_map
# typecheck from _checker.  Any other private one is an error that says so.
_PRIVATE = {"_checker": "checker", "_mesh_axis": "mesh"}


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, target):
        self.target = target

    def create_module(self, spec):
        module = importlib.import_module(self.target)
        self.own_spec = module.__spec__
        return module

    def exec_module(self, module):
        # cspmd's module, already run; the import system has just set its
        # __spec__ to the alias's: give it back its own.
        module.__spec__ = self.own_spec


class _AliasFinder(importlib.abc.MetaPathFinder):
    """Finds ``spmd_types[.sub]`` as ``cspmd[.sub]``."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != ALIAS and not fullname.startswith(ALIAS + "."):
            return None
        parts = fullname.split(".")[1:]
        if parts and parts[0].startswith("_"):
            if parts[0] not in _PRIVATE or len(parts) > 1:
                raise ModuleNotFoundError(
                    f"{fullname} is private to spmd_types and cspmd has no counterpart; "
                    f"import the public API (spmd_types, spmd_types.checker, .runtime, "
                    f".types, .rules) instead", name=fullname)
            parts = [_PRIVATE[parts[0]]]
        target_name = ".".join(["cspmd"] + parts)
        if importlib.util.find_spec(target_name) is None:
            raise ModuleNotFoundError(
                f"{fullname}: cspmd has no module {target_name} to stand for it",
                name=fullname)
        return importlib.machinery.ModuleSpec(fullname, _AliasLoader(target_name))


def _real_spmd_types_imported():
    """(name, file) of an imported spmd_types module that is not cspmd's."""
    names = sorted(n for n in sys.modules if n == ALIAS or n.startswith(ALIAS + "."))
    for name in names:  # the package itself first
        module = sys.modules[name]
        where = getattr(module, "__file__", None) or ""
        if module is None or getattr(module, "__name__", "").startswith("cspmd") or \
                where.startswith(STAND_IN_DIR + os.sep):
            continue  # cspmd, or its stand-in being imported
        return name, where or None
    return None


# Children (multiprocessing's spawned workers, torchrun's ranks) start new
# interpreters: they find a stand-in package named spmd_types in this folder
# through PYTHONPATH, which installs the alias there too.
STAND_IN_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_alias")


# torch's modules that bind spmd_types' names at import when torch finds it.
_TORCH_SPMD_CLIENTS = ("torch.distributed.fsdp._fully_shard._fsdp_param",)


def _forget_torch_lookup():
    """torch.distributed looks for spmd_types once and keeps the answer
    (torch 2.15's FSDP, at import, types its parameters by it).  A "no"
    from before the alias existed is dropped; a module that already acted
    on it cannot be made to see cspmd, so that is an error."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or getattr(dist, "_spmd_types_available", None) is not False:
        return
    acted = [name for name in _TORCH_SPMD_CLIENTS if name in sys.modules]
    if acted:
        raise RuntimeError(
            f"cspmd.run: {acted[0]} was imported before cspmd.run.install() and found "
            f"no spmd_types; it would treat cspmd-typed parameters as untyped. Call "
            f"install() before importing it (or torch._dynamo, which imports it), or "
            f"start the program with `python -m cspmd.run`.")
    dist._spmd_types_available = None


def install():
    """Make ``import spmd_types`` give cspmd, from now on, in this process
    and in the processes it starts.

    Raises RuntimeError if the real spmd_types is already imported: the two
    would then type the same program, each blind to the other's types."""
    real = _real_spmd_types_imported()
    if real is not None:
        name, where = real
        raise RuntimeError(
            f"cspmd.run: the real {name} is already imported (from {where}); cspmd cannot "
            f"stand in for it in this process. Start the program through "
            f"`python -m cspmd.run` (or call cspmd.run.install()) before anything "
            f"imports spmd_types.")
    if not any(type(f).__name__ == "_AliasFinder" for f in sys.meta_path):
        sys.meta_path.insert(0, _AliasFinder())
    _forget_torch_lookup()
    # multiprocessing's spawn hands its children this process's sys.path;
    # a new interpreter reads PYTHONPATH. After sys.path[0] (the program's
    # folder), before site-packages.
    if STAND_IN_DIR not in sys.path:
        sys.path.insert(min(1, len(sys.path)), STAND_IN_DIR)
    path = os.environ.get("PYTHONPATH", "")
    if STAND_IN_DIR not in path.split(os.pathsep):
        os.environ["PYTHONPATH"] = STAND_IN_DIR + (os.pathsep + path if path else "")


def _usage():
    return ("usage: python -m cspmd.run [-m module | script.py] [args ...]\n"
            "Runs the program with `import spmd_types` served by cspmd.")


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage(), file=sys.stderr if not argv else sys.stdout)
        return 2 if not argv else 0
    if argv[0] != "-m" and os.path.exists(argv[0]):
        # As `python script.py`: the script's folder first, not ours.
        sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
    install()
    if argv[0] == "-m":
        if len(argv) < 2:
            print(_usage(), file=sys.stderr)
            return 2
        sys.argv = [argv[1]] + argv[2:]  # sys.path[0] is the current directory, as for -m
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        script = argv[0]
        if not os.path.exists(script):
            print(f"cspmd.run: no such file: {script}", file=sys.stderr)
            return 2
        sys.argv = argv
        runpy.run_path(script, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
