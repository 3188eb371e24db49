# Sourced by the scripts: the venv and the in-tree build on the paths.
# CSPMD_TORCH picks the torch (default: the newest supported minor); each
# torch has its own venv outside the checkout and its own build folder.
DEFAULT_TORCH=2.15.0
TORCH_VERSION=${CSPMD_TORCH:-$DEFAULT_TORCH}
VENV=${CSPMD_VENV:-$HOME/.cache/cspmd/venv-torch$TORCH_VERSION}
if [ "$TORCH_VERSION" = "$DEFAULT_TORCH" ]; then BUILD=build; else BUILD=build-torch$TORCH_VERSION; fi
export CSPMD_BUILD="$(pwd)/$BUILD"
export PATH="$VENV/bin:$PATH"
export PYTHONPATH="$(pwd)/torch_plugin${PYTHONPATH:+:$PYTHONPATH}"
export CSPMD_LIBRARY="$CSPMD_BUILD/csrc/torch/libcspmd.so"
# The reference spmd_types, for tests and benchmarks only: its own folder,
# put on sys.path by tests/python/reference.py and the benchmark processes.
REF_VERSION=0.3.1
export CSPMD_REF_DIR=${CSPMD_REF_DIR:-$HOME/.cache/cspmd/spmd_types-ref}
