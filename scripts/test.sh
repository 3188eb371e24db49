#!/usr/bin/env bash
# All tests: the C core's Check suites (plainly, under valgrind, and with
# ASan + UBSan), then pytest (single-process on the fake backend, and
# multi-process on Gloo over loopback).
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
# The core once more under AddressSanitizer + UndefinedBehaviorSanitizer.
[ -d build-asan ] || meson setup build-asan -Dtorch=disabled -Dbuildtype=debug \
  -Db_sanitize=address,undefined >/dev/null
ninja -C build-asan tests/c/test_types tests/c/test_infer >/dev/null
UBSAN_OPTIONS=halt_on_error=1 CK_FORK=no build-asan/tests/c/test_types | tail -1
UBSAN_OPTIONS=halt_on_error=1 CK_FORK=no build-asan/tests/c/test_infer | tail -1
# CSPMD_TEST_WHEEL=1: also build the wheel as `pip install .` does, install it
# into a fresh virtual environment and run the quick start there.
CSPMD_TEST_WHEEL=1 python -m pytest -q tests/python
