"""The build backend of `pip install .`: meson-python, plus what a PyTorch
extension needs from it.

* torch at build time.  pip builds in an isolated environment without the
  target environment's packages, so meson's torch probe could not import
  torch.  Declaring torch as a build requirement would download a second,
  possibly different torch; instead the backend builds against the torch of
  the environment pip installs into: it asks that environment's Python for
  its sys.path and hands it to the probe (meson option ``torch_path``).  No
  torch there: one line says what to run.
* The pin.  The wheel's ``Requires-Dist: torch`` is narrowed to the minor it
  was built against (``torch==2.11.*``), read from the
  ``cspmd/cspmd_build_info.json`` that meson wrote into the wheel: a compiled
  extension only works with the torch minor it was built with.
"""

import base64
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import zipfile

import mesonpy
from mesonpy import get_requires_for_build_editable  # noqa: F401 -- re-exported hooks
from mesonpy import get_requires_for_build_sdist  # noqa: F401
from mesonpy import get_requires_for_build_wheel  # noqa: F401

_ASK_ENVIRONMENT = ("import os, sys, torch; print(torch.__version__); "
                    "print(os.pathsep.join(p for p in sys.path if p))")


def _torch_path():
    """sys.path entries where the build finds torch: none when torch is
    importable here (--no-build-isolation), else the target environment's."""
    import importlib.util

    if importlib.util.find_spec("torch") is not None:
        return ""
    # pip's isolation is PYTHONPATH (a sitecustomize hiding site-packages)
    # and PYTHONNOUSERSITE; without them this Python sees its environment.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONNOUSERSITE")}
    out = subprocess.run([sys.executable, "-c", _ASK_ENVIRONMENT], env=env,
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(
            f"cspmd: building needs torch, and `import torch` fails for {sys.executable}: "
            "install torch into this environment first (pip install torch), then run "
            "pip install again")
    return out.stdout.splitlines()[1]


def _with_torch(config_settings):
    settings = dict(config_settings or {})
    path = _torch_path()
    if path:
        args = settings.get("setup-args", [])
        args = [args] if isinstance(args, str) else list(args)
        settings["setup-args"] = args + [f"-Dtorch_path={path}"]
    return settings


def _record_hash(data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return f"sha256={digest.decode()},{len(data)}"


def _pin_torch(wheel):
    """Rewrite the wheel's torch requirement to the build torch's minor."""
    with zipfile.ZipFile(wheel) as z:
        entries = [(i, z.read(i.filename)) for i in z.infolist()]
    files = {i.filename: data for i, data in entries}
    info = json.loads(files["cspmd/cspmd_build_info.json"])
    major, minor = info["torch"].split(".")[:2]
    pin = f"Requires-Dist: torch=={major}.{minor}.*"
    meta_name = next(n for n in files if n.endswith(".dist-info/METADATA"))
    meta, n = re.subn(r"^Requires-Dist: torch\b.*$", pin, files[meta_name].decode(),
                      flags=re.M)
    if n != 1:
        raise SystemExit(f"cspmd: expected one torch requirement in {meta_name}, found {n}")
    files[meta_name] = meta.encode()
    record_name = meta_name.replace("METADATA", "RECORD")
    lines = []
    for line in files[record_name].decode().splitlines():
        path = line.rsplit(",", 2)[0]
        lines.append(f"{path},{_record_hash(files[path])}" if path == meta_name else line)
    files[record_name] = ("\n".join(lines) + "\n").encode()
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(wheel), suffix=".whl")
    os.close(fd)
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for i, _ in entries:
            z.writestr(i, files[i.filename])
    os.replace(tmp, wheel)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    name = mesonpy.build_wheel(wheel_directory, _with_torch(config_settings),
                               metadata_directory)
    _pin_torch(os.path.join(wheel_directory, name))
    return name


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    name = mesonpy.build_editable(wheel_directory, _with_torch(config_settings),
                                  metadata_directory)
    _pin_torch(os.path.join(wheel_directory, name))
    return name


def build_sdist(sdist_directory, config_settings=None):
    return mesonpy.build_sdist(sdist_directory, _with_torch(config_settings))
