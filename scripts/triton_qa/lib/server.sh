# Sourced by run.sh: start and stop ONE server (the reference tritonserver 2.51 or inferd) on
# ports 8000/8001/8002 (the QA files hard-code them), in its own process group.
#
#   start_server LOG REPO [tritonserver-style args...]   sets SERVER_PGID; 0 ready, 1 not ready or died;
#                                                        ports 8000-8002 taken by another process for
#                                                        PORT_WAIT seconds: the run exits (3)
#   stop_server                                          SIGTERM the group, SIGKILL after 40 s, wait for the ports
#
# The server and its model processes inherit the caller's exported variables (BLS_KIND, TRITON_DIR ...).
# Flags, per server:
#   reference: adds --backend-directory and --allow-gpu-metrics=false; PATH starts with $QA_DIR/venv-refstub/bin
#              (the stub's python gets the reference's packages and $QA_DIR/refdeps)
#   inferd:    drops --backend-directory, --allow-gpu-metrics and --cuda-memory-pool-byte-size; any other
#              flag is passed as given (a flag inferd does not know stops its start: that is a result)
# SHM_LIMIT=1g runs the server in a private mount namespace with a /dev/shm of that size (needs root).

READY_TIMEOUT=${READY_TIMEOUT:-240}
PORT_WAIT=${PORT_WAIT:-300}   # seconds to wait for 8000-8002 to be free before a start
SERVER_PGID=

_ports_busy() {
  ss -ltnH 2>/dev/null | awk '{print $4}' | grep -E ':(8000|8001|8002)$' >/dev/null
}

start_server() {
  local log=$1 repo=$2; shift 2
  if _ports_busy; then
    echo "[harness] ports 8000-8002 busy before start; waiting up to ${PORT_WAIT}s:" >&2
    ss -ltnpH 2>/dev/null | grep -E ':(8000|8001|8002) ' >&2
    for _ in $(seq 1 "$PORT_WAIT"); do _ports_busy || break; sleep 1; done
    # the tests would otherwise run against whatever listens there: the whole run stops
    if _ports_busy; then echo "[harness] ports still busy: the run stops" >&2; exit 3; fi
  fi
  local args=() wrap=()
  if [ -n "${SHM_LIMIT:-}" ]; then
    wrap=(unshare -m --propagation private sh -c "mount -t tmpfs -o size=$SHM_LIMIT tmpfs /dev/shm && exec \"\$0\" \"\$@\"")
  fi
  if [ "$SERVER_KIND" = reference ]; then
    anchor_paths
    setsid env -u PYTHONPATH LD_LIBRARY_PATH="$(triton_ld_path)" PATH="$QA_DIR/venv-refstub/bin:$TRITON_VENV/bin:$PATH" \
      "${wrap[@]}" "$TRITON_BIN" --model-repository="$repo" --backend-directory="$TRITON_BACKENDS" \
      --http-port=8000 --grpc-port=8001 --metrics-port=8002 --allow-gpu-metrics=false \
      "$@" >"$log" 2>&1 </dev/null &
  else
    for a in "$@"; do
      case "$a" in
        --backend-directory=*|--allow-gpu-metrics=*|--cuda-memory-pool-byte-size=*) ;;
        *) args+=("$a") ;;
      esac
    done
    # INFERD_SNAP (run.sh): a snapshot of the checkout's committed src/, ahead of the editable install
    setsid env PYTHONPATH="${INFERD_SNAP:-}" "${wrap[@]}" "$REPO_ROOT/.venv/bin/python" -m inferd serve \
      --model-repository "$repo" --http-port 8000 --grpc-port 8001 --metrics-port 8002 \
      "${args[@]}" >"$log" 2>&1 </dev/null &
  fi
  SERVER_PGID=$!
  echo "[harness] $SERVER_KIND pid/pgid=$SERVER_PGID repo=$repo args=$* log=$log" >&2
  local deadline=$(( $(date +%s) + READY_TIMEOUT )) code
  while :; do
    if ! kill -0 "$SERVER_PGID" 2>/dev/null; then
      echo "[harness] server exited during start-up (log tail):" >&2; tail -5 "$log" >&2
      wait "$SERVER_PGID" 2>/dev/null; SERVER_PGID=; return 1
    fi
    code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 http://localhost:8000/v2/health/ready || true)
    [ "$code" = 200 ] && { echo "[harness] ready after $(( READY_TIMEOUT - (deadline - $(date +%s)) )) s" >&2; return 0; }
    if [ "$(date +%s)" -gt "$deadline" ]; then
      echo "[harness] not ready after ${READY_TIMEOUT}s (ready=$code); running the tests anyway" >&2; return 1
    fi
    sleep 0.5
  done
}

stop_server() {
  [ -n "$SERVER_PGID" ] || return 0
  if kill -0 "$SERVER_PGID" 2>/dev/null; then
    kill -TERM -- "-$SERVER_PGID" 2>/dev/null
    for _ in $(seq 1 400); do kill -0 "$SERVER_PGID" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$SERVER_PGID" 2>/dev/null; then
      echo "[harness] server $SERVER_PGID still alive after 40 s, SIGKILL to its group" >&2
    fi
  fi
  # whatever is left of the group (python stubs, worker processes)
  kill -KILL -- "-$SERVER_PGID" 2>/dev/null
  wait "$SERVER_PGID" 2>/dev/null
  for _ in $(seq 1 60); do _ports_busy || break; sleep 0.5; done
  SERVER_PGID=
}
