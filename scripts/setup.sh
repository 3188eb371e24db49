#!/usr/bin/env bash
# Installs what cspmd needs on a fresh Debian machine and builds it:
# Debian packages, a virtual environment with the pinned torch kept outside
# the checkout (so repeated runs reuse it), and the meson build in build/.
set -euo pipefail
cd "$(dirname "$0")/.."

. scripts/env.sh

need=()
for pkg in check meson ninja-build pkg-config valgrind; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  SUDO=; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$TORCH_VERSION')" 2>/dev/null; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip
  "$VENV/bin/pip" install -q "torch==$TORCH_VERSION" numpy pytest meson-python meson ninja
fi

# mypy, for the test that type-checks a user's file against the annotations.
"$VENV/bin/python" -c "import mypy" 2>/dev/null || "$VENV/bin/pip" install -q mypy

if [ ! -f "$CSPMD_REF_DIR/spmd_types-$REF_VERSION.dist-info/METADATA" ]; then
  rm -rf "$CSPMD_REF_DIR"
  "$VENV/bin/pip" install -q --no-deps --target "$CSPMD_REF_DIR" "spmd_types==$REF_VERSION"
fi

[ -d build ] || meson setup build -Dtorch=enabled -Dtests=enabled >/dev/null
ninja -C build >/dev/null
echo "cspmd built in build/ (python: $VENV/bin/python)"
