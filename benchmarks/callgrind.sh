#!/usr/bin/env bash
# Instructions per call of the core's inference (one `add` of two typed
# tensors under a 2-axis mesh, memo hit), from two callgrind runs:
# (Ir(N) - Ir(0)) / N.  Needs the build from scripts/setup.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=build/benchmarks/bench_infer
N=${1:-100000}
ir() {
  valgrind --tool=callgrind --callgrind-out-file=/dev/null "$bin" "$1" 2>&1 |
    sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}
base=$(ir 0)
full=$(ir "$N")
echo "cspmd_infer: $(( (full - base) / N )) instructions per call (memo hit; N=$N)"
