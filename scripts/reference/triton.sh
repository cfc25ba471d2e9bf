#!/usr/bin/env bash
# Start/stop the real NVIDIA Triton (CPU only) installed by setup.sh: the reference server that
# `make bench` measures inferd against, and whose answers tests/fixtures/ records.
#
#   scripts/reference/triton.sh start [MODEL_REPO] [HTTP_PORT] [GRPC_PORT] [METRICS_PORT]
#   scripts/reference/triton.sh stop  [MODEL_REPO] [HTTP_PORT]
#   scripts/reference/triton.sh status [MODEL_REPO] [HTTP_PORT]
#   scripts/reference/triton.sh run   [MODEL_REPO] [HTTP_PORT] [GRPC_PORT] [METRICS_PORT]   (foreground, exec)
#
# Defaults: MODEL_REPO=tests/fixtures/reference_models ($REFERENCE_MODELS), ports 18000/18001/18002.
# The instance is identified by HTTP_PORT: pid file and log are
#   $ANCHOR_RUN_DIR/triton-$HTTP_PORT.pid / .log   (default $ANCHOR_DIR/run)
# start waits for GET /v2/health/ready (timeout TRITON_READY_TIMEOUT, 120 s) and prints
# the cold start time; stop sends SIGTERM to that pid only (SIGKILL after
# TRITON_STOP_TIMEOUT, 20 s) and then to any python-stub children that outlived it.
# Extra tritonserver flags: TRITON_EXTRA_ARGS (e.g. "--log-verbose=1").
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

cmd=${1:-}
REPO=${2:-$REFERENCE_MODELS}
HTTP_PORT=${3:-18000}
GRPC_PORT=${4:-18001}
METRICS_PORT=${5:-18002}
mkdir -p "$ANCHOR_RUN_DIR"
PIDFILE=$ANCHOR_RUN_DIR/triton-$HTTP_PORT.pid
KIDSFILE=$ANCHOR_RUN_DIR/triton-$HTTP_PORT.children
LOG=$ANCHOR_RUN_DIR/triton-$HTTP_PORT.log

alive() { [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; }
now_ms() { date +%s%3N; }

case "$cmd" in
run)
  anchor_paths
  REPO=$(cd "$REPO" && pwd)
  # PATH: the python backend stub's embedded interpreter finds the venv (numpy) via
  # 'python3' on PATH, as pytriton does. (The stub ignores PYTHONDONTWRITEBYTECODE, so
  # model dirs get __pycache__/.)
  # shellcheck disable=SC2086
  exec env LD_LIBRARY_PATH="$(triton_ld_path)" PATH="$TRITON_VENV/bin:$PATH" \
    "$TRITON_BIN" \
      --model-repository="$REPO" \
      --backend-directory="$TRITON_BACKENDS" \
      --http-port="$HTTP_PORT" --grpc-port="$GRPC_PORT" --metrics-port="$METRICS_PORT" \
      --allow-gpu-metrics=false --exit-timeout-secs=10 \
      ${TRITON_EXTRA_ARGS:-}
  ;;
start)
  if alive; then echo "triton already running (pid $(cat "$PIDFILE"), port $HTTP_PORT)" >&2; exit 1; fi
  if curl -s -o /dev/null --max-time 2 "http://127.0.0.1:$HTTP_PORT/v2/health/live"; then
    echo "another server already answers on port $HTTP_PORT" >&2; exit 1
  fi
  t0=$(now_ms)
  # 'run' execs tritonserver, so $! is the server's own pid
  setsid bash "${BASH_SOURCE[0]}" run "$REPO" "$HTTP_PORT" "$GRPC_PORT" "$METRICS_PORT" >"$LOG" 2>&1 </dev/null &
  pid=$!
  echo "$pid" >"$PIDFILE"
  deadline=$(( $(now_ms) + ${TRITON_READY_TIMEOUT:-120} * 1000 ))
  while :; do
    code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$HTTP_PORT/v2/health/ready" || true)
    [ "$code" = 200 ] && kill -0 "$pid" 2>/dev/null && break
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "tritonserver exited during startup; log tail ($LOG):" >&2; tail -30 "$LOG" >&2; rm -f "$PIDFILE"; exit 1
    fi
    if [ "$(now_ms)" -gt "$deadline" ]; then
      echo "tritonserver not ready after ${TRITON_READY_TIMEOUT:-120}s; log: $LOG" >&2; exit 1
    fi
    sleep 0.05
  done
  t1=$(now_ms)
  pgrep -P "$pid" >"$KIDSFILE" || true   # python backend stubs (by parent pid)
  echo "triton ready: pid=$pid http=$HTTP_PORT grpc=$GRPC_PORT metrics=$METRICS_PORT repo=$(cd "$REPO" && pwd) cold_start_ms=$((t1 - t0)) log=$LOG"
  ;;
stop)
  if ! alive; then echo "triton on port $HTTP_PORT not running"; rm -f "$PIDFILE"; exit 0; fi
  pid=$(cat "$PIDFILE")
  kids=$( { pgrep -P "$pid" || true; cat "$KIDSFILE" 2>/dev/null || true; } | sort -u)
  kill -TERM "$pid"
  for _ in $(seq 1 $(( ${TRITON_STOP_TIMEOUT:-20} * 10 ))); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then echo "pid $pid still alive, SIGKILL" >&2; kill -KILL "$pid" || true; fi
  sleep 0.5
  for k in $kids; do
    # only stubs we recorded as children of our server
    if kill -0 "$k" 2>/dev/null && grep -q triton_python_backend_stub "/proc/$k/cmdline" 2>/dev/null; then
      kill -KILL "$k" 2>/dev/null || true
    fi
  done
  rm -f "$PIDFILE" "$KIDSFILE"
  echo "triton on port $HTTP_PORT stopped (pid $pid)"
  ;;
status)
  if alive; then echo "running pid=$(cat "$PIDFILE") log=$LOG"; else echo "not running"; exit 1; fi
  ;;
*)
  sed -n '2,16p' "$0"; exit 2 ;;
esac
