#!/usr/bin/env bash
# Fixed perf_analyzer matrix against any KServe-v2 / Triton-compatible server that serves
# tests/fixtures/reference_models (add_sub, identity_fp32, batched_sleep, ensemble_add_sub); what
# `make bench` (benchmarks/run.py) runs against inferd and against the reference, in turn.
#
#   scripts/reference/bench.sh [URL_HTTP] [URL_GRPC] [OUTFILE]
#     URL_HTTP  host:port of the HTTP endpoint  (default localhost:18000)
#     URL_GRPC  host:port of the gRPC endpoint  (default localhost:18001)
#     OUTFILE   CSV to write (default $ANCHOR_DIR/results/bench-<time>.csv); a .txt with the
#               table and a folder OUTFILE.raw/ with every perf_analyzer output go beside it.
#
# Each scenario: perf_analyzer -s BENCH_STABILITY -r BENCH_MAX_TRIALS; if that finds no 3
# consecutive windows within the stability band, it is re-run once with -s 100 -r 4 and the row
# is marked "loose" (throughput/latency of 3 windows within 2x of each other). The CSV column
# spread_pct = (max/min - 1) of throughput over the 3 reported windows: a noise indicator.
# Env knobs: BENCH_STABILITY (stability %, 25), BENCH_MAX_TRIALS (6), BENCH_SCALE (multiplies
#   every window's request count, 1.0), BENCH_ONLY (regex on scenario ids),
#   PA_CPUSET (e.g. "1": run perf_analyzer under taskset -c), PA_TIMEOUT (s per run, 90).
# perf_analyzer needs these server endpoints besides infer: GET /v2/models/M (metadata),
#   GET /v2/models/M/config, GET /v2/models/M/stats (gRPC: ModelMetadata/ModelConfig/ModelStatistics).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
anchor_paths || exit 1

URL_HTTP=${1:-localhost:18000}; URL_HTTP=${URL_HTTP#http://}
URL_GRPC=${2:-localhost:18001}; URL_GRPC=${URL_GRPC#grpc://}
OUT=${3:-$ANCHOR_DIR/results/bench-$(date +%Y%m%d-%H%M%S).csv}
STAB=${BENCH_STABILITY:-25}
TRIALS=${BENCH_MAX_TRIALS:-6}
SCALE=${BENCH_SCALE:-1.0}
ONLY=${BENCH_ONLY:-.}
PA_TIMEOUT=${PA_TIMEOUT:-90}
mkdir -p "$(dirname "$OUT")"
RAW=$OUT.raw; rm -rf "$RAW"; mkdir -p "$RAW"
[ -x "$PERF_ANALYZER" ] || { echo "perf_analyzer not found at $PERF_ANALYZER (run setup.sh)" >&2; exit 1; }
PA=("$PERF_ANALYZER")
[ -n "${PA_CPUSET:-}" ] && PA=(taskset -c "$PA_CPUSET" "$PERF_ANALYZER")

# id | model | protocol | concurrency | requests per window | extra perf_analyzer args
SCENARIOS=(
  "add_sub_http_c1|add_sub|http|1|2000|"
  "add_sub_http_c8|add_sub|http|8|4000|"
  "add_sub_http_c32|add_sub|http|32|4000|"
  "add_sub_grpc_c1|add_sub|grpc|1|2000|"
  "add_sub_grpc_c8|add_sub|grpc|8|4000|"
  "add_sub_grpc_c32|add_sub|grpc|32|4000|"
  "identity_fp32_1MiB_http_c4|identity_fp32|http|4|300|--shape INPUT0:262144"
  "batched_sleep_http_c1|batched_sleep|http|1|500|"
  "batched_sleep_http_c32|batched_sleep|http|32|3000|"
  "ensemble_add_sub_http_c8|ensemble_add_sub|http|8|2000|"
)

NOTE="NOTE: perf_analyzer runs on the same 2-core machine as the server and competes with it for CPU; numbers are client+server on 2 shared cores${PA_CPUSET:+ (perf_analyzer pinned to cpu $PA_CPUSET)}."
server_meta=$(curl -s --max-time 5 "http://$URL_HTTP/v2" || echo '{}')
{
  echo "# bench.sh $(date -u +%Y-%m-%dT%H:%M:%SZ) http=$URL_HTTP grpc=$URL_GRPC"
  echo "# server: $server_meta"
  echo "# perf_analyzer: $(LD_LIBRARY_PATH=$(pa_ld_path) "$PERF_ANALYZER" --version 2>&1 | head -1); nproc=$(nproc); loadavg at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "# settings: --measurement-mode count_windows, -s $STAB -r $TRIALS (fallback -s 100 -r 4 = "loose"), sync mode, -b 1, binary tensors over HTTP, scale=$SCALE"
  echo "# $NOTE"
} | tee "$RAW/header.txt"

t_start=$(date +%s)
for s in "${SCENARIOS[@]}"; do
  IFS='|' read -r id model proto conc count extra <<<"$s"
  [[ "$id" =~ $ONLY ]] || continue
  n=$(awk -v c="$count" -v f="$SCALE" 'BEGIN{n=int(c*f); if(n<50)n=50; print n}')
  url=$URL_HTTP; [ "$proto" = grpc ] && url=$URL_GRPC
  status=stable
  for attempt in 1 2; do
    if [ $attempt = 1 ]; then sp=$STAB; tr=$TRIALS; else sp=100; tr=4; status=loose; fi
    rm -f "$RAW/$id.csv"
    # shellcheck disable=SC2086
    LD_LIBRARY_PATH=$(pa_ld_path) timeout "$PA_TIMEOUT" "${PA[@]}" -v -m "$model" -i "$proto" -u "$url" \
      --concurrency-range "$conc" -b 1 \
      --measurement-mode count_windows --measurement-request-count "$n" \
      -s "$sp" -r "$tr" $extra -f "$RAW/$id.csv" >"$RAW/$id.attempt$attempt.txt" 2>&1
    rc=$?
    [ $rc = 0 ] && [ -s "$RAW/$id.csv" ] && break
    status=failed
  done
  [ $attempt = 2 ] && cat "$RAW/$id.attempt1.txt" >"$RAW/$id.txt"
  cat "$RAW/$id.attempt$attempt.txt" >>"$RAW/$id.txt"
  echo "$id|$model|$proto|$conc|$n|$extra|$status" >>"$RAW/index.txt"
  printf '  %-28s %-8s (%ss elapsed)\n' "$id" "$status" "$(( $(date +%s) - t_start ))"
done
echo "# loadavg at end: $(cut -d' ' -f1-3 /proc/loadavg); matrix wall time $(( $(date +%s) - t_start ))s" | tee -a "$RAW/header.txt"

PYBIN=python3; [ -x "$VPY" ] && PYBIN=$VPY
"$PYBIN" "$ANCHORS_SRC/bench_report.py" "$RAW" "$OUT" "${OUT%.csv}.txt"
echo "$NOTE"
echo "CSV: $OUT   table: ${OUT%.csv}.txt   raw perf_analyzer output: $RAW/"
