"""The source tree's layers, enforced: each folder of csrc/ includes only
what its layer may use.

- csrc/core/   pure C11 type reasoning: the C standard library (and
  pthreads), the public header cspmd.h and the core's own headers;
- csrc/kernel/ C that runs ops and collectives: cspmd.h, the shim's
  torch/shim.h and the kernel's own headers -- never a core-private header;
- csrc/torch/  the C++ shim: libtorch, Python and the kernel's entry points.
"""

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)

# Headers of the C standard library and POSIX threads that the core uses.
C_SYSTEM = {
    "assert.h", "ctype.h", "errno.h", "inttypes.h", "limits.h", "pthread.h",
    "stdarg.h", "stdatomic.h", "stdbool.h", "stddef.h", "stdint.h", "stdio.h",
    "stdlib.h", "string.h",
}


def _includes(path):
    return [(kind, name) for kind, name in INCLUDE.findall(path.read_text())]


def _sources(folder):
    files = sorted((ROOT / "csrc" / folder).glob("*.[ch]"))
    assert files, f"no sources in csrc/{folder}"
    return files


def _local_headers(folder):
    return {p.name for p in (ROOT / "csrc" / folder).glob("*.h")}


def test_csrc_has_only_the_three_layers():
    entries = {p.name for p in (ROOT / "csrc").iterdir()}
    assert entries == {"core", "kernel", "torch"}, entries


@pytest.mark.parametrize("path", _sources("core"), ids=lambda p: p.name)
def test_core_includes_only_the_c_library_and_the_public_header(path):
    allowed = {"cspmd.h"} | _local_headers("core")
    for kind, name in _includes(path):
        if kind == "<":
            assert name in C_SYSTEM, f"{path.name} includes <{name}>"
        else:
            assert name in allowed, f"{path.name} includes \"{name}\""


@pytest.mark.parametrize("path", _sources("kernel"), ids=lambda p: p.name)
def test_kernel_uses_the_core_only_through_the_public_header(path):
    allowed = {"cspmd.h", "torch/shim.h"} | _local_headers("kernel")
    for kind, name in _includes(path):
        if kind == "<":
            assert name in C_SYSTEM, f"{path.name} includes <{name}>"
        else:
            assert name in allowed, f"{path.name} includes \"{name}\""


def test_core_private_headers_are_not_reachable_from_other_layers():
    private = _local_headers("core")
    for folder in ("kernel", "torch"):
        for path in sorted((ROOT / "csrc" / folder).glob("*.*")):
            for _, name in _includes(path):
                assert pathlib.PurePath(name).name not in private, (
                    f"csrc/{folder}/{path.name} includes the core's private {name}")


def test_a_core_file_reaching_for_torch_would_be_caught(tmp_path):
    # The rule above must be able to fail: a core file including the shim.
    bad = tmp_path / "bad.c"
    bad.write_text('#include "cspmd.h"\n#include "torch/shim.h"\n')
    names = [name for _, name in _includes(bad)]
    allowed = {"cspmd.h"} | _local_headers("core")
    assert [n for n in names if n not in allowed] == ["torch/shim.h"]
