#!/usr/bin/env bash
# One-time set-up for run.sh (idempotent): Triton's own QA files and what their clients need, in a
# work folder outside the repository.
#
#   bash scripts/triton_qa/setup.sh SERVER_REPO PYTHON_BACKEND_REPO
#
# SERVER_REPO          a git repository (clone or bare mirror) of triton-inference-server/server
#                      (or TRITON_SERVER_REPO); the QA tree is taken at TRITON_QA_TAG (v2.51.0)
# PYTHON_BACKEND_REPO  the same for triton-inference-server/python_backend (or TRITON_PYTHON_BACKEND_REPO);
#                      its examples at TRITON_PB_REF (r24.10, Triton 2.51's release branch)
# TRITON_QA_DIR        the work folder (default ${TMPDIR:-/tmp}/inferd-triton-qa)
#
# The reference server itself comes from scripts/reference/setup.sh (run it first to compare).
set -eu
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$HERE/lib/paths.sh"
SERVER_REPO=${1:-${TRITON_SERVER_REPO:-}}
PB_REPO=${2:-${TRITON_PYTHON_BACKEND_REPO:-}}
TAG=${TRITON_QA_TAG:-v2.51.0}
PB_REF=${TRITON_PB_REF:-r24.10}
[ -n "$SERVER_REPO" ] && [ -n "$PB_REPO" ] || {
  echo "usage: setup.sh SERVER_REPO PYTHON_BACKEND_REPO (git clones or mirrors of Triton's server and python_backend)" >&2
  exit 2
}
mkdir -p "$QA_DIR/src"

# 1. Triton's QA tree at the tag (only what the suites read; the docs' example configs for the
#    stand-in models of L0_http, L0_grpc and L0_shared_memory)
#    Per folder, so that a work folder set up for slice 1 gains the slice-2 folders (L0_model_update ...)
for p in qa/L0_backend_python qa/L0_http qa/L0_grpc qa/L0_input_validation qa/L0_parameters \
         qa/L0_shared_memory qa/common qa/python_models docs/examples/model_repository \
         qa/L0_model_update qa/L0_metrics qa/L0_nan_inf qa/L0_optional_input qa/L0_model_namespacing \
         qa/L0_string_io; do
  [ -d "$QA_DIR/src/$p" ] || git -C "$SERVER_REPO" archive "$TAG" "$p" | tar -x -C "$QA_DIR/src"
done
echo "$TAG $(git -C "$SERVER_REPO" rev-parse "$TAG^{commit}")" >"$QA_DIR/src/QA_VERSION"
# 2. python_backend's examples (decoupled/square_model.py is the QA's square_int32)
if [ ! -d "$QA_DIR/src/python_backend/examples" ]; then
  mkdir -p "$QA_DIR/src/python_backend"
  git -C "$PB_REPO" archive "$PB_REF" examples | tar -x -C "$QA_DIR/src/python_backend"
fi
# 3. the clients' extras (the tests' PYTHONPATH): sseclient-py, psutil, setuptools<81 (pkg_resources for
#    tritonclient.utils.shared_memory), and tritonclient at the QA tree's own release
PY=$REPO_ROOT/.venv/bin/python
[ -d "$QA_DIR/pydeps/sseclient" ] || $PY -m pip install -q --target "$QA_DIR/pydeps" sseclient-py psutil "setuptools<81"
[ -d "$QA_DIR/pyclient/tritonclient" ] || \
  $PY -m pip install -q --no-deps --target "$QA_DIR/pyclient" "tritonclient[all]==${TAG#v}"
# 4. the reference's Python stub needs torch (pytorch_fp32_fp32, identity_bf16, the DLPack models) and
#    requests (custom_metrics): linked from the repository's .venv, read-only, into refdeps, and a venv
#    of the reference's base python whose .pth adds its site-packages and refdeps (run.sh puts it first
#    on PATH: the stub's embedded interpreter takes its sys.path from the python3 found there)
if [ -x "$TRITON_VENV/bin/python" ]; then
  site=$($PY -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  mkdir -p "$QA_DIR/refdeps"
  for p in torch torchgen functorch sympy mpmath networkx jinja2 markupsafe filelock fsspec requests \
           charset_normalizer; do
    ln -sfn "$site/$p" "$QA_DIR/refdeps/$p"
  done
  if [ ! -x "$QA_DIR/venv-refstub/bin/python3" ]; then
    base=$(sed -n 's/^home = //p' "$TRITON_VENV/pyvenv.cfg")
    "$base/python3" -m venv --without-pip "$QA_DIR/venv-refstub"
  fi
  # The stub's embedded interpreter ignores PYTHONDONTWRITEBYTECODE, which L0_model_update's test.sh
  # sets: a __pycache__ the stub writes into a model's folder makes the reference see the model's
  # files changed, and reload it whole where the test expects an instance update. The .pth honours it.
  tsite=$("$TRITON_VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  ssite=$("$QA_DIR/venv-refstub/bin/python3" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  printf 'import site; site.addsitedir("%s"); site.addsitedir("%s/refdeps")\n' "$tsite" "$QA_DIR" \
    >"$ssite/qa_harness.pth"
  printf 'import os, sys; sys.dont_write_bytecode = sys.dont_write_bytecode or bool(os.environ.get("PYTHONDONTWRITEBYTECODE"))\n' \
    >>"$ssite/qa_harness.pth"
  "$QA_DIR/venv-refstub/bin/python3" -c "import numpy, torch, requests; print('reference stub env: numpy', numpy.__version__, 'torch', torch.__version__)"
else
  echo "no reference install at $TRITON_VENV (scripts/reference/setup.sh): only 'run.sh inferd' will work" >&2
fi
echo "QA files in $QA_DIR/src ($(cat "$QA_DIR/src/QA_VERSION"))"
