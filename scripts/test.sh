#!/usr/bin/env bash
# All tests: the C core's Check suites (plainly, under valgrind, and with
# ASan + UBSan), then pytest (single-process on the fake backend, and
# multi-process on Gloo over loopback) once per torch in CSPMD_TEST_TORCH:
# by default the oldest and the newest minor that CI tests.
set -euo pipefail
cd "$(dirname "$0")/.."
TORCHES=${CSPMD_TEST_TORCH:-"2.11.0 2.15.0"}

first=${TORCHES%% *}
CSPMD_TORCH=$first bash scripts/setup.sh
(
  CSPMD_TORCH=$first . scripts/env.sh
  for t in "$CSPMD_BUILD"/tests/c/test_types "$CSPMD_BUILD"/tests/c/test_infer; do
    "$t"
    CK_FORK=no valgrind -q --leak-check=full --errors-for-leak-kinds=definite \
      --error-exitcode=1 "$t" >/dev/null
  done
  echo "valgrind: C tests clean (no invalid accesses, no definite leaks)"
)
# The core once more under AddressSanitizer + UndefinedBehaviorSanitizer.
[ -d build-asan ] || meson setup build-asan -Dtorch=disabled -Dbuildtype=debug \
  -Db_sanitize=address,undefined >/dev/null
ninja -C build-asan tests/c/test_types tests/c/test_infer >/dev/null
echo -n "ASan+UBSan test_types: "
UBSAN_OPTIONS=halt_on_error=1 CK_FORK=no build-asan/tests/c/test_types | tail -1
echo -n "ASan+UBSan test_infer: "
UBSAN_OPTIONS=halt_on_error=1 CK_FORK=no build-asan/tests/c/test_infer | tail -1

summary=()
for v in $TORCHES; do
  echo "== pytest on torch $v"
  CSPMD_TORCH=$v bash scripts/setup.sh
  log=$(mktemp)
  # CSPMD_TEST_WHEEL=1: also build the wheel as `pip install .` does, install
  # it into a fresh virtual environment and run the quick start there.
  rc=0
  (CSPMD_TORCH=$v . scripts/env.sh && CSPMD_TEST_WHEEL=1 python -m pytest -q tests/python) 2>&1 \
    | tee "$log" || rc=$?
  summary+=("torch $v: $(grep -E '^[0-9]+ (passed|failed)|[0-9]+ passed' "$log" | tail -1)")
  rm -f "$log"
  [ "$rc" -eq 0 ] || { printf '%s\n' "${summary[@]}"; exit "$rc"; }
done
echo "== pytest summary"
printf '%s\n' "${summary[@]}"
