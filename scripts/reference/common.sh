# Sourced by the reference ("anchor") scripts beside it: setup.sh, triton.sh, bench.sh, measure.sh.
# Computes the paths of the real-Triton anchor install, and where the repository keeps the models
# both servers must load (tests/fixtures/reference_models; REFERENCE_MODELS overrides it).
# The install lives under $ANCHOR_DIR (default $TMPDIR or /tmp, then inferd-reference), outside the
# repository; override with env vars.
ANCHOR_DIR=${ANCHOR_DIR:-${TMPDIR:-/tmp}/inferd-reference}
TRITON_VENV=${TRITON_VENV:-$ANCHOR_DIR/venv-triton}
PERF_ANALYZER=${PERF_ANALYZER:-$ANCHOR_DIR/perf_analyzer}
ANCHOR_RUN_DIR=${ANCHOR_RUN_DIR:-$ANCHOR_DIR/run}
ANCHORS_SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$ANCHORS_SRC/../.." && pwd)
REFERENCE_MODELS=${REFERENCE_MODELS:-$REPO_ROOT/tests/fixtures/reference_models}
VPY=$TRITON_VENV/bin/python

anchor_paths() {
  # sets SITE, PYVER, PYLIBDIR, TRITON_HOME, TRITON_BIN, TRITON_BACKENDS, TRITON_LIBS, CUDART_LIB
  [ -x "$VPY" ] || { echo "no venv at $TRITON_VENV (run setup.sh)" >&2; return 1; }
  read -r SITE PYVER PYLIBDIR < <("$VPY" - <<'PY'
import sysconfig, sys
print(sysconfig.get_paths()["purelib"], f"{sys.version_info[0]}.{sys.version_info[1]}", sysconfig.get_config_var("LIBDIR") or "")
PY
)
  TRITON_HOME=$SITE/pytriton/tritonserver
  TRITON_BIN=$TRITON_HOME/bin/tritonserver
  TRITON_BACKENDS=$TRITON_HOME/backends
  TRITON_LIBS=$SITE/nvidia_pytriton.libs
  CUDART_LIB=$SITE/nvidia/cuda_runtime/lib
}

# LD_LIBRARY_PATH for tritonserver + python backend stub: bundled libs, and the
# venv interpreter's libpython (the stub links libpython3.X.so.1.0).
triton_ld_path() {
  local p=$TRITON_LIBS
  if [ -n "$PYLIBDIR" ] && [ -e "$PYLIBDIR/libpython$PYVER.so.1.0" ]; then p=$p:$PYLIBDIR; fi
  echo "$p${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}

# LD_LIBRARY_PATH for perf_analyzer (needs libcudart.so.12 and libb64.so.0d from apt)
pa_ld_path() {
  echo "$CUDART_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}
