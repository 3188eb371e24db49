#!/usr/bin/env bash
# All tests: the C core's Check suites (plainly, then under valgrind), then
# pytest (single-process on the fake backend, and multi-process on Gloo over
# loopback).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. scripts/env.sh
for t in build/tests/c/test_types build/tests/c/test_infer; do
  "$t"
  CK_FORK=no valgrind -q --leak-check=full --errors-for-leak-kinds=definite \
    --error-exitcode=1 "$t" >/dev/null
done
echo "valgrind: C tests clean (no invalid accesses, no definite leaks)"
python -m pytest -q tests/python
