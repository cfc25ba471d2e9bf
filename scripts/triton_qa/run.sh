#!/usr/bin/env bash
# Run Triton 2.51's own QA unittest files against one server and record every case's result.
#
#   bash scripts/triton_qa/run.sh reference|inferd [slice2] [SUITE ...]      (after setup.sh)
#
# SUITE (default: all of the slice, in this order), slice 1:
#   bp_python bp_lifecycle bp_decoupled bp_response_sender bp_async_execute bp_ensemble
#   bp_bls bp_bls_parameters bp_argument_validation bp_custom_metrics
#   http_test generate_endpoint http_aio grpc_aio input_validation parameters shared_memory
# slice 2 (lib/slice2.sh; results in $QA_DIR/results/slice2/<server>):
#   model_update metrics_queue_size grpc_client_plugin bp_io bp_logging bp_model_control
#   bp_request_rescheduling nan_inf optional_input model_namespacing
#
# Each suite reproduces its qa/*/test.sh: the same models copied, renamed and edited into a fresh
# repository (under $QA_DIR/work/<server>/qa, a copy of the qa/ tree setup.sh extracted), the same
# server flags and environment variables, then the file under pytest, or under lib/unittest_junit.py
# where test.sh runs `python FILE`. The servers listen on 8000/8001/8002, which the files hard-code.
# Results: $QA_DIR/results/<server>/<id>.xml (junit), <id>.out (the test's output), <id>.server.log,
# and cases.tsv (id, case, outcome, message). Compare the two servers with report.py.
#
# INFERD_SRC=head (default) runs a snapshot of this checkout's committed HEAD (git archive of src/, put
# ahead of the editable install); INFERD_SRC=live runs the working tree as it is.
# RETRY=0 turns off the second attempt; T_FILE is the per-file timeout (900 s).
set -u
SERVER_KIND=${1:?usage: run.sh reference|inferd [slice2] [suite...]}
shift
SLICE=1
[ "${1:-}" = slice2 ] && { SLICE=2; shift; }
case "$SERVER_KIND" in reference|inferd) ;; *) echo "server must be reference or inferd" >&2; exit 2 ;; esac
export SERVER_KIND
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib/paths.sh"
SRC=$QA_DIR/src/qa
[ -d "$SRC/common" ] || { echo "no QA tree in $SRC: run scripts/triton_qa/setup.sh first" >&2; exit 2; }
PB_EXAMPLES=$QA_DIR/src/python_backend/examples
EXAMPLES=$QA_DIR/src/docs/examples/model_repository
WORKROOT=$QA_DIR/work/$SERVER_KIND
WORK=$WORKROOT/qa
RES=$QA_DIR/results/$SERVER_KIND
[ $SLICE = 2 ] && RES=$QA_DIR/results/slice2/$SERVER_KIND
PY=$REPO_ROOT/.venv/bin/python
T_FILE=${T_FILE:-900}          # per test file timeout (s)
source "$QA_LIB/server.sh"
source "$QA_LIB/slice2.sh"

ALL="bp_python bp_lifecycle bp_decoupled bp_response_sender bp_async_execute bp_ensemble bp_bls bp_bls_parameters bp_argument_validation bp_custom_metrics http_test generate_endpoint http_aio grpc_aio input_validation parameters shared_memory"
[ $SLICE = 2 ] && ALL=$ALL2
SUITES=${*:-$ALL}
for s in $SUITES; do
  case " $ALL " in *" $s "*) ;; *) echo "unknown suite: $s (one of: $ALL)" >&2; exit 2 ;; esac
done

[ $# -eq 0 ] && rm -rf "$RES"   # full run: start from a clean results dir
mkdir -p "$RES" "$WORKROOT"
if [ ! -d "$WORK" ] || [ -z "${KEEP_WORK:-}" ]; then
  rm -rf "$WORK"; cp -r "$SRC" "$WORK"
fi
trap 'stop_server' EXIT
trap 'exit 130' INT TERM   # the EXIT trap stops the server; the run does not go on

# inferd under test: a snapshot of the checkout's committed HEAD (so that edits in progress do not
# change a run half-way); INFERD_SRC=live runs the editable install's working tree instead.
if [ "$SERVER_KIND" = inferd ]; then
  if [ "${INFERD_SRC:-head}" = live ]; then
    export INFERD_SNAP=
    echo "inferd: live working tree $(git -C $REPO_ROOT rev-parse HEAD) + uncommitted: $(git -C $REPO_ROOT status --short | wc -l) files" >"$RES/VERSION"
  else
    sha=$(git -C $REPO_ROOT rev-parse HEAD)
    snap=$QA_DIR/inferd-snap/$sha
    if [ ! -d "$snap/src/inferd" ]; then
      mkdir -p "$snap" && git -C $REPO_ROOT archive "$sha" src | tar -x -C "$snap"
    fi
    export INFERD_SNAP=$snap/src
    echo "inferd: snapshot of HEAD $sha ($(git -C $REPO_ROOT log -1 --format='%cd %s' "$sha" | cut -c1-120))" >"$RES/VERSION"
  fi
  PYTHONPATH=$INFERD_SNAP "$PY" -c "import inferd.cli, sys; print('inferd from', inferd.cli.__file__)" >>"$RES/VERSION" 2>&1
  cat "$RES/VERSION" >&2
else
  echo "reference: tritonserver from $TRITON_VENV ($("$TRITON_VENV/bin/python" -m pip show nvidia-pytriton 2>/dev/null | sed -n 's/^Version: /nvidia-pytriton /p'))" >"$RES/VERSION"
fi

# client side: qa/common helpers, the triton_shm_monitor stand-in, sseclient and psutil, and
# tritonclient at the QA tree's release (setup.sh: $QA_DIR/pyclient), ahead of the venv's own unless
# QA_CLIENT=venv (newer clients refuse np.float32 data for BF16: test_bf16 then fails client-side)
if [ "${QA_CLIENT:-251}" = venv ]; then
  export PYTHONPATH=$WORK/common:$QA_LIB/pystubs:$QA_DIR/pydeps
else
  export PYTHONPATH=$WORK/common:$QA_LIB/pystubs:$QA_DIR/pyclient:$QA_DIR/pydeps
fi
export TEST_WINDOWS=0 TEST_JETSON=0 TRITONSERVER_IPADDR=localhost

# run_pytest ID DIR [pytest args...]   (env for the test: set by caller, exported)
run_pytest() {
  local id=$1 dir=$2; shift 2
  rm -f "$RES/$id.xml"
  echo "[harness] pytest $id: (cd $dir && pytest $*)" >&2
  if [ "${RUNNER:-pytest}" = unittest ]; then   # test.sh runs `python FILE [Class.test]`
    ( cd "$dir" && timeout -k 20 "$T_FILE" "$PY" $QA_LIB/unittest_junit.py "$RES/$id.xml" "$@" ) >"$RES/$id.out" 2>&1
  else
    ( cd "$dir" && timeout -k 20 "$T_FILE" "$PY" -m pytest "$@" -p no:cacheprovider -rA \
        -o junit_logging=no --junitxml="$RES/$id.xml" ) >"$RES/$id.out" 2>&1
  fi
  local rc=$?
  echo "rc=$rc" >>"$RES/$id.out"
  if [ ! -s "$RES/$id.xml" ] && [ "${RUNNER:-pytest}" = pytest ]; then   # timeout: record which cases there were
    ( cd "$dir" && "$PY" -m pytest "$@" -p no:cacheprovider --collect-only -q ) >"$RES/$id.collect" 2>&1
  fi
  echo "[harness] $id rc=$rc $(tail -2 "$RES/$id.out" | head -1)" >&2
}

# one server + one pytest file
# run_one ID TESTDIR REPO "server args" pytest-args...
# A run with failures is repeated once (fresh server) unless RETRY=0; the first attempt's
# files are kept as ID.try1.*; collect.py counts a case passed if either attempt passed it
# and lists it as flaky.
run_one() {
  rm -f "$RES/$1".try1.*
  _run_one "$@"
  if [ "${RETRY:-1}" = 1 ] && ! _all_passed "$RES/$1.xml"; then
    for f in "$RES/$1".*; do
      case "$f" in *.try1.*|*.failed-start) continue ;; esac
      mv "$f" "$RES/$1.try1.${f#"$RES/$1."}"
    done
    echo "[harness] $1: failures, second attempt" >&2
    _run_one "$@"
  fi
}
_all_passed() {
  [ -s "$1" ] && "$PY" -c "
import sys, xml.etree.ElementTree as ET
r = ET.parse(sys.argv[1]).getroot()
sys.exit(1 if any(c.tag in ('failure', 'error') for tc in r.iter('testcase') for c in tc) else 0)" "$1"
}
# PRE_START (evaluated before each server start: a retry starts from the same files) and PRE_TEST
# (evaluated once the server is up, before the test: what test.sh does with curl in between)
_run_one() {
  local id=$1 dir=$2 repo=$3 sargs=$4; shift 4
  [ -n "${PRE_START:-}" ] && eval "$PRE_START"
  # shellcheck disable=SC2086
  start_server "$RES/$id.server.log" "$repo" $sargs
  if [ $? -ne 0 ] && [ -z "$SERVER_PGID" ]; then   # died during start-up: retry once (flaky under load)
    mv "$RES/$id.server.log" "$RES/$id.server.log.failed-start"
    echo "[harness] $id: server died during start-up, retrying once" >&2
    start_server "$RES/$id.server.log" "$repo" $sargs
  fi
  export SERVER_LOG=$RES/$id.server.log
  # some tests open the log test.sh wrote under a fixed name in their folder
  [ -n "${LOGLINK:-}" ] && ln -sfn "$RES/$id.server.log" "$dir/$LOGLINK"
  [ -n "${PRE_TEST:-}" ] && eval "$PRE_TEST"
  run_pytest "$id" "$dir" "$@"
  stop_server
  cp "$RES/$id.server.log" "$RES/$id.server.log.final" 2>/dev/null || true
}

LV="--log-verbose=1"

# ---------------------------------------------------------------- L0_backend_python
bp_python() {   # qa/L0_backend_python/test.sh, first server run
  local d=$WORK/L0_backend_python; cd "$d" || return
  rm -rf models
  mkdir -p models/identity_fp32/1/
  cp ../python_models/identity_fp32/model.py ./models/identity_fp32/1/model.py
  cp ../python_models/identity_fp32/config.pbtxt ./models/identity_fp32/config.pbtxt
  mkdir -p models/identity_bf16/1/
  cp ../python_models/identity_bf16/model.py ./models/identity_bf16/1/model.py
  cp ../python_models/identity_bf16/config.pbtxt ./models/identity_bf16/config.pbtxt
  cp -r ./models/identity_fp32 ./models/identity_uint8
  (cd models/identity_uint8 && sed -i "s/^name:.*/name: \"identity_uint8\"/" config.pbtxt && \
     sed -i "s/TYPE_FP32/TYPE_UINT8/g" config.pbtxt && sed -i "s/^max_batch_size:.*/max_batch_size: 8/" config.pbtxt && \
     echo "dynamic_batching { preferred_batch_size: [8], max_queue_delay_microseconds: 12000000 }" >> config.pbtxt)
  cp -r ./models/identity_fp32 ./models/identity_uint8_nobatch
  (cd models/identity_uint8_nobatch && sed -i "s/^name:.*/name: \"identity_uint8_nobatch\"/" config.pbtxt && \
     sed -i "s/TYPE_FP32/TYPE_UINT8/g" config.pbtxt && sed -i "s/^max_batch_size:.*//" config.pbtxt)
  cp -r ./models/identity_fp32 ./models/identity_uint32
  (cd models/identity_uint32 && sed -i "s/^name:.*/name: \"identity_uint32\"/" config.pbtxt && sed -i "s/TYPE_FP32/TYPE_UINT32/g" config.pbtxt)
  cp -r ./models/identity_fp32 ./models/identity_bool
  (cd models/identity_bool && sed -i "s/^name:.*/name: \"identity_bool\"/" config.pbtxt && sed -i "s/TYPE_FP32/TYPE_BOOL/g" config.pbtxt)
  cp -r ./models/identity_fp32 ./models/default_model_name
  mv ./models/default_model_name/1/model.py ./models/default_model_name/1/mymodel.py
  (cd models/default_model_name && sed -i "s/^name:.*/name: \"default_model_name\"/" config.pbtxt && \
     echo "default_model_filename: \"mymodel.py\"" >> config.pbtxt)
  mkdir -p models/pytorch_fp32_fp32/1/
  cp -r ../python_models/pytorch_fp32_fp32/model.py ./models/pytorch_fp32_fp32/1/
  cp ../python_models/pytorch_fp32_fp32/config.pbtxt ./models/pytorch_fp32_fp32/
  (cd models/pytorch_fp32_fp32 && sed -i "s/^name:.*/name: \"pytorch_fp32_fp32\"/" config.pbtxt)
  mkdir -p models/delayed_model/1/
  cp -r ../python_models/delayed_model/model.py ./models/delayed_model/1/
  cp ../python_models/delayed_model/config.pbtxt ./models/delayed_model/
  mkdir -p models/init_args/1/
  cp ../python_models/init_args/model.py ./models/init_args/1/
  cp ../python_models/init_args/config.pbtxt ./models/init_args/
  sed -i "s|TRITON_DIR_PATH|${WORKROOT}|" ./models/init_args/config.pbtxt
  for m in optional non_contiguous string string_fixed dlpack_identity; do
    mkdir -p models/$m/1/; cp ../python_models/$m/model.py ./models/$m/1/; cp ../python_models/$m/config.pbtxt ./models/$m/
  done
  # init_args expects model_repository == $TRITON_DIR/qa/L0_backend_python/models/init_args
  export TRITON_DIR=$WORKROOT
  # CI runs this with a 1 GiB /dev/shm (test_growth_error relies on it): the server gets a private one
  export SHM_LIMIT=1g
  # GPU-only cases (CUDA shared memory): deselected on both servers
  run_one bp_python "$d" "$d/models" "$LV --backend-config=python,shm-default-byte-size=5242880" \
    python_test.py -k "not test_gpu_tensor_error and not test_dlpack_tensor_error"
  unset TRITON_DIR SHM_LIMIT
}

bp_lifecycle() {
  local d=$WORK/L0_backend_python/lifecycle; cd "$d" || return
  rm -rf models
  for m in error_code execute_cancel execute_return_error; do
    mkdir -p models/$m/1/; cp ../../python_models/$m/model.py ./models/$m/1/; cp ../../python_models/$m/config.pbtxt ./models/$m/
  done
  mkdir -p models/execute_error/1/
  cp ../../python_models/execute_error/model.py ./models/execute_error/1/
  cp ../../python_models/execute_error/config.pbtxt ./models/execute_error/
  (cd models/execute_error && sed -i "s/^name:.*/name: \"execute_error\"/" config.pbtxt && \
     sed -i "s/^max_batch_size:.*/max_batch_size: 8/" config.pbtxt && \
     echo "dynamic_batching { preferred_batch_size: [8], max_queue_delay_microseconds: 12000000 }" >> config.pbtxt)
  mkdir -p models/execute_grpc_error/1/
  cp ../../python_models/execute_grpc_error/model.py ./models/execute_grpc_error/1/
  cp ../../python_models/execute_grpc_error/config.pbtxt ./models/execute_grpc_error/
  (cd models/execute_grpc_error && sed -i "s/^name:.*/name: \"execute_grpc_error\"/" config.pbtxt && \
     sed -i "s/^max_batch_size:.*/max_batch_size: 8/" config.pbtxt && \
     echo "dynamic_batching { preferred_batch_size: [8], max_queue_delay_microseconds: 1200000 }" >> config.pbtxt)
  mkdir -p models/wrong_model/1/
  cp ../../python_models/wrong_model/model.py ./models/wrong_model/1/
  cp ../../python_models/wrong_model/config.pbtxt ./models/wrong_model/
  (cd models/wrong_model && sed -i "s/^name:.*/name: \"wrong_model\"/" config.pbtxt && sed -i "s/TYPE_FP32/TYPE_UINT32/g" config.pbtxt)
  # test.sh loops 5x to catch intermittent crashes; one pass here
  LOGLINK=lifecycle_server.log run_one bp_lifecycle "$d" "$d/models" "$LV" lifecycle_test.py
}

bp_decoupled() {
  local d=$WORK/L0_backend_python/decoupled; cd "$d" || return
  mkdir -p models/identity_fp32/1/
  cp ../../python_models/identity_fp32/model.py models/identity_fp32/1/
  cp ../../python_models/identity_fp32/config.pbtxt models/identity_fp32/
  rm -rf models/execute_cancel; mkdir -p models/execute_cancel/1/
  cp ../../python_models/execute_cancel/model.py ./models/execute_cancel/1/
  cp ../../python_models/execute_cancel/config.pbtxt ./models/execute_cancel/
  echo "model_transaction_policy { decoupled: True }" >> ./models/execute_cancel/config.pbtxt
  mkdir -p models/square_int32/1/
  cp $PB_EXAMPLES/decoupled/square_model.py models/square_int32/1/model.py
  cp $PB_EXAMPLES/decoupled/square_config.pbtxt models/square_int32/config.pbtxt
  mkdir -p models/dlpack_add_sub/1/
  cp ../../python_models/dlpack_add_sub/model.py models/dlpack_add_sub/1/
  cp ../../python_models/dlpack_add_sub/config.pbtxt models/dlpack_add_sub/
  # decoupled_bls: its GPU BLS part runs only off Windows; take the Windows (CPU) path
  sed -i 's/if sys.platform != "win32":/if False:  # qa harness: GPU part disabled (no CUDA)/' \
    models/decoupled_bls/1/model.py
  LOGLINK=decoupled_server.log run_one bp_decoupled "$d" "$d/models" "$LV" decoupled_test.py
}

bp_response_sender() {
  local d=$WORK/L0_backend_python/response_sender; cd "$d" || return
  rm -rf models && mkdir models
  local P=../../python_models/response_sender
  mk() { # name model_file decoupled batching
    mkdir -p models/$1/1 && cp $P/model_common.py models/$1/1 && cp $P/$2 models/$1/1/model.py && cp $P/config.pbtxt models/$1
    [ "$3" = 1 ] && echo "model_transaction_policy { decoupled: True }" >> models/$1/config.pbtxt
    [ "$4" = 1 ] && echo "dynamic_batching { max_queue_delay_microseconds: 500000 }" >> models/$1/config.pbtxt
    true
  }
  mk response_sender model.py 0 0
  mk response_sender_decoupled model.py 1 0
  mk response_sender_async model_async.py 0 0
  mk response_sender_decoupled_async model_async.py 1 0
  mk response_sender_batching model.py 0 1
  mk response_sender_decoupled_batching model.py 1 1
  mk response_sender_async_batching model_async.py 0 1
  mk response_sender_decoupled_async_batching model_async.py 1 1
  run_one bp_response_sender "$d" "$d/models" "$LV" response_sender_test.py
  rm -rf models && mkdir models
  mkdir -p models/response_sender_complete_final/1
  cp ../../python_models/response_sender_complete_final/model.py models/response_sender_complete_final/1
  cp ../../python_models/response_sender_complete_final/config.pbtxt models/response_sender_complete_final
  run_one bp_response_sender_complete_final "$d" "$d/models" "$LV" response_sender_complete_final_test.py
}

bp_async_execute() {
  local d=$WORK/L0_backend_python/async_execute; cd "$d" || return
  rm -rf models && mkdir models
  for m in async_execute_decouple async_execute_decouple_bls; do
    mkdir -p models/$m/1 && cp ../../python_models/$m/model.py models/$m/1 && cp ../../python_models/$m/config.pbtxt models/$m
  done
  run_one bp_async_execute "$d" "$d/models" "$LV" concurrency_test.py
}

bp_ensemble() {
  local d=$WORK/L0_backend_python/ensemble; cd "$d" || return
  rm -rf models
  mkdir -p models/ensemble/1/
  cp ../../python_models/ensemble/config.pbtxt ./models/ensemble
  for m in add_sub_1 add_sub_2; do
    mkdir -p models/$m/1/; cp ../../python_models/add_sub/config.pbtxt ./models/$m/; cp ../../python_models/add_sub/model.py ./models/$m/1/
  done
  # ensemble_gpu (libtorch on KIND_GPU) is GPU-only: not created, its case deselected
  run_one bp_ensemble "$d" "$d/models" "$LV" ensemble_test.py -k "not test_ensemble_gpu"
}

bp_bls() {
  local d=$WORK/L0_backend_python/bls; cd "$d" || return
  rm -rf models
  for m in bls dlpack_add_sub bls_async bls_memory bls_memory_async add_sub execute_error identity_fp32 dlpack_identity dlpack_square identity_fp32_timeout; do
    mkdir -p models/$m/1/; cp ../../python_models/$m/model.py models/$m/1/; cp ../../python_models/$m/config.pbtxt models/$m
  done
  mkdir -p models/square_int32/1/
  cp $PB_EXAMPLES/decoupled/square_model.py models/square_int32/1/model.py
  cp $PB_EXAMPLES/decoupled/square_config.pbtxt models/square_int32/config.pbtxt
  # Not reproducible on a CPU-only reference: onnx_nobatch_sequence_int32 (ONNX, GPU output),
  # libtorch_gpu/libtorch_cpu (libtorch backend).  Their inner tests are skipped in the copies:
  "$PY" - models/bls/1/model.py <<'PY'
import re, sys
p = sys.argv[1]; s = open(p).read()
for t in ["test_bls_sequence", "test_bls_tensor_lifecycle", "test_gpu_bls", "test_preferred_memory"]:
    s = s.replace(f"    def {t}(self", f"    @unittest.skip('qa harness: GPU/ONNX/libtorch only')\n    def {t}(self", 1)
open(p, "w").write(s)
PY
  # bls_async runs each async BLS once with GPU tensors and once with CPU ones: CPU twice here
  sed -i 's/(gpu=True)/(gpu=False)/' models/bls_async/1/model.py
  for kind in non_decoupled decoupled; do
    export BLS_KIND=$kind
    start_server "$RES/bls.$kind.server.log" "$d/models" $LV
    export SERVER_LOG=$RES/bls.$kind.server.log
    for MODEL_NAME in bls bls_memory bls_memory_async bls_async; do
      export MODEL_NAME
      run_pytest "bp_bls.$MODEL_NAME.$kind" "$d" ../test_infer_shm_leak.py
    done
    stop_server
    # test.sh: 'Request timeout: 11000000000' must be in the log (bls test_timeout)
    grep -c "Request timeout: 11000000000" "$RES/bls.$kind.server.log" >"$RES/bls.$kind.timeout_grep" 2>&1
    unset MODEL_NAME BLS_KIND
  done
  # bls_model_loading (explicit model control + ONNX model overrides) not run: the
  # reference CPU build has no onnxruntime backend (and explicit mode is another issue).
}

bp_bls_parameters() {
  local d=$WORK/L0_backend_python/bls; cd "$d" || return
  rm -rf params_models && mkdir -p params_models/bls_parameters/1
  cp ../../python_models/bls_parameters/model.py ./params_models/bls_parameters/1
  cp ../../python_models/bls_parameters/config.pbtxt ./params_models/bls_parameters
  RUNNER=unittest run_one bp_bls_parameters "$d" "$d/params_models" "$LV" bls_parameters_test.py
}

bp_argument_validation() {
  local d=$WORK/L0_backend_python/argument_validation; cd "$d" || return
  export MODEL_NAME=argument_validation
  run_one bp_argument_validation "$d" "$d/models" "$LV" ../test_infer_shm_leak.py
  unset MODEL_NAME
}

bp_custom_metrics() {
  local d=$WORK/L0_backend_python/custom_metrics; cd "$d" || return
  rm -rf models
  mkdir -p models/custom_metrics/1/
  cp ../../python_models/custom_metrics/model.py models/custom_metrics/1/
  cp ../../python_models/custom_metrics/config.pbtxt models/custom_metrics
  export MODEL_NAME=custom_metrics
  run_one bp_custom_metrics "$d" "$d/models" "$LV" ../test_infer_shm_leak.py
  unset MODEL_NAME
}

# ---------------------------------------------------------------- stand-in models
# standin DIR NAME CONFIG_TEXT : python-backend model with lib/standins/standin_model.py
standin() {
  mkdir -p "$1/$2/1"
  cp $QA_LIB/standin_model.py "$1/$2/1/model.py"
  printf '%s\n' "$3" >"$1/$2/config.pbtxt"
}
# examples_standin DIR NAME : docs/examples/model_repository/NAME's config, platform -> python
examples_standin() {
  mkdir -p "$1/$2/1"
  cp $QA_LIB/standin_model.py "$1/$2/1/model.py"
  sed 's/^platform:.*/backend: "python"/' "$EXAMPLES/$2/config.pbtxt" >"$1/$2/config.pbtxt"
  if grep -q label_filename "$1/$2/config.pbtxt"; then
    cp "$EXAMPLES/$2/inception_labels.txt" "$1/$2/"
  fi
}
examples_repo() {  # DIR with_int8(0/1): the models Dockerfile.QA puts in qa/L0_{http,grpc}/models
  local dir=$1; rm -rf "$dir"; mkdir -p "$dir"
  for m in simple simple_dyna_sequence simple_identity simple_sequence simple_string inception_graphdef; do
    examples_standin "$dir" $m
  done
  [ "$2" = 1 ] && examples_standin "$dir" simple_int8
  # test.sh: simple_string_dyna_sequence = simple_dyna_sequence with a STRING CORRID
  cp -r "$dir/simple_dyna_sequence" "$dir/simple_string_dyna_sequence"
  sed -i "s/simple_dyna_sequence/simple_string_dyna_sequence/g" "$dir/simple_string_dyna_sequence/config.pbtxt"
  sed -i "/CONTROL_SEQUENCE_CORRID/{n;s/data_type:.*/data_type: TYPE_STRING/}" "$dir/simple_string_dyna_sequence/config.pbtxt"
}
onnx_zero_config() {  # NAME IO_CNT DTYPE DIMS  (gen_qa_identity_models.py layout, max_batch 8)
  local name=$1 n=$2 dt=$3 dims=$4 i
  echo "name: \"$name\""; echo 'backend: "python"'; echo "max_batch_size: 8"
  echo "version_policy: { latest { num_versions: 1 }}"
  for ((i=0;i<n;i++)); do echo "input [ { name: \"INPUT$i\" data_type: $dt dims: [ $dims ] } ]"; done
  for ((i=0;i<n;i++)); do echo "output [ { name: \"OUTPUT$i\" data_type: $dt dims: [ $dims ] } ]"; done
}

# ---------------------------------------------------------------- L0_http / L0_grpc
http_test() {
  local d=$WORK/L0_http; cd "$d" || return
  local M=$d/python_unit_test_models; rm -rf "$M"; mkdir -p "$M"
  standin "$M" onnx_zero_1_float32 "$(onnx_zero_config onnx_zero_1_float32 1 TYPE_FP32 -1)"
  standin "$M" onnx_zero_1_object "$(onnx_zero_config onnx_zero_1_object 1 TYPE_STRING -1)"
  standin "$M" onnx_zero_1_float16 "$(onnx_zero_config onnx_zero_1_float16 1 TYPE_FP16 '-1, -1')"
  standin "$M" onnx_zero_3_float32 "$(onnx_zero_config onnx_zero_3_float32 3 TYPE_FP32 -1)"
  cp -r $M/onnx_zero_1_object $M/onnx_zero_1_object_1_element && \
    (cd $M/onnx_zero_1_object_1_element && sed -i "s/onnx_zero_1_object/onnx_zero_1_object_1_element/" config.pbtxt && \
     sed -i "0,/-1/{s/-1/1/}" config.pbtxt)
  cp -r $M/onnx_zero_1_float32 $M/onnx_zero_1_float32_queue && \
    (cd $M/onnx_zero_1_float32_queue && sed -i "s/onnx_zero_1_float32/onnx_zero_1_float32_queue/" config.pbtxt && \
     printf 'dynamic_batching { \n    max_queue_delay_microseconds: 1000000\n    preferred_batch_size: [ 8 ]\n    default_queue_policy {\n        max_queue_size: 1\n    }\n}\n' >> config.pbtxt)
  RUNNER=unittest run_one http_test "$d" "$M" "" http_test.py
}

generate_endpoint() {
  local d=$WORK/L0_http; cd "$d" || return
  RUNNER=unittest run_one generate_endpoint "$d" "$d/generate_models" "" generate_endpoint_test.py
}

http_aio() {
  local d=$WORK/L0_http; cd "$d" || return
  examples_repo "$d/models" 0
  RUNNER=unittest run_one http_aio "$d" "$d/models" "" python_http_aio_test.py
}

grpc_aio() {
  local d=$WORK/L0_grpc; cd "$d" || return
  examples_repo "$d/models" 1
  RUNNER=unittest run_one grpc_aio "$d" "$d/models" "" python_grpc_aio_test.py
}

# ---------------------------------------------------------------- L0_input_validation
input_validation() {
  local d=$WORK/L0_input_validation; cd "$d" || return
  run_one input_validation.InputValTest "$d" "$d/models" "" input_validation_test.py::InputValTest
  # pt_identity (pytorch backend) and graphdef_object_int32_int32 (TF) as python stand-ins:
  # the checks under test happen in the server core before any backend runs.
  standin "$d/models" pt_identity 'name: "pt_identity"
backend: "python"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [8] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [8] } ]
dynamic_batching { max_queue_delay_microseconds: 1000000 }'
  standin "$d/models" graphdef_object_int32_int32 'name: "graphdef_object_int32_int32"
backend: "python"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_STRING dims: [ 16 ] }, { name: "INPUT1" data_type: TYPE_STRING dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]'
  # test_wrong_input_shape_tensor_size needs TensorRT shape-tensor plans (GPU): deselected
  run_one input_validation.InputShapeTest "$d" "$d/models" "" input_validation_test.py::InputShapeTest \
    -k "not test_wrong_input_shape_tensor_size"
  rm -rf "$d/models/pt_identity" "$d/models/graphdef_object_int32_int32"
}

# ---------------------------------------------------------------- L0_parameters
parameters() {
  local d=$WORK/L0_parameters; cd "$d" || return
  local M=$d/model_repository
  mkdir -p "$M/identity/1" "$M/ensemble/1"
  # the 'identity' backend (server test backend) is not in the reference build: python stand-in
  cp $QA_LIB/standin_model.py "$M/identity/1/model.py"
  sed -i 's/^backend: "identity"/backend: "python"/' "$M/identity/config.pbtxt"
  for t in test_params test_headers test_header_forward_pattern_case_insensitive test_grpc_header_forward_pattern_case_sensitive; do
    local sargs="--exit-timeout-secs=120"
    case $t in
      test_headers) sargs+=" --grpc-header-forward-pattern=my_header.* --http-header-forward-pattern=my_header.*" ;;
      test_header_forward_pattern_case_insensitive) sargs+=" --grpc-header-forward-pattern=MY_HEADER.* --http-header-forward-pattern=MY_HEADER.*" ;;
      test_grpc_header_forward_pattern_case_sensitive) sargs+=" --grpc-header-forward-pattern=(?-i)MY_HEADER.*" ;;
    esac
    export TEST_HEADER=$t
    RUNNER=unittest run_one parameters.$t "$d" "$M" "$sargs" parameters_test.py
  done
  unset TEST_HEADER
}

# ---------------------------------------------------------------- L0_shared_memory
shared_memory() {
  local d=$WORK/L0_shared_memory; cd "$d" || return
  local M=$d/models; rm -rf "$M"; mkdir -p "$M"
  examples_standin "$M" simple
  for t in test_invalid_create_shm test_valid_create_set_register test_unregister_before_register \
      test_unregister_after_register test_reregister_after_register test_unregister_after_inference \
      test_register_after_inference test_too_big_shm test_mixed_raw_shm test_unregisterall \
      test_infer_offset_out_of_bound test_infer_byte_size_out_of_bound test_register_out_of_bound \
      test_python_client_leak; do
    for ct in http grpc; do
      export CLIENT_TYPE=$ct
      RUNNER=unittest run_one shared_memory.$t.$ct "$d" "$M" "$LV" shared_memory_test.py SharedMemoryTest.$t
    done
  done
  rm -rf "$d/python_models"; mkdir -p "$d/python_models/simple/1/"
  cp ../python_models/execute_delayed_model/model.py ./python_models/simple/1/
  cp ../python_models/execute_delayed_model/config.pbtxt ./python_models/simple/
  for ct in http grpc; do
    export CLIENT_TYPE=$ct
    RUNNER=unittest run_one shared_memory.unregister_during_inference.$ct "$d" "$d/python_models" "$LV" \
      shared_memory_test.py TestSharedMemoryUnregister.test_unregister_shm_during_inference_$ct
  done
  unset CLIENT_TYPE
}

for s in $SUITES; do
  echo "================ [$SERVER_KIND] $s  $(date +%T)" >&2
  "$s"; stop_server
done
"$PY" "$QA_LIB/collect.py" "$RES"
