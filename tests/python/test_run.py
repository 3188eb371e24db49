"""python -m cspmd.run: programs that import spmd_types run on cspmd, unchanged.

Each case runs in a fresh interpreter: this test process has the real
spmd_types (the reference) imported for the comparison tests.
"""

import os
import subprocess
import sys
import textwrap

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
    script = tmp_path / "mixed.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        sys.path.append({ref!r})
        import spmd_types  # the real one
        import cspmd.run
        try:
            cspmd.run.install()
        except RuntimeError as e:
            print(e)
    """))
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("cspmd.run: the real spmd_types is already imported (from ")


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
