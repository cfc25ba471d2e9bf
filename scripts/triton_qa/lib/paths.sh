# Sourced by setup.sh, run.sh and lib/server.sh: where things are.
#   QA_DIR     the work folder outside the repository (TRITON_QA_DIR, default ${TMPDIR:-/tmp}/inferd-triton-qa):
#              src/ (Triton's qa tree and python_backend examples), pydeps/, pyclient/, venv-refstub/,
#              work/<server>/ (the suites' model repositories), results/<server>/, inferd-snap/
#   REPO_ROOT  this repository (its .venv runs inferd and the clients)
#   the reference install's paths come from scripts/reference/common.sh (TRITON_VENV, anchor_paths)
QA_LIB=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
QA_DIR=${TRITON_QA_DIR:-${TMPDIR:-/tmp}/inferd-triton-qa}
source "$QA_LIB/../../reference/common.sh"
