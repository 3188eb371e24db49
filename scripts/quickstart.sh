#!/usr/bin/env bash
# Set everything up (the newest supported torch unless CSPMD_TORCH says
# otherwise), then run the quick start on a fake process group.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. scripts/env.sh
python examples/quickstart.py
