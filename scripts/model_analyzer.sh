#!/usr/bin/env bash
# Profile CPU models served by inferd with NVIDIA's Triton Model Analyzer in its remote launch mode
# (issue 11). Everything it writes lives outside the repository, under MA_DIR
# (default ${TMPDIR:-/tmp}/inferd-model-analyzer):
#
#   venv/       triton-model-analyzer (MA_VERSION, 1.58.0) in a venv of its own (about 600 MB: it
#               pulls tritonclient[all], matplotlib, numba, optuna; nothing of it needs a GPU)
#   models/     the repository inferd serves: add_sub (the reference's Python model) and tiny_mlp
#               (ONNX Runtime, no config.pbtxt: its config is completed from the graph)
#   ma.yaml     Model Analyzer's configuration (written here: the ports are picked at run time)
#   export/     Model Analyzer's results: results/*.csv, reports/summaries/<model>/result_summary.html,
#               reports/detailed/<config>/detailed_report.html, perf_analyzer_error.log
#   inferd.log  the server's log; profile.log, report.log: Model Analyzer's output
#
#   bash scripts/model_analyzer.sh   # about 4 minutes on 2 shared cores, plus 1.5 for the first install
#
# inferd runs in explicit mode with no model loaded; Model Analyzer loads each candidate config of
# its search through the repository API with a config override (gRPC RepositoryModelLoad, or
# HTTP), waits for it to be ready, sweeps perf_analyzer's concurrency over it, then writes its
# summary and detailed reports. perf_analyzer comes from scripts/get_perf_analyzer.sh (.tools/).
# Env: MA_DIR, MA_VENV ($MA_DIR/venv), MA_VERSION, CLIENT_PROTOCOL (grpc; or http), PYTHON
# (python3: makes the venv), INFERD (.venv/bin/inferd), MODELS ("add_sub tiny_mlp"),
# MAX_CONCURRENCY (4), MAX_INSTANCES (2), MAX_BATCH (1).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MA_DIR=${MA_DIR:-${TMPDIR:-/tmp}/inferd-model-analyzer}
MA_VERSION=${MA_VERSION:-1.58.0}
PYTHON=${PYTHON:-python3}
INFERD=${INFERD:-$ROOT/.venv/bin/inferd}
MODELS=${MODELS:-add_sub tiny_mlp}
MAX_CONCURRENCY=${MAX_CONCURRENCY:-4}
MAX_INSTANCES=${MAX_INSTANCES:-2}
MAX_BATCH=${MAX_BATCH:-1}
VENV=${MA_VENV:-$MA_DIR/venv}
CLIENT_PROTOCOL=${CLIENT_PROTOCOL:-grpc}

log() { echo "[model_analyzer] $*" >&2; }
mkdir -p "$MA_DIR"

# -- Model Analyzer, in its own venv ------------------------------------------------------------
if ! "$VENV/bin/model-analyzer" --version 2>/dev/null | grep -q "$MA_VERSION"; then
  log "installing triton-model-analyzer==$MA_VERSION into $VENV"
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip
  "$VENV/bin/pip" install -q "triton-model-analyzer==$MA_VERSION"
fi
PA=$(bash "$ROOT/scripts/get_perf_analyzer.sh")

# -- the model repository ------------------------------------------------------------------------
rm -rf "$MA_DIR/models" "$MA_DIR/export" "$MA_DIR/checkpoints" "$MA_DIR/output_repo"
mkdir -p "$MA_DIR/models" "$MA_DIR/export"
for m in $MODELS; do
  if [ -d "$ROOT/tests/fixtures/reference_models/$m" ]; then
    cp -r "$ROOT/tests/fixtures/reference_models/$m" "$MA_DIR/models/"
  else
    "$ROOT/.venv/bin/python" "$ROOT/examples/build_models.py" "$MA_DIR/models" --only "$m" >/dev/null
  fi
done

# -- inferd, explicit mode, free ports ------------------------------------------------------------
read -r HTTP GRPC METRICS < <("$PYTHON" - <<'PY'
import socket
socks = [socket.socket() for _ in range(3)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))
PY
)
"$INFERD" serve --model-repository "$MA_DIR/models" --model-control-mode explicit \
  --http-port "$HTTP" --grpc-port "$GRPC" --metrics-port "$METRICS" --metrics-interval-ms 1000 \
  --http-address 127.0.0.1 --grpc-address 127.0.0.1 --metrics-address 127.0.0.1 \
  >"$MA_DIR/inferd.log" 2>&1 &
INFERD_PID=$!
trap 'kill "$INFERD_PID" 2>/dev/null || true; wait "$INFERD_PID" 2>/dev/null || true' EXIT
for _ in $(seq 100); do
  curl -sf "localhost:$HTTP/v2/health/ready" >/dev/null && break
  kill -0 "$INFERD_PID" 2>/dev/null || { cat "$MA_DIR/inferd.log" >&2; exit 1; }
  sleep 0.2
done
log "inferd (pid $INFERD_PID) on HTTP $HTTP, gRPC $GRPC, metrics $METRICS"

# -- Model Analyzer's configuration ------------------------------------------------------------------
{
  cat <<EOF
triton_launch_mode: remote
triton_http_endpoint: localhost:$HTTP
triton_grpc_endpoint: localhost:$GRPC
triton_metrics_url: http://localhost:$METRICS/metrics
client_protocol: $CLIENT_PROTOCOL
perf_analyzer_path: $PA
output_model_repository_path: $MA_DIR/output_repo
override_output_model_repository: true
export_path: $MA_DIR/export
checkpoint_directory: $MA_DIR/checkpoints
run_config_search_max_concurrency: $MAX_CONCURRENCY
run_config_search_max_instance_count: $MAX_INSTANCES
run_config_search_max_model_batch_size: $MAX_BATCH
perf_analyzer_max_auto_adjusts: 3
perf_analyzer_flags:
  measurement-interval: 1000
  stability-percentage: 50
profile_models:
EOF
  for m in $MODELS; do
    printf '  %s:\n    cpu_only: true\n' "$m"
  done
} >"$MA_DIR/ma.yaml"

cd "$MA_DIR"   # perf_analyzer writes its CSV into the working directory
log "model-analyzer profile -f $MA_DIR/ma.yaml"
"$VENV/bin/model-analyzer" profile -f "$MA_DIR/ma.yaml" 2>&1 | tee "$MA_DIR/profile.log"

# `model-analyzer report`: a detailed report of each model's default config (one model a call: MA
# refuses detailed reports of several models at once); profile already wrote those of the best ones
: >"$MA_DIR/report.log"
for m in $MODELS; do
  log "model-analyzer report --report-model-configs ${m}_config_default"
  "$VENV/bin/model-analyzer" report --report-model-configs "${m}_config_default" \
    --export-path "$MA_DIR/export" --checkpoint-directory "$MA_DIR/checkpoints" 2>&1 | tee -a "$MA_DIR/report.log"
done

log "results: $MA_DIR/export/results/metrics-model-inference.csv"
log "summaries: $(ls "$MA_DIR"/export/reports/summaries/*/result_summary.* | tr '\n' ' ')"
