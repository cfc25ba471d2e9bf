#!/usr/bin/env bash
# Install NVIDIA perf_analyzer (from the tritonclient 2.41.1 wheel) into DEST_DIR (default: .tools
# under the repository root), and print the path of DEST_DIR/perf_analyzer: a wrapper that sets
# LD_LIBRARY_PATH and execs it. The one installer of perf_analyzer: the e2e tests call it (into
# .tools), and scripts/reference/setup.sh does (into its ANCHOR_DIR, with the reference venv as
# CUDART_VENV).
#
#   bash scripts/get_perf_analyzer.sh [DEST_DIR]
#
# Needs PyPI (pip) and, when libb64.so.0d is missing, Debian apt (libb64-0d). perf_analyzer also
# links libcudart.so.12 (even on a CPU-only machine): it comes from the nvidia-cuda-runtime-cu12
# pip package, installed into a small venv of its own under DEST_DIR unless CUDART_VENV names a
# venv to use (and to install it into when it lacks it). Idempotent: once everything is in place
# it only prints the wrapper's path.
# Env: PYTHON (python3), the interpreter that creates that venv; CUDART_VENV ($DEST_DIR/venv-cudart).
set -euo pipefail

VERSION=2.41.1
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEST=${1:-$ROOT/.tools}
mkdir -p "$DEST"
DEST=$(cd "$DEST" && pwd)
BIN_DIR=$DEST/perf_analyzer-$VERSION
BIN=$BIN_DIR/perf_analyzer
VENV=${CUDART_VENV:-$DEST/venv-cudart}
WRAPPER=$DEST/perf_analyzer
PYTHON=${PYTHON:-python3}

log() { echo "[get_perf_analyzer] $*" >&2; }

cudart_dir() {
  local lib
  lib=$(find "$VENV" -name 'libcudart.so.12' -print -quit 2>/dev/null || true)
  [ -n "$lib" ] && dirname "$lib"
}

have_libb64() { ldconfig -p 2>/dev/null | grep -q 'libb64\.so\.0d'; }

installed() { [ -x "$WRAPPER" ] && [ -x "$BIN" ] && [ -n "$(cudart_dir)" ] && have_libb64; }

# -- quick path: everything already there ---------------------------------------------------
if installed; then
  echo "$WRAPPER"
  exit 0
fi
# one installer at a time (parallel test workers may all ask for it)
exec 9>"$DEST/.install.lock"
flock 9
if installed; then
  echo "$WRAPPER"
  exit 0
fi

# -- 1. libb64 (apt) --------------------------------------------------------------------------
if ! have_libb64; then
  log "installing libb64-0d (apt)"
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y -qq libb64-0d >&2; then
    apt-get update -qq >&2
    apt-get install -y -qq libb64-0d >&2
  fi
fi

# -- 2. a small venv for pip: nvidia-cuda-runtime-cu12 (libcudart.so.12) ------------------------
if [ ! -x "$VENV/bin/python" ]; then
  log "creating venv $VENV"
  "$PYTHON" -m venv "$VENV"
fi
if [ -z "$(cudart_dir)" ]; then
  log "pip installing nvidia-cuda-runtime-cu12"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check nvidia-cuda-runtime-cu12 >&2
fi
CUDART_DIR=$(cudart_dir)
[ -n "$CUDART_DIR" ] || { log "libcudart.so.12 not found under $VENV"; exit 1; }

# -- 3. the perf_analyzer binary out of the tritonclient wheel ------------------------------
if [ ! -x "$BIN" ]; then
  whl=$(ls "$DEST"/dl/tritonclient-$VERSION-*manylinux1_x86_64.whl 2>/dev/null | head -1 || true)
  if [ -z "$whl" ]; then
    log "downloading the tritonclient==$VERSION wheel (for its perf_analyzer binary)"
    "$VENV/bin/python" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
      --platform manylinux1_x86_64 --python-version 3.11 --implementation py \
      "tritonclient==$VERSION" -d "$DEST/dl" >&2
    whl=$(ls "$DEST"/dl/tritonclient-$VERSION-*manylinux1_x86_64.whl | head -1)
  fi
  log "extracting perf_analyzer from $(basename "$whl")"
  mkdir -p "$BIN_DIR"
  "$VENV/bin/python" - "$whl" "$BIN" "$VERSION" <<'PY'
import os
import shutil
import sys
import zipfile

whl, dst, version = sys.argv[1:4]
with zipfile.ZipFile(whl) as z:
    with z.open(f"tritonclient-{version}.data/data/bin/perf_analyzer") as src, open(dst + ".tmp", "wb") as out:
        shutil.copyfileobj(src, out)
os.chmod(dst + ".tmp", 0o755)
os.replace(dst + ".tmp", dst)
PY
fi

# -- 4. the wrapper -----------------------------------------------------------------------------
# relative to the wrapper when under DEST (the folder can move), else absolute
case $CUDART_DIR in
"$DEST"/*) cudart_ref="\$here/${CUDART_DIR#"$DEST"/}" ;;
*) cudart_ref=$CUDART_DIR ;;
esac
cat >"$WRAPPER.tmp" <<EOF
#!/bin/sh
# perf_analyzer $VERSION with its libcudart.so.12; written by scripts/get_perf_analyzer.sh
here=\$(cd "\$(dirname "\$0")" && pwd)
LD_LIBRARY_PATH="$cudart_ref\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
export LD_LIBRARY_PATH
exec "\$here/perf_analyzer-$VERSION/perf_analyzer" "\$@"
EOF
chmod +x "$WRAPPER.tmp"
mv "$WRAPPER.tmp" "$WRAPPER"
if ! "$WRAPPER" --version >/dev/null 2>&1 && ! "$WRAPPER" --help >/dev/null 2>&1; then
  log "warning: $WRAPPER does not run; ldd says:"
  LD_LIBRARY_PATH=$CUDART_DIR ldd "$BIN" | grep 'not found' >&2 || true
  exit 1
fi
echo "$WRAPPER"
