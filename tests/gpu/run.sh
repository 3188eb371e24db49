#!/usr/bin/env bash
# GPU check for cspmd's collectives (NOT run by CI: it needs a CUDA GPU).
#
# Builds cspmd (scripts/setup.sh), then runs tests/gpu/nccl_check.py on one
# CUDA GPU with NCCL, world size 1: every collective and conversion on CUDA
# tensors (values and gradients against the world-size-1 expectation), and a
# timing of spmd.all_reduce against the raw functional collective.
# Exits non-zero, loudly, if CUDA or NCCL is unavailable or any check fails.
#
#   bash tests/gpu/run.sh            # build + check
#   SKIP_BUILD=1 bash tests/gpu/run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."

if [ "${SKIP_BUILD:-0}" != 1 ]; then
  bash scripts/setup.sh
fi
. scripts/env.sh

if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
else
  echo "run.sh: WARNING: nvidia-smi not found" >&2
fi

export CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES:-0}"
# tcp://127.0.0.1:29533 is used by the script; fail fast rather than hang.
exec timeout "${GPU_CHECK_TIMEOUT:-300}" python tests/gpu/nccl_check.py "$@"
