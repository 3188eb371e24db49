#!/usr/bin/env bash
# GPU check for cspmd's collectives (NOT run by CI: it needs a CUDA GPU).
#
# Builds cspmd (scripts/setup.sh, or on a GPU machine's image against its
# own python3 with torch, meson and ninja), then on one CUDA GPU runs
# - tests/gpu/nccl_check.py, NCCL with world size 1: every collective and
#   conversion on CUDA tensors (values and gradients against the world-size-1
#   expectation), and a timing of spmd.all_reduce against the raw functional
#   collective;
# - tests/gpu/cuda_training_check.py, the fake process group with CUDA
#   tensors: the training-loop corpus, global-mode attention through CUDA's
#   attention kernels, and per-op overhead on CUDA tensors.
# Exits non-zero, loudly, if CUDA or NCCL is unavailable or any check fails.
#
#   bash tests/gpu/run.sh            # build + check
#   SKIP_BUILD=1 bash tests/gpu/run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."

. scripts/env.sh
if [ ! -x "$VENV/bin/python" ] && python3 -c "import torch, mesonbuild" 2>/dev/null; then
  # A GPU machine's image: torch, meson and ninja are installed and nothing
  # can be fetched, so build against its python3 instead of the pinned venv.
  if [ "${SKIP_BUILD:-0}" != 1 ]; then
    [ -d build-gpu ] || python3 -m mesonbuild.mesonmain setup build-gpu -Dtests=disabled \
      -Dtorch=enabled >/dev/null
    ninja -C build-gpu >/dev/null
  fi
  export CSPMD_LIBRARY="$(pwd)/build-gpu/csrc/torch/libcspmd.so"
elif [ "${SKIP_BUILD:-0}" != 1 ]; then
  bash scripts/setup.sh
fi

if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
else
  echo "run.sh: WARNING: nvidia-smi not found" >&2
fi

export CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES:-0}"
# tcp://127.0.0.1:29533 is used by the script; fail fast rather than hang.
rc=0
timeout "${GPU_CHECK_TIMEOUT:-300}" python tests/gpu/nccl_check.py "$@" || rc=$?
timeout "${GPU_CHECK_TIMEOUT:-300}" python tests/gpu/cuda_training_check.py || rc=$?
exit $rc
