# Sourced by the scripts: the venv and the in-tree build on the paths.
TORCH_VERSION=2.11.0
VENV=${CSPMD_VENV:-$HOME/.cache/cspmd/venv-torch$TORCH_VERSION}
export PATH="$VENV/bin:$PATH"
export PYTHONPATH="$(pwd)/torch_plugin${PYTHONPATH:+:$PYTHONPATH}"
export CSPMD_LIBRARY="$(pwd)/build/csrc/torch/libcspmd.so"
# The reference spmd_types, for tests and benchmarks only: its own folder,
# put on sys.path by tests/python/reference.py and the benchmark processes.
REF_VERSION=0.3.1
export CSPMD_REF_DIR=${CSPMD_REF_DIR:-$HOME/.cache/cspmd/spmd_types-ref}
