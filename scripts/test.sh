#!/usr/bin/env bash
# All tests: the C core's Check suites (also under valgrind), then pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. scripts/env.sh
meson test -C build --print-errorlogs
for t in build/tests/c/test_types build/tests/c/test_infer; do
  CK_FORK=no valgrind -q --leak-check=full --errors-for-leak-kinds=definite \
    --error-exitcode=1 "$t" >/dev/null
done
echo "valgrind: C tests clean"
python -m pytest -q tests/python
