#!/usr/bin/env bash
# Cold start, memory and single-request client latency of a KServe-v2 server.
#
#   scripts/reference/measure.sh [HTTP_PORT] [GRPC_PORT] [RUNS] [OUTFILE]
#     defaults: 18020 18021 3 $ANCHOR_DIR/results/measure-<time>.txt
# `make bench` (benchmarks/run.py) runs it for inferd and for the reference.
#
# START_CMD: command that runs the server in the FOREGROUND serving tests/fixtures/reference_models on
#   HTTP_PORT/GRPC_PORT (it is started with setsid in the background, and stopped with
#   SIGTERM to its own pid). Default: real Triton via "triton.sh run" (metrics on HTTP_PORT+2).
#   For another server, e.g.:
#   START_CMD="python -m myserver --model-repository tests/fixtures/reference_models --http-port 18020 --grpc-port 18021"
#
# Per run: cold start = time from fork to first 200 on GET /v2/health/ready. After the last
# run's start: RSS and PSS summed over the server pid and all its descendants (idle, 2 s
# after ready), then client_latency.py (tritonclient loop of 2000 tiny add_sub requests),
# then RSS/PSS again.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
HTTP_PORT=${1:-18020}
GRPC_PORT=${2:-18021}
RUNS=${3:-3}
OUT=${4:-$ANCHOR_DIR/results/measure-$(date +%Y%m%d-%H%M%S).txt}
N=${LATENCY_N:-2000}
START_CMD=${START_CMD:-bash $ANCHORS_SRC/triton.sh run $REFERENCE_MODELS $HTTP_PORT $GRPC_PORT $((HTTP_PORT + 2))}
mkdir -p "$(dirname "$OUT")" "$ANCHOR_RUN_DIR"
PYBIN=python3; [ -x "$VPY" ] && PYBIN=$VPY
now_ms() { date +%s%3N; }

descendants() {  # pid and all descendants, by parent pid
  local p=$1; echo "$p"
  for c in $(pgrep -P "$p"); do descendants "$c"; done
}
mem_kb() {  # "rss_kb pss_kb nprocs" summed over the tree
  local rss=0 pss=0 n=0 r s
  for p in $(descendants "$1"); do
    r=$(awk '/^VmRSS:/{print $2}' "/proc/$p/status" 2>/dev/null)
    [ -n "$r" ] || continue   # zombies / vanished pids have no VmRSS
    s=$(awk '/^Pss:/{print $2}' "/proc/$p/smaps_rollup" 2>/dev/null)
    rss=$((rss + r)); pss=$((pss + ${s:-0})); n=$((n + 1))
  done
  echo "$rss $pss $n"
}
stop_tree() {
  local pid=$1 kids
  kids=$(descendants "$pid" | tail -n +2)
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq 1 200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
  sleep 0.5
  for k in $kids; do kill -0 "$k" 2>/dev/null && kill -KILL "$k" 2>/dev/null; done
  wait "$pid" 2>/dev/null
}

if curl -s -o /dev/null --max-time 2 "http://127.0.0.1:$HTTP_PORT/v2/health/live"; then
  echo "something already answers on port $HTTP_PORT; refusing to measure" >&2; exit 1
fi
{
cur_pid=""   # the block below runs in a subshell (| tee): its own EXIT trap stops the server
trap '[ -n "$cur_pid" ] && stop_tree "$cur_pid"' EXIT
echo "# measure.sh $(date -u +%Y-%m-%dT%H:%M:%SZ) nproc=$(nproc) loadavg=$(cut -d' ' -f1-3 /proc/loadavg)"
echo "# START_CMD: $START_CMD"
cold=()
for i in $(seq 1 "$RUNS"); do
  log=$ANCHOR_RUN_DIR/measure-$HTTP_PORT-run$i.log
  t0=$(now_ms)
  # shellcheck disable=SC2086
  setsid $START_CMD >"$log" 2>&1 </dev/null &
  pid=$!; cur_pid=$pid
  ok=0
  while [ $(( $(now_ms) - t0 )) -lt 180000 ]; do
    if [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$HTTP_PORT/v2/health/ready")" = 200 ]; then ok=1; break; fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.02
  done
  t1=$(now_ms)
  kill -0 "$pid" 2>/dev/null || ok=0   # ready answer must come from the process we started
  if [ $ok != 1 ]; then echo "run $i: server not ready (log $log)"; tail -5 "$log"; stop_tree "$pid"; exit 1; fi
  cold+=($((t1 - t0)))
  echo "cold_start run $i: $((t1 - t0)) ms"
  if [ "$i" = "$RUNS" ]; then
    sleep 2
    read -r rss pss np < <(mem_kb "$pid")
    echo "memory after load (idle): rss_sum=$((rss / 1024)) MiB pss_sum=$((pss / 1024)) MiB over $np processes (server pid $pid + descendants)"
    for p in $(descendants "$pid"); do
      r=$(awk '/^VmRSS:/{print $2}' "/proc/$p/status" 2>/dev/null); [ -n "$r" ] || continue
      printf '    pid %-7s rss %6s MiB  %s\n' "$p" "$((r / 1024))" "$(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | cut -c1-110)"
    done
    "$PYBIN" "$ANCHORS_SRC/client_latency.py" --http "localhost:$HTTP_PORT" --grpc "localhost:$GRPC_PORT" -n "$N"
    read -r rss pss np < <(mem_kb "$pid")
    echo "memory after latency loops: rss_sum=$((rss / 1024)) MiB pss_sum=$((pss / 1024)) MiB over $np processes"
  fi
  stop_tree "$pid"; cur_pid=""
  for _ in $(seq 1 100); do curl -s -o /dev/null --max-time 1 "http://127.0.0.1:$HTTP_PORT/v2/health/live" || break; sleep 0.1; done
done
sorted=$(printf '%s\n' "${cold[@]}" | sort -n | tr '\n' ' ')
echo "cold_start_ms all runs (sorted): $sorted median: $(printf '%s\n' "${cold[@]}" | sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}')"
echo "# loadavg at end: $(cut -d' ' -f1-3 /proc/loadavg)"
} 2>&1 | tee "$OUT"
echo "written: $OUT"
