"""cspmd installs like a PyTorch extension: a platform wheel pinned to the
torch minor it was built against, no RUNPATH into the build machine, one
version number, and a clear error at import under another torch.

The end-to-end wheel test (build with default pip options, install into a
fresh virtual environment that has torch, run the quick start there) takes
minutes: it runs when CSPMD_TEST_WHEEL=1, which scripts/test.sh sets.
"""

import base64
import hashlib
import json
import os
import re
import subprocess
import sys
import sysconfig
import zipfile

import pytest
import torch

import cspmd

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))


def clean_env(**extra):
    """The environment without the build tree on the paths."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "CSPMD_LIBRARY")}
    env.update(extra)
    return env


def meson_version():
    with open(os.path.join(ROOT, "meson.build")) as f:
        return re.search(r"project\('cspmd'.*?version : '([^']+)'", f.read(), re.S).group(1)


def test_one_version_number():
    assert cspmd.__version__ == meson_version()
    with open(os.path.join(ROOT, "pyproject.toml")) as f:
        pyproject = f.read()
    assert 'dynamic = ["version"]' in pyproject
    assert not re.search(r"^version\s*=", pyproject, re.M)


def test_every_python_module_is_installed():
    """A module missing from torch_plugin/meson.build works in the tree but
    not from the wheel; this catches it without building one."""
    pkg = os.path.join(ROOT, "torch_plugin", "cspmd")
    with open(os.path.join(ROOT, "torch_plugin", "meson.build")) as f:
        listed = set(re.findall(r"'cspmd/([^']+\.py)'", f.read()))
    on_disk = {os.path.relpath(os.path.join(d, n), pkg)
               for d, _, names in os.walk(pkg) for n in names if n.endswith(".py")}
    assert on_disk == listed


def test_build_info_records_the_build_torch():
    from cspmd import _lib

    assert _lib.build_info["torch"] == torch.__version__
    assert _lib.build_info["version"] == cspmd.__version__


def test_other_torch_minor_is_a_clear_import_error(tmp_path):
    from cspmd import _lib

    lib = _lib._find_library()
    (tmp_path / "libcspmd.so").symlink_to(lib)
    (tmp_path / "cspmd_build_info.json").write_text(
        json.dumps({"version": cspmd.__version__, "torch": "2.9.1", "python": "3.11"}))
    out = subprocess.run([sys.executable, "-c", "import cspmd"], capture_output=True, text=True,
                         env=dict(os.environ, CSPMD_LIBRARY=str(tmp_path / "libcspmd.so")))
    assert out.returncode != 0
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: cspmd ") and "built against torch 2.9.1" in last
    assert f"torch {torch.__version__} is installed" in last and "torch==2.9.*" in last


def fake_wheel(path, requirement):
    meta = f"Metadata-Version: 2.1\nName: cspmd\nVersion: 0.1.0\n{requirement}\n"
    info = json.dumps({"version": "0.1.0", "torch": "2.11.0+cpu", "python": "3.11"})
    record = ("cspmd/cspmd_build_info.json,,\ncspmd-0.1.0.dist-info/METADATA,sha256=x,1\n"
              "cspmd-0.1.0.dist-info/RECORD,,\n")
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("cspmd/cspmd_build_info.json", info)
        z.writestr("cspmd-0.1.0.dist-info/METADATA", meta)
        z.writestr("cspmd-0.1.0.dist-info/RECORD", record)


def test_backend_pins_the_build_torch_minor(tmp_path):
    pytest.importorskip("mesonpy")
    import cspmd_backend

    wheel = tmp_path / "cspmd-0.1.0-cp311-cp311-linux_x86_64.whl"
    fake_wheel(wheel, "Requires-Dist: torch>=2.10")
    cspmd_backend._pin_torch(str(wheel))
    with zipfile.ZipFile(wheel) as z:
        meta = z.read("cspmd-0.1.0.dist-info/METADATA")
        record = z.read("cspmd-0.1.0.dist-info/RECORD").decode()
    assert b"Requires-Dist: torch==2.11.*\n" in meta and b">=2.10" not in meta
    digest = base64.urlsafe_b64encode(hashlib.sha256(meta).digest()).rstrip(b"=").decode()
    assert f"cspmd-0.1.0.dist-info/METADATA,sha256={digest},{len(meta)}" in record


def test_backend_refuses_a_wheel_without_one_torch_requirement(tmp_path):
    pytest.importorskip("mesonpy")
    import cspmd_backend

    wheel = tmp_path / "w.whl"
    fake_wheel(wheel, "Requires-Dist: numpy")
    with pytest.raises(SystemExit, match="expected one torch requirement"):
        cspmd_backend._pin_torch(str(wheel))


def test_backend_without_torch_says_what_to_run(tmp_path):
    """A Python with no torch at all: one line, naming the command."""
    venv = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    # The backend imports meson-python's hooks; this Python has none (and no
    # torch), so a module with those names stands in for it.
    (tmp_path / "mesonpy").mkdir()
    (tmp_path / "mesonpy" / "__init__.py").write_text("".join(
        f"def {hook}(*a, **k): pass\n" for hook in (
            "get_requires_for_build_editable", "get_requires_for_build_sdist",
            "get_requires_for_build_wheel", "build_wheel", "build_editable", "build_sdist")))
    code = ("import sys; sys.path[:0] = sys.argv[1:]; import cspmd_backend; "
            "cspmd_backend._torch_path()")
    out = subprocess.run([str(venv / "bin" / "python"), "-c", code, os.path.join(ROOT, "tools"),
                          str(tmp_path)], capture_output=True, text=True, env=clean_env())
    assert out.returncode == 1
    assert out.stderr.strip().splitlines() == [
        f"cspmd: building needs torch, and `import torch` fails for {venv}/bin/python: install "
        "torch into this environment first (pip install torch), then run pip install again"]


# ---- the wheel, end to end -------------------------------------------------

wheel_test = pytest.mark.skipif(
    os.environ.get("CSPMD_TEST_WHEEL") != "1",
    reason="builds a wheel (minutes): set CSPMD_TEST_WHEEL=1 (scripts/test.sh does)")


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory):
    """A new virtual environment that has torch: the torch of this one, seen
    through a .pth file (no download), and no cspmd."""
    venv = tmp_path_factory.mktemp("fresh") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    with open(os.path.join(site, "torch_env.pth"), "w") as f:
        f.write(os.path.dirname(os.path.dirname(torch.__file__)) + "\n")
    check = subprocess.run([python, "-c", "import cspmd"], capture_output=True, text=True,
                           cwd=str(venv), env=clean_env())
    assert check.returncode != 0, "cspmd importable before installing"
    return python


@pytest.fixture(scope="module")
def wheel(fresh_venv, tmp_path_factory):
    """Built as `pip install .` builds it (default options: an isolated build
    environment), by the fresh venv's Python; build-wheel/ keeps the meson
    build between runs."""
    dist = tmp_path_factory.mktemp("dist")
    out = subprocess.run(
        [sys.executable, "-m", "pip", "--python", fresh_venv, "wheel", ROOT, "--no-deps",
         "-w", str(dist), f"-Cbuild-dir={os.path.join(ROOT, 'build-wheel')}"],
        capture_output=True, text=True, env=clean_env())
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    (name,) = os.listdir(dist)
    return dist / name


@wheel_test
def test_wheel_is_a_pinned_platform_wheel(wheel, tmp_path):
    py = f"cp{sys.version_info.major}{sys.version_info.minor}"
    plat = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    tag = f"{py}-{py}-{plat}"
    assert wheel.name == f"cspmd-{cspmd.__version__}-{tag}.whl"
    with zipfile.ZipFile(wheel) as z:
        z.extractall(tmp_path)
    dist_info = tmp_path / f"cspmd-{cspmd.__version__}.dist-info"
    wheel_meta = (dist_info / "WHEEL").read_text()
    assert "Root-Is-Purelib: false" in wheel_meta and f"Tag: {tag}" in wheel_meta
    meta = (dist_info / "METADATA").read_text()
    major, minor = torch.__version__.split(".")[:2]
    assert re.findall(r"^Requires-Dist: torch.*$", meta, re.M) == [
        f"Requires-Dist: torch=={major}.{minor}.*"]
    assert f"\nVersion: {cspmd.__version__}\n" in meta
    entry_points = (dist_info / "entry_points.txt").read_text()
    assert "[pytest11]\ncspmd = cspmd.pytest_plugin" in entry_points
    info = json.loads((tmp_path / "cspmd" / "cspmd_build_info.json").read_text())
    assert info == {"version": cspmd.__version__, "torch": torch.__version__,
                    "python": f"{sys.version_info.major}.{sys.version_info.minor}"}
    dyn = subprocess.run(["readelf", "-d", str(tmp_path / "cspmd" / "libcspmd.so")],
                         capture_output=True, text=True, check=True).stdout
    assert "libtorch.so" in dyn
    assert not re.search(r"R(UN)?PATH", dyn), dyn


@wheel_test
def test_wheel_installs_and_runs_the_quick_start(wheel, fresh_venv):
    out = subprocess.run([sys.executable, "-m", "pip", "--python", fresh_venv, "install",
                          "--no-index", str(wheel)], capture_output=True, text=True,
                         env=clean_env())
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    here = os.path.dirname(fresh_venv)
    where = subprocess.run([fresh_venv, "-c", "import cspmd; print(cspmd.__file__); "
                            "print(cspmd.__version__)"], capture_output=True, text=True,
                           cwd=here, env=clean_env())
    path, version = where.stdout.split()
    assert path.startswith(os.path.dirname(here)) and version == cspmd.__version__
    quickstart = os.path.join(ROOT, "examples", "quickstart.py")
    run = subprocess.run([fresh_venv, quickstart], capture_output=True, text=True, cwd=here,
                         env=clean_env())
    assert run.returncode == 0, run.stdout + run.stderr
    # Installed, it prints what it prints from the build tree.
    tree = subprocess.run([sys.executable, quickstart], capture_output=True, text=True,
                          cwd=here, check=True)
    assert run.stdout == tree.stdout and run.stdout.strip()


def test_install_doc_lists_a_run_on_every_supported_minor():
    """docs/install.md's table: each minor from 2.10 to 2.15 with the torch
    release it was run on and its pytest counts (nothing failed)."""
    with open(os.path.join(ROOT, "docs", "install.md")) as f:
        rows = re.findall(r"^\| (2\.\d+) \| (2\.\d+\.\d+) \| (C\+\+\d+) \| (\d+) passed"
                          r"(?:, (\d+) failed)?", f.read(), re.M)
    assert [r[0] for r in rows] == [f"2.{m}" for m in range(10, 16)]
    for minor, release, std, passed, failed in rows:
        assert release.startswith(minor + ".") and int(passed) > 2500 and not failed
        assert std == ("C++20" if int(minor.split(".")[1]) >= 14 else "C++17")
