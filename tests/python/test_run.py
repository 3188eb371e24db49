"""python -m cspmd.run: programs that import spmd_types run on cspmd, unchanged.

Each case runs in a fresh interpreter: this test process has the real
spmd_types (the reference) imported for the comparison tests.
"""

import os
import subprocess
import sys
import textwrap

import pytest

import reference

# A program as a torchtitan user writes it: spmd_types by name, its public
# submodules and the private _checker torchtitan takes typecheck from.
PROGRAM = textwrap.dedent("""
    import sys
    import torch
    import torch.distributed as dist
    import spmd_types as spmd
    import spmd_types.runtime
    from spmd_types.checker import typecheck
    from spmd_types._checker import typecheck as private_typecheck
    from spmd_types._mesh_axis import flatten_axes  # torch 2.15's FSDP imports it
    from spmd_types.types import R, P
    from spmd_types.runtime import get_local_type

    import cspmd
    assert spmd is cspmd and private_typecheck is typecheck
    assert spmd.runtime is cspmd.runtime and flatten_axes is cspmd.flatten_axes
    assert cspmd.__spec__.name == "cspmd" and cspmd.checker.__spec__.name == "cspmd.checker"
    dist.init_process_group(backend="fake", rank=0, world_size=2)
    pg = dist.new_group([0, 1])
    with typecheck():
        x = spmd.assert_type(torch.ones(2), {pg: P})
        try:
            torch.relu(x)
        except spmd.SpmdTypeError as e:
            print("caught:", str(e).splitlines()[0])
        y = spmd.all_reduce(x, pg, src=P, dst=R)
        print("args:", sys.argv[1:], "type:", get_local_type(y))
""")


def run_plain(tmp_path, name, text):
    """A script run with plain ``python`` (no cspmd.run); stdout returned."""
    script = tmp_path / name
    script.write_text(textwrap.dedent(text))
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


def run(args, tmp_path, env_extra=None, cwd=None):
    env = dict(os.environ, **(env_extra or {}))
    return subprocess.run([sys.executable, "-m", "cspmd.run", *args], capture_output=True,
                          text=True, timeout=120, env=env, cwd=cwd or tmp_path)


def test_a_script_that_imports_spmd_types_runs_on_cspmd(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(PROGRAM)
    r = run([str(script), "--steps", "3"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "caught: Partial type on axis MeshAxis(2:1) cannot propagate through non-linear ops" \
        in r.stdout
    assert "args: ['--steps', '3'] type: {MeshAxis(2:1): R}" in r.stdout


def test_a_module_runs_with_dash_m(tmp_path):
    (tmp_path / "trainmod.py").write_text(PROGRAM)
    r = run(["-m", "trainmod", "x"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "args: ['x']" in r.stdout


def test_the_programs_exit_status_and_errors_come_through(tmp_path):
    script = tmp_path / "fails.py"
    script.write_text("import spmd_types\nraise SystemExit(3)\n")
    assert run([str(script)], tmp_path).returncode == 3
    script.write_text("import spmd_types._state\n")
    r = run([str(script)], tmp_path)
    assert r.returncode == 1
    assert ("spmd_types._state is private to spmd_types and cspmd has no counterpart"
            in r.stderr)
    r = run([str(tmp_path / "missing.py")], tmp_path)
    assert r.returncode == 2 and "no such file" in r.stderr
    r = run([], tmp_path)
    assert r.returncode == 2 and "usage: python -m cspmd.run" in r.stderr


def test_it_refuses_once_the_real_spmd_types_is_imported(tmp_path):
    ref = reference.ref_dir()
    reference.load()  # skips where the reference is not installed
    out = run_plain(tmp_path, "mixed.py", f"""
        import sys
        sys.path.append({ref!r})
        import spmd_types  # the real one
        import cspmd.run
        try:
            cspmd.run.install()
        except RuntimeError as e:
            print(e)
    """)
    assert out.startswith("cspmd.run: the real spmd_types is already imported (from ")


def test_processes_the_program_starts_get_the_alias_too(tmp_path):
    # As torch's DTensorTestBase and torchrun start ranks: new interpreters.
    script = tmp_path / "spawner.py"
    script.write_text(textwrap.dedent("""
        import multiprocessing as mp
        import spmd_types

        def child(q):
            import spmd_types, spmd_types.checker, cspmd
            q.put((spmd_types is cspmd, spmd_types.checker is cspmd.checker))

        if __name__ == "__main__":
            ctx = mp.get_context("spawn")
            q = ctx.Queue()
            p = ctx.Process(target=child, args=(q,))
            p.start()
            print("child:", q.get(timeout=60))
            p.join()
            import subprocess, sys
            out = subprocess.run([sys.executable, "-c", "import spmd_types, cspmd; "
                                  "print(spmd_types is cspmd)"], capture_output=True, text=True)
            print("subprocess:", out.stdout.strip(), out.stderr[-300:])
    """))
    r = run([str(script)], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "child: (True, True)" in r.stdout
    assert "subprocess: True" in r.stdout


def _skip_unless_torch_looks_for_spmd_types():
    import torch.distributed as dist
    if not hasattr(dist, "_is_spmd_types_available"):
        pytest.skip("this torch's FSDP does not look for spmd_types")


def test_importing_cspmd_imports_neither_dynamo_nor_fsdp():
    r = subprocess.run([sys.executable, "-c", "import sys, cspmd; print(sorted(m for m in "
                        "('torch._dynamo', 'torch.distributed.fsdp') if m in sys.modules))"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_torchs_fsdp_finds_spmd_types_under_cspmd_run(tmp_path):
    _skip_unless_torch_looks_for_spmd_types()
    # torch 2.15's FSDP asks once, at import, whether spmd_types is there,
    # and types its parameters by it only if so: it must ask after the
    # alias exists, so importing cspmd must not import FSDP (via Dynamo).
    script = tmp_path / "fsdp_probe.py"
    script.write_text(textwrap.dedent("""
        import sys
        import torch.distributed as dist
        print("before:", dist._spmd_types_available,
              [m for m in ("torch._dynamo", "torch.distributed.fsdp") if m in sys.modules])
        print("found:", dist._is_spmd_types_available())
        import torch.distributed.fsdp._fully_shard._fsdp_param as fsdp_param
        import cspmd
        print("fsdp's spmd_types is cspmd:", getattr(fsdp_param, "spmd", None) is cspmd)
    """))
    r = run([str(script)], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "before: None []" in r.stdout
    assert "found: True" in r.stdout
    fsdp_binds = "if dist._is_spmd_types_available()" in _fsdp_param_source()
    assert ("fsdp's spmd_types is cspmd: True" in r.stdout) == fsdp_binds, r.stdout


def _fsdp_param_source():
    import importlib.util
    spec = importlib.util.find_spec("torch.distributed.fsdp._fully_shard._fsdp_param")
    with open(spec.origin) as f:
        return f.read()


def test_install_after_fsdp_said_no_is_an_error(tmp_path):
    _skip_unless_torch_looks_for_spmd_types()
    out = run_plain(tmp_path, "late.py", """
        import torch.distributed as dist
        dist._is_spmd_types_available()  # no spmd_types installed: False, kept
        import torch.distributed.fsdp._fully_shard._fsdp_param
        import cspmd.run
        try:
            cspmd.run.install()
        except RuntimeError as e:
            print(e)
    """)
    assert ("cspmd.run: torch.distributed.fsdp._fully_shard._fsdp_param was imported before "
            "cspmd.run.install() and found no spmd_types") in out


def test_install_before_fsdp_is_imported_drops_an_early_no(tmp_path):
    _skip_unless_torch_looks_for_spmd_types()
    out = run_plain(tmp_path, "early.py", """
        import torch.distributed as dist
        print(dist._is_spmd_types_available())
        import cspmd.run
        cspmd.run.install()
        print(dist._is_spmd_types_available())
    """)
    assert out.split() == ["False", "True"]
