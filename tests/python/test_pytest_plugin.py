"""cspmd's pytest plugin, run on a small test file in a fresh pytest process
(``-p cspmd.pytest_plugin``: what the installed ``pytest11`` entry point
loads; test_packaging checks that the wheel declares it)."""

import os
import subprocess
import sys
import textwrap

USER_TESTS = textwrap.dedent('''
    import pytest
    import torch
    import torch.distributed as dist
    import cspmd as spmd
    import cspmd.checker


    def test_flag_decides(request):
        assert spmd.is_type_checking() == request.config.getoption("--spmd-typecheck")


    def test_mesh_fixture(spmd_mesh):
        mesh = spmd_mesh((2, 4), ("dp", "tp"))
        assert mesh.shape == (2, 4) and mesh.mesh_dim_names == ("dp", "tp")
        assert dist.get_world_size() == 8
        assert {str(a) for a in spmd.current_mesh()} == {"mesh_dp", "mesh_tp"}


    def test_mesh_is_torn_down():
        assert not dist.is_initialized()


    @pytest.mark.spmd_typecheck
    def test_marked_is_checked(spmd_mesh):
        spmd_mesh((4,), ("tp",))
        x = spmd.assert_type(torch.randn(3), spmd.P)
        with pytest.raises(spmd.SpmdTypeError, match="relu"):
            torch.relu(x)


    @pytest.mark.spmd_typecheck(strict=False)
    def test_marked_permissive(spmd_mesh):
        mesh = spmd_mesh((2, 2), ("dp", "tp"))
        x = spmd.assert_type(torch.randn(3), {"tp": spmd.R})  # no type on dp
        assert spmd.is_type_checking()
        torch.relu(x)


    @pytest.mark.spmd_typecheck(strict=True)
    def test_marked_strict(spmd_mesh):
        spmd_mesh((2, 2), ("dp", "tp"))
        x = spmd.assert_type(torch.randn(3), {"tp": spmd.R})
        with pytest.raises(spmd.SpmdTypeError, match="dp"):
            torch.relu(x)

''')

BAD_MARK = textwrap.dedent('''
    import pytest

    @pytest.mark.spmd_typecheck(strict="yes")
    def test_bad():
        pass
''')


def _pytest(tmp_path, source, *args):
    (tmp_path / "test_user.py").write_text(source)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "cspmd.pytest_plugin", "-p",
         "no:cacheprovider", "-rA", str(tmp_path / "test_user.py"), *args],
        capture_output=True, text=True, cwd=str(tmp_path), env=env, timeout=300)


def test_plugin_without_and_with_the_flag(tmp_path):
    off = _pytest(tmp_path, USER_TESTS)
    assert off.returncode == 0, off.stdout[-4000:] + off.stderr[-2000:]
    assert "6 passed" in off.stdout
    on = _pytest(tmp_path, USER_TESTS, "--spmd-typecheck")
    assert on.returncode == 0, on.stdout[-4000:] + on.stderr[-2000:]
    assert "6 passed" in on.stdout


def test_flag_checks_unmarked_tests(tmp_path):
    source = textwrap.dedent('''
        import torch
        import cspmd as spmd

        def test_partial_through_relu(spmd_mesh):
            spmd_mesh((4,), ("tp",))
            torch.relu(spmd.assert_type(torch.randn(3), spmd.P))
    ''')
    assert _pytest(tmp_path, source).returncode == 0  # unchecked: the bug passes
    on = _pytest(tmp_path, source, "--spmd-typecheck")
    assert on.returncode == 1 and "SpmdTypeError" in on.stdout and "relu" in on.stdout


def test_bad_marker_arguments_are_a_usage_error(tmp_path):
    out = _pytest(tmp_path, BAD_MARK)
    assert out.returncode != 0
    assert "spmd_typecheck(strict=...) must be True or False, got 'yes'" in (out.stdout +
                                                                              out.stderr)
