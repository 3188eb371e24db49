"""The public header is the contract: it compiles as pedantic C11 and as C++,
and the library exports exactly the cspmd_ functions of include/cspmd.h and
of the shim's C face (csrc/torch/shim.h), plus PyInit__C (it is also the
extension module cspmd._C) -- everything else is hidden."""

import os
import re
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HEADER = os.path.join(ROOT, "include", "cspmd.h")
SHIM = os.path.join(ROOT, "csrc", "torch", "shim.h")


def declared(path):
    """Functions declared in a header: cspmd_ names followed by arguments
    (type names, ending in _t, excluded)."""
    with open(path) as f:
        return {n for n in re.findall(r"\b(cspmd_[a-z0-9_]+)\s*\(", f.read())
                if not n.endswith("_t")}


@pytest.mark.parametrize("compiler,flags", [
    ("cc", ["-std=c11", "-pedantic", "-Wall", "-Wextra", "-Werror", "-x", "c"]),
    ("c++", ["-std=c++17", "-pedantic", "-Wall", "-Wextra", "-Werror", "-x", "c++"]),
])
def test_header_compiles(tmp_path, compiler, flags):
    assert shutil.which(compiler), f"{compiler} not found"
    src = tmp_path / "use.c"
    src.write_text('#include "cspmd.h"\nint main(void) { return cspmd_status_name(CSPMD_OK)[0] '
                   '== \'C\' ? 0 : 1; }\n')
    out = subprocess.run([compiler, *flags, "-fsyntax-only", "-I", os.path.dirname(HEADER),
                          str(src)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_exported_symbols_match_the_headers():
    import cspmd._lib as lib
    nm = subprocess.run(["nm", "-D", "--defined-only", lib._find_library()],
                        capture_output=True, text=True, check=True).stdout
    exported = {line.split()[-1] for line in nm.splitlines()
                if line.split() and line.split()[-1].startswith("cspmd")}
    public = declared(HEADER)
    assert public <= exported, f"declared but not exported: {sorted(public - exported)}"
    extra = exported - public - declared(SHIM)
    assert not extra, f"exported but in no header: {sorted(extra)}"
    # The core's internals (cspmdi_*) never leave the library.
    assert not [s for s in exported if s.startswith("cspmdi_")]
    # The same library is the extension module cspmd._C (the control functions).
    assert "PyInit__C" in {line.split()[-1] for line in nm.splitlines() if line.split()}


def test_cpp_internals_are_hidden():
    """Only the C API (cspmd_*) and the extension module's entry point are
    dynamic symbols: nothing of namespace cspmd (hidden visibility), and
    none of the torch and standard-library templates the shim instantiates
    (csrc/torch/exports.map) -- exported, those could stand in for
    libtorch's or libstdc++'s own copies in other libraries."""
    import cspmd._lib as lib
    nm = subprocess.run(["nm", "-D", "--defined-only", lib._find_library()],
                        capture_output=True, text=True, check=True).stdout
    names = [line.split()[-1] for line in nm.splitlines() if line.split()]
    assert len(names) > 100, names
    leaked = [n for n in names if not n.startswith("cspmd_") and n != "PyInit__C"]
    assert leaked == [], leaked[:20]
