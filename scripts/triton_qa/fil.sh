#!/usr/bin/env bash
# The FIL backend's own QA file (qa/L0_e2e/test_model.py of triton-inference-server/fil_backend)
# against inferd, on CPU as its run_tests.sh runs it with CPU_ONLY=1: the QA's models built by its
# own generator, inferd started on them with no flag beyond the ports, the file under pytest.
#
#   bash scripts/triton_qa/fil.sh FIL_BACKEND_REPO RAPIDS_TRITON_REPO
#
# FIL_BACKEND_REPO    a git clone or mirror of triton-inference-server/fil_backend (or
#                     TRITON_FIL_BACKEND_REPO): qa/ and scripts/ at FIL_QA_REF (default main). Its
#                     r24.10 QA (the reference's release) cannot run with this venv: its generator
#                     writes XGBoost's legacy binary, which XGBoost 3 no longer writes, and the file
#                     calls np.product, gone in numpy 2; main's writes xgboost_ubj and reads both
#                     output_class and is_classifier configs as inferd does.
# RAPIDS_TRITON_REPO  the same for rapidsai/rapids-triton (or TRITON_RAPIDS_TRITON_REPO): the QA's
#                     client, python/rapids_triton (pure Python over tritonclient), at its HEAD.
# FIL_QA_PROFILE      the Hypothesis profile (default ci: 100 examples a case, as run_tests.sh; dev: 10)
# INFERD_SRC=live     this checkout's working tree; default: a snapshot of its committed HEAD (as run.sh)
# FIL_QA_RETRAIN=1    build the models again (else those of an earlier run of the same commit are kept)
#
# What runs as upstream and what does not:
# - models: the QA's generate_example_models.sh, as it is but for the `cuml` model's lines (cuML's
#   forests and convert_cuml.py need a GPU), with xgboost, lightgbm, scikit-learn and treelite from
#   the venv and a stand-in for cuML's data-set generators (lib/fil_standins/cuml: scikit-learn's,
#   with pandas for the cuDF frames of the categorical LightGBM model). Nothing is downloaded.
# - the `cuml` model's cases are deselected (-k "not cuml"): 2 of the file's 16.
# - pass 1 is the file as it is (its xgboost_shap cases xfail by the file's own hand: "flaky" on GPU);
#   pass 2 runs those cases with the two xfail lines cut: their SHAP values against XGBoost's
#   pred_contribs with the file's tolerances.
# The server listens on 8000-8002 (the QA's client hard-codes 8001), as run.sh's servers do.
# Results: $QA_DIR/results/fil/ (pass1.xml, pass2.xml, *.out, server.log, repository index, summary).
set -u
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib/paths.sh"
FIL_REPO=${1:-${TRITON_FIL_BACKEND_REPO:-}}
RT_REPO=${2:-${TRITON_RAPIDS_TRITON_REPO:-}}
REF=${FIL_QA_REF:-main}
PROFILE=${FIL_QA_PROFILE:-ci}
[ -n "$FIL_REPO" ] && [ -n "$RT_REPO" ] || {
  echo "usage: fil.sh FIL_BACKEND_REPO RAPIDS_TRITON_REPO (git clones or mirrors)" >&2
  exit 2
}
PY=$REPO_ROOT/.venv/bin/python
BASE=$QA_DIR/fil
SRC=$BASE/src
RES=$QA_DIR/results/fil
commit=$(git -C "$FIL_REPO" rev-parse "$REF^{commit}") || exit 2
rm -rf "$RES"
mkdir -p "$BASE/pyclient" "$RES"

# 1. the QA at REF (kept with its models from an earlier run of the same commit unless
#    FIL_QA_RETRAIN=1: building them takes minutes), the rapids_triton client
if [ "$(cat "$SRC/COMMIT" 2>/dev/null)" != "$commit" ] || [ -n "${FIL_QA_RETRAIN:-}" ]; then
  rm -rf "$SRC" && mkdir -p "$SRC"
  git -C "$FIL_REPO" archive "$commit" qa scripts | tar -x -C "$SRC" || exit 2
  echo "$commit" >"$SRC/COMMIT"
fi
echo "fil_backend $REF $commit" >"$RES/VERSION"
rm -rf "$BASE/pyclient/rapids_triton"
git -C "$RT_REPO" archive HEAD python/rapids_triton | tar -x -C "$BASE/pyclient" --strip-components=1 || exit 2
echo "rapids-triton HEAD $(git -C "$RT_REPO" rev-parse HEAD)" >>"$RES/VERSION"

# 2. the models, by the QA's generator (stderr kept: XGBoost warns it trains on the CPU)
gen=$SRC/qa/generate_example_models.cpu.sh
sed '/^name=cuml$/,/^\$CUML_CONVERTER /d' "$SRC/qa/generate_example_models.sh" >"$gen"
t0=$(date +%s)
PATH="$REPO_ROOT/.venv/bin:$PATH" PYTHONPATH="$QA_LIB/fil_standins" bash "$gen" >"$RES/generate.out" 2>&1 || {
  echo "model generation failed (tail of $RES/generate.out):" >&2; tail -20 "$RES/generate.out" >&2; exit 1
}
REPO=$SRC/qa/L0_e2e/cpu_model_repository
echo "models built in $(( $(date +%s) - t0 )) s: $(ls "$REPO" | tr '\n' ' ')" | tee -a "$RES/VERSION" >&2

# 3. inferd on them, default flags
export SERVER_KIND=inferd
source "$QA_LIB/server.sh"
if [ "${INFERD_SRC:-head}" = live ]; then
  export INFERD_SNAP=$REPO_ROOT/src   # this checkout's, whichever the venv's editable install is
  echo "inferd: live working tree $(git -C "$REPO_ROOT" rev-parse HEAD) + $(git -C "$REPO_ROOT" status --short | wc -l) changed file(s)" >>"$RES/VERSION"
else
  sha=$(git -C "$REPO_ROOT" rev-parse HEAD)
  snap=$QA_DIR/inferd-snap/$sha
  [ -d "$snap/src/inferd" ] || { mkdir -p "$snap" && git -C "$REPO_ROOT" archive "$sha" src | tar -x -C "$snap"; }
  export INFERD_SNAP=$snap/src
  echo "inferd: snapshot of HEAD $sha" >>"$RES/VERSION"
fi
trap 'stop_server' EXIT INT TERM
start_server "$RES/server.log" "$REPO"
started=$?
curl -s -X POST localhost:8000/v2/repository/index -d '{}' >"$RES/index.json"
echo "start with default flags: $([ $started = 0 ] && echo ready || echo NOT READY)" | tee -a "$RES/VERSION" >&2
"$PY" -c 'import json, sys
for m in json.load(open(sys.argv[1])):
    print("  " + m["name"] + ": " + m["state"] + " " + m.get("reason", ""))' "$RES/index.json" | tee -a "$RES/VERSION" >&2

# 4. the file (pass 1), then the SHAP cases with their xfail lifted (pass 2)
E2E=$SRC/qa/L0_e2e
"$PY" - "$E2E" <<'PY' || exit 1
import sys
from pathlib import Path
e2e = Path(sys.argv[1])
text = (e2e / "test_model.py").read_text()
lifted = (
    '    if name == "xgboost_shap":\n'
    "        # TODO(hcho3): Re-enable xgboost_shap once test is fixed\n"
    '        pytest.xfail("xgboost_shap test flaky")\n'
)
if lifted not in text:
    sys.exit("test_model.py no longer xfails xgboost_shap as fil.sh expects: pass 2 needs a look")
(e2e / "test_model_shap.py").write_text(text.replace(lifted, ""))
PY
run_pass() {  # ID FILE K-EXPR
  ( cd "$E2E" && CPU_ONLY=1 PYTHONPATH="$BASE/pyclient" timeout -k 20 "${T_FILE:-5400}" "$PY" -m pytest "$2" \
      -p no:cacheprovider -rA --repo "$REPO" --hypothesis-profile "$PROFILE" -k "$3" \
      --junitxml="$RES/$1.xml" ) >"$RES/$1.out" 2>&1
  echo "[harness] $1 rc=$? $(grep -E '^=+ .*(passed|failed|error)' "$RES/$1.out" | tail -1)" >&2
}
run_pass pass1 test_model.py "not cuml"
run_pass pass2 test_model_shap.py "xgboost_shap"
stop_server
"$PY" - "$RES" <<'PY' | tee "$RES/summary.txt"
import sys, xml.etree.ElementTree as ET
from pathlib import Path
res = Path(sys.argv[1])
for p in ("pass1", "pass2"):
    counts = {"passed": 0, "failed": 0, "skipped": 0, "xfailed": 0}
    rows = []
    for case in ET.parse(res / f"{p}.xml").iter("testcase"):
        kids = {k.tag: k for k in case}
        if "failure" in kids or "error" in kids:
            outcome = "failed"
        elif "skipped" in kids:
            outcome = "xfailed" if kids["skipped"].get("type") == "pytest.xfail" else "skipped"
        else:
            outcome = "passed"
        counts[outcome] += 1
        rows.append(f"  {outcome:8} {case.get('name')} {case.get('time')} s")
    print(f"{p}: " + ", ".join(f"{v} {k}" for k, v in counts.items()))
    print("\n".join(rows))
PY
