#!/usr/bin/env bash
# Installs what cspmd needs on a fresh Debian machine and builds it:
# Debian packages, a virtual environment with the chosen torch kept outside
# the checkout (so repeated runs reuse it), and the meson build.
# CSPMD_TORCH=X.Y.Z picks the torch (default: scripts/env.sh's newest).
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

# A build folder configured for another torch (its venv moved, say) is set
# up again rather than mixing two torches' headers.
if [ -d "$BUILD" ] && ! grep -qF "$VENV/" "$BUILD/build.ninja" 2>/dev/null; then
  rm -rf "$BUILD"
fi
[ -d "$BUILD" ] || meson setup "$BUILD" -Dtorch=enabled -Dtests=enabled >/dev/null
ninja -C "$BUILD" >/dev/null
echo "cspmd built in $BUILD/ against torch $TORCH_VERSION (python: $VENV/bin/python)"
