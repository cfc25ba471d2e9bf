#!/usr/bin/env bash
# Idempotent setup of the "anchor", the reference inferd is measured against: real NVIDIA Triton
# (2.51.0, from the nvidia-pytriton==0.7.0 wheel) + NVIDIA perf_analyzer (from tritonclient==2.41.1)
# on a CPU-only Debian machine. Needs only PyPI and Debian apt; writes nothing in the repository.
# `make bench` (benchmarks/run.py) runs it first; triton.sh, bench.sh and measure.sh need it.
#
#   bash scripts/reference/setup.sh              # installs into ${TMPDIR:-/tmp}/inferd-reference (default)
#
# perf_analyzer comes from scripts/get_perf_analyzer.sh (the e2e tests' installer), pointed at
# $ANCHOR_DIR and at this venv's libcudart: $PERF_ANALYZER is the wrapper it writes.
#
# Env overrides: ANCHOR_DIR (${TMPDIR:-/tmp}/inferd-reference), TRITON_VENV ($ANCHOR_DIR/venv-triton),
#   PERF_ANALYZER ($ANCHOR_DIR/perf_analyzer), PYTHON (python3 used to create the venv;
#   pytriton 0.7.0 ships python-backend stubs for 3.8 .. 3.13).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
PYTHON=${PYTHON:-python3}
mkdir -p "$ANCHOR_DIR" "$ANCHOR_RUN_DIR"

log() { echo "[setup] $*"; }

apt_updated=0
apt_install() {
  if [ $apt_updated = 0 ]; then apt-get update -qq; apt_updated=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"
}

# --- 1. venv + pip packages -------------------------------------------------
if [ ! -x "$VPY" ]; then
  log "creating venv $TRITON_VENV with $PYTHON"
  "$PYTHON" -m venv "$TRITON_VENV"
fi
want=("nvidia-pytriton==0.7.0" "tritonclient==2.73.0" "nvidia-cuda-runtime-cu12" "geventhttpclient" "grpcio")
missing=$("$VPY" - "${want[@]}" <<'PY'
import sys, importlib.metadata as md
out = []
for spec in sys.argv[1:]:
    name, _, ver = spec.partition("==")
    try:
        have = md.version(name)
        if ver and have != ver: out.append(spec)
    except md.PackageNotFoundError:
        out.append(spec)
print(" ".join(out))
PY
)
if [ -n "$missing" ]; then
  log "pip installing (missing: $missing)"
  "$VPY" -m pip install -q "nvidia-pytriton==0.7.0" "tritonclient[all]==2.73.0" nvidia-cuda-runtime-cu12
else
  log "pip packages present: ${want[*]}"
fi

anchor_paths

# --- 2. python backend stub for this interpreter version ----------------------
stub_src=$TRITON_HOME/python_backend_stubs/$PYVER/triton_python_backend_stub
stub_dst=$TRITON_BACKENDS/python/triton_python_backend_stub
[ -f "$stub_src" ] || { echo "no python backend stub for Python $PYVER in pytriton" >&2; exit 1; }
if ! cmp -s "$stub_src" "$stub_dst"; then
  log "copying python backend stub for $PYVER"
  cp "$stub_src" "$stub_dst"; chmod +x "$stub_dst"
else
  log "python backend stub for $PYVER in place"
fi
# the stub links libpython$PYVER.so.1.0: the venv's own interpreter lib if it is shared,
# otherwise Debian's libpython$PYVER
if LD_LIBRARY_PATH=$(triton_ld_path) ldd "$stub_dst" | grep -q "not found"; then
  log "stub has unresolved libs; installing libpython$PYVER from apt"
  apt_install "libpython$PYVER" || true
  if LD_LIBRARY_PATH=$(triton_ld_path) ldd "$stub_dst" | grep "not found"; then
    echo "python backend stub still has unresolved libraries" >&2; exit 1
  fi
fi

# --- 3. perf_analyzer: scripts/get_perf_analyzer.sh -------------------------------
# (libb64 from apt, the binary out of the tritonclient 2.41.1 manylinux1 wheel, a wrapper that finds
# libcudart.so.12 in this venv's nvidia-cuda-runtime-cu12; idempotent)
pa_dir=$(dirname "$PERF_ANALYZER")
pa=$(CUDART_VENV=$TRITON_VENV bash "$REPO_ROOT/scripts/get_perf_analyzer.sh" "$pa_dir")
[ "$pa" -ef "$PERF_ANALYZER" ] || ln -sfn "$pa" "$PERF_ANALYZER"
log "perf_analyzer at $PERF_ANALYZER"

# --- 4. smoke checks ------------------------------------------------------------
LD_LIBRARY_PATH=$(pa_ld_path) "$PERF_ANALYZER" --version 2>&1 | head -1 | sed 's/^/[setup] /'
LD_LIBRARY_PATH=$(triton_ld_path) "$TRITON_BIN" --help >/dev/null 2>&1 || true
if LD_LIBRARY_PATH=$(triton_ld_path) ldd "$TRITON_BIN" | grep "not found"; then
  echo "tritonserver has unresolved libraries" >&2; exit 1
fi
"$VPY" -c "import tritonclient.http, tritonclient.grpc, numpy; print('[setup] tritonclient', __import__('importlib.metadata').metadata.version('tritonclient'), 'numpy', numpy.__version__)"
log "ok: tritonserver=$TRITON_BIN"
log "ok: perf_analyzer=$PERF_ANALYZER"
