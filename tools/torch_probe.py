"""Where meson finds torch: prints its include dirs, library dir, C++ ABI
flag and version, one per line (lists joined with ';').

Argument: extra sys.path entries (joined with os.pathsep) to find torch in
-- the build backend passes the target environment's when pip builds in an
isolated environment that has no torch of its own.  Reads no
torch.utils.cpp_extension (it needs setuptools, which a build environment
may lack).
"""

import os
import sys

if len(sys.argv) > 1 and sys.argv[1]:
    sys.path.extend(p for p in sys.argv[1].split(os.pathsep) if p not in sys.path)

try:
    import torch
except Exception as e:  # noqa: BLE001 -- any failure means "no usable torch"
    print(f"import torch failed: {e}", file=sys.stderr)
    sys.exit(1)

root = os.path.dirname(torch.__file__)
include = os.path.join(root, "include")
print(";".join([include, os.path.join(include, "torch", "csrc", "api", "include")]))
print(os.path.join(root, "lib"))
print(int(torch._C._GLIBCXX_USE_CXX11_ABI))
print(torch.__version__)
