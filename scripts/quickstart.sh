#!/usr/bin/env bash
# Set everything up, then run the quick start on a fake process group.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. scripts/env.sh
python examples/quickstart.py
