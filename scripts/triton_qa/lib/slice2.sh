# Sourced by run.sh: slice 2's suites (`run.sh SERVER slice2 [SUITE ...]`), the QA files beyond
# slice 1 that run on a CPU-only build with the Python backend, each set up as its test.sh does.
# run.sh's helpers (run_one, run_pytest, standin, start_server ...) and variables (WORK, RES, LV ...)
# are in scope.
#
#   model_update        L0_model_update/instance_update_test.py x3 rate-limit modes
#   metrics_queue_size  L0_metrics/metrics_queue_size_test.py (identity_delay as a stand-in)
#   grpc_client_plugin  L0_grpc/grpc_client_plugin_test.py (headers forwarded to a Python model)
#   bp_io bp_logging bp_model_control bp_request_rescheduling   L0_backend_python's subtests
#   nan_inf optional_input model_namespacing

ALL2="model_update metrics_queue_size grpc_client_plugin bp_io bp_logging bp_model_control bp_request_rescheduling nan_inf optional_input model_namespacing"

# ---------------------------------------------------------------- L0_model_update
# The cases that need KIND_GPU instances (the reference's CPU build refuses them: "has kind KIND_GPU
# but no GPUs are available") are not run: gpu_instance_update, gpu_cpu_instance_update,
# instance_name_update, instance_signature and the two *_with_ongoing_sequences (they move the
# sequences onto a GPU instance).
MODEL_UPDATE_CASES="test_add_rm_add_instance_no_batching test_add_rm_add_instance_with_batching
  test_rm_add_rm_instance_no_batching test_rm_add_rm_instance_with_batching test_rm_instance_to_zero
  test_cpu_instance_update test_invalid_config test_model_file_update test_non_instance_config_update
  test_load_api_with_config test_update_while_inferencing test_infer_while_updating
  test_instance_resource_increase test_instance_resource_increase_above_explicit
  test_instance_resource_decrease test_direct_scheduler_update_no_ongoing_sequences
  test_oldest_scheduler_update_no_ongoing_sequences"

_model_update_setup() {   # test.sh's setup_models, and no counters left from an attempt before
  rm -rf models && mkdir models
  cp -r ../python_models/model_init_del models/model_init_del && mkdir models/model_init_del/1 && \
    mv models/model_init_del/model.py models/model_init_del/1
  rm -f model_init_del_*.txt
}

model_update() {
  local d=$WORK/L0_model_update; cd "$d" || return
  local names=() t mode rl
  for t in $MODEL_UPDATE_CASES; do names+=("TestInstanceUpdate.$t"); done
  # tearDown's check of the test's outcome uses a unittest internal Python 3.11 removed (an error in
  # every case); the file's own comment gives the 3.11 form, taken here
  sed -i 's/^        self._feedErrorsToResult(r, self._outcome.errors)$/        r = self._outcome.result  # qa harness: Python >= 3.11/' \
    instance_update_test.py
  grep -q "qa harness: Python >= 3.11" instance_update_test.py || { echo "instance_update_test.py: tearDown not adapted" >&2; return; }
  # the model and the test share counters through files in MODEL_LOG_DIR
  export MODEL_LOG_DIR=$d PYTHONDONTWRITEBYTECODE=True
  for mode in off execution_count execution_count_with_explicit_resource; do
    rl="--rate-limit=$mode"
    [ "$mode" = execution_count_with_explicit_resource ] && rl="--rate-limit=execution_count --rate-limit-resource=R1:10"
    export RATE_LIMIT_MODE=$mode
    # test_instance_resource_decrease reads the server log under test.sh's name
    PRE_START=_model_update_setup LOGLINK=instance_update_test.rate_limit_$mode.server.log RUNNER=unittest \
      run_one "model_update.$mode" "$d" "$d/models" "--model-control-mode=explicit $rl --log-verbose=2" \
      instance_update_test.py "${names[@]}"
  done
  unset MODEL_LOG_DIR RATE_LIMIT_MODE PYTHONDONTWRITEBYTECODE
}

# ---------------------------------------------------------------- L0_metrics
# identity_delay_standin DEST NAME: qa/L0_metrics/identity_delay (backend "identity", 2 s per
# execute) as a Python stand-in that sleeps execute_delay_ms per execute, as the identity backend does
identity_delay_standin() {
  local src=$WORK/L0_metrics/identity_delay
  mkdir -p "$1/$2/1"
  cp "$QA_LIB/standin_model.py" "$1/$2/1/model.py"
  sed 's/^backend: "identity"/backend: "python"/' "$src/config.pbtxt" >"$1/$2/config.pbtxt"
}

metrics_queue_size() {   # test.sh: "Pending Request Count (Queue Size) Metric Behavioral Tests"
  local d=$WORK/L0_metrics; cd "$d" || return
  local M=$d/queue_size_models; rm -rf "$M"; mkdir -p "$M"
  export MAX_BATCH_SIZE=4 MAX_QUEUE_DELAY_US=100000
  identity_delay_standin "$M" default
  sed -i "s/^max_batch_size.*/max_batch_size: ${MAX_BATCH_SIZE}/" "$M/default/config.pbtxt"
  cp -r "$M/default" "$M/dynamic"
  echo -e "\ndynamic_batching { max_queue_delay_microseconds: ${MAX_QUEUE_DELAY_US} }\n" >>"$M/dynamic/config.pbtxt"
  cp -r "$M/default" "$M/max_queue_size"
  echo -e "\ndynamic_batching { max_queue_delay_microseconds: ${MAX_QUEUE_DELAY_US} default_queue_policy { max_queue_size: 4 } }\n" >>"$M/max_queue_size/config.pbtxt"
  cp -r "$M/default" "$M/sequence_direct"
  echo -e "\nsequence_batching { direct { max_queue_delay_microseconds: ${MAX_QUEUE_DELAY_US}, minimum_slot_utilization: 1.0 } }\n" >>"$M/sequence_direct/config.pbtxt"
  cp -r "$M/default" "$M/sequence_oldest"
  echo -e "\nsequence_batching { oldest { max_queue_delay_microseconds: ${MAX_QUEUE_DELAY_US}, max_candidate_sequences: ${MAX_BATCH_SIZE} } }\n" >>"$M/sequence_oldest/config.pbtxt"
  cp -r ensemble_delay "$M/ensemble" && mkdir -p "$M/ensemble/1"
  cp -r "$M/default" "$M/default_composing"
  cp -r "$M/dynamic" "$M/dynamic_composing"
  RUNNER=unittest run_one metrics_queue_size "$d" "$M" "$LV" metrics_queue_size_test.py
  unset MAX_BATCH_SIZE MAX_QUEUE_DELAY_US
}

# L0_metrics/cpu_metrics_test.py is not taken: on 2 busy cores the reference reports a utilization of
# 1.0 sample after sample, which its variance check refuses (5 equal values in a row)

# ---------------------------------------------------------------- L0_grpc
grpc_client_plugin() {   # test.sh: the client plugin's headers reach the model as parameters
  local d=$WORK/L0_grpc; cd "$d" || return
  RUNNER=unittest run_one grpc_client_plugin "$d" "$d/client_plugin_models" \
    "--http-header-forward-pattern=.* --grpc-header-forward-pattern=.*" grpc_client_plugin_test.py
}

# ---------------------------------------------------------------- L0_backend_python subtests
bp_io() {   # io/test.sh, its last server: the CPU cases (the others move tensors to a GPU)
  local d=$WORK/L0_backend_python/io; cd "$d" || return
  rm -rf models
  for m in add_sub dlpack_io_identity_decoupled; do
    mkdir -p models/$m/1/; cp ../../python_models/$m/model.py models/$m/1/; cp ../../python_models/$m/config.pbtxt models/$m/
  done
  # test_requested_output_decoupled draws its GPU_OUTPUT flags at random, and its model moves the
  # output to a GPU when the first is true: all false here (the output filtering under test is the same)
  sed -i 's/gpu_output_data = np.random.rand(\*shape).astype(np.bool_)/gpu_output_data = np.zeros(shape, dtype=np.bool_)  # qa harness: CPU/' io_test.py
  grep -q "qa harness: CPU" io_test.py || { echo "io_test.py: GPU_OUTPUT not adapted" >&2; return; }
  run_one bp_io "$d" "$d/models" "$LV" \
    io_test.py::IOTest::test_requested_output_default io_test.py::IOTest::test_requested_output_decoupled
}

bp_logging() {   # logging/test.sh: one server per log setting, the same file each time
  local d=$WORK/L0_backend_python/logging; cd "$d" || return
  rm -rf models && mkdir -p models/identity_fp32_logging/1
  cp ../../python_models/identity_fp32_logging/config.pbtxt models/identity_fp32_logging/
  cp ../../python_models/identity_fp32_logging/model.py models/identity_fp32_logging/1/
  run_one bp_logging.default "$d" "$d/models" "" logging_test.py
  PRE_TEST="curl -s -o /dev/null -d '{\"log_verbose_level\":1}' localhost:8000/v2/logging" \
    run_one bp_logging.verbose "$d" "$d/models" "" logging_test.py
  PRE_TEST='for p in log_info log_warning log_error; do curl -s -o /dev/null -d "{\"$p\":false}" localhost:8000/v2/logging; done' \
    run_one bp_logging.disabled "$d" "$d/models" "" logging_test.py
}

bp_model_control() {
  local d=$WORK/L0_backend_python/model_control; cd "$d" || return
  rm -rf models && mkdir -p models/identity_fp32/1 models/simple_identity_fp32/1
  cp ../../python_models/identity_fp32/model.py models/identity_fp32/1/
  cp ../../python_models/identity_fp32/config.pbtxt models/identity_fp32/
  cp ../../python_models/simple_identity_fp32/config.pbtxt models/simple_identity_fp32/
  run_one bp_model_control "$d" "$d/models" "--model-control-mode=explicit $LV" model_control_test.py
}

bp_request_rescheduling() {   # two files on one server in test.sh; a fresh server each here
  local d=$WORK/L0_backend_python/request_rescheduling; cd "$d" || return
  rm -rf models
  for m in bls_request_rescheduling request_rescheduling_addsub iterative_sequence wrong_return_type; do
    mkdir -p models/$m/1/; cp ../../python_models/$m/model.py models/$m/1/; cp ../../python_models/$m/config.pbtxt models/$m/
  done
  local sargs="--model-control-mode=explicit --load-model=* $LV"
  export MODEL_NAME=bls_request_rescheduling
  run_one bp_request_rescheduling.bls "$d" "$d/models" "$sargs" ../test_infer_shm_leak.py
  unset MODEL_NAME
  run_one bp_request_rescheduling.grpc "$d" "$d/models" "$sargs" grpc_endpoint_test.py
}

# ---------------------------------------------------------------- L0_nan_inf, L0_optional_input
nan_inf() {
  local d=$WORK/L0_nan_inf; cd "$d" || return
  # np.NINF is gone from NumPy 2 (the clients' and inferd's): -np.inf, the same value, in the test
  # and in the model (the reference's stub has NumPy 1.26)
  sed -i 's/np\.NINF/-np.inf/' nan_inf_test.py models/nan_inf_output/1/model.py
  RUNNER=unittest run_one nan_inf "$d" "$d/models" "" nan_inf_test.py
}

OPTIONAL_INPUT_CASES="test_all_inputs test_optional_same_input test_optional_mix_inputs
  test_optional_mix_inputs_2 test_ensemble_all_inputs test_ensemble_optional_same_input
  test_ensemble_optional_mix_inputs test_ensemble_optional_mix_inputs_2
  test_ensemble_optional_pipeline test_ensemble_optional_connecting_tensor"

optional_input() {   # a fresh server per case, as test.sh
  local d=$WORK/L0_optional_input; cd "$d" || return
  local t
  mkdir -p models/ensemble_identity_2_float32/1 models/pipeline_identity_2_float32/1 \
    models/optional_connecting_tensor/1 models/identity_2_float32/1
  # identity_2_float32 (identity backend): a stand-in that answers only the inputs it was given
  cp "$QA_LIB/standin_model.py" models/identity_2_float32/1/model.py
  sed -i 's/^backend: "identity"/backend: "python"/' models/identity_2_float32/config.pbtxt
  for t in $OPTIONAL_INPUT_CASES; do
    RUNNER=unittest run_one "optional_input.$t" "$d" "$d/models" "$LV" optional_input_test.py "OptionalInputTest.$t"
  done
}

# ---------------------------------------------------------------- L0_model_namespacing
_namespacing_setup() {   # test.sh: a fresh copy of the test's repositories (the tests edit them)
  rm -rf test_dir && cp -r "$1" test_dir
  local m; for m in test_dir/*/*; do mkdir -p "$m/1"; done
}

model_namespacing() {   # 4 repositories x (POLL, EXPLICIT), a fresh server each
  local d=$WORK/L0_model_namespacing; cd "$d" || return
  local t suite mode
  export TRITON_QA_ROOT_DIR=$WORK TRITON_QA_PYTHON_MODEL_DIR=$d PYTHONDONTWRITEBYTECODE=1
  export NAMESPACE_TESTING_DIRCTORY=$d/test_dir
  for suite in ModelNamespacePoll ModelNamespaceExplicit; do
    mode="--model-control-mode=EXPLICIT"
    [ $suite = ModelNamespacePoll ] && mode="--model-control-mode=POLL --repository-poll-secs=2"
    for t in test_duplication test_dynamic_resolution test_ensemble_duplication test_no_duplication; do
      PRE_START="_namespacing_setup $t" RUNNER=unittest run_one "model_namespacing.$suite.$t" "$d" "$d/test_dir/addsub_repo" \
        "--model-namespacing=true --model-repository=$d/test_dir/subadd_repo $mode" test.py "$suite.$t"
    done
  done
  unset TRITON_QA_ROOT_DIR TRITON_QA_PYTHON_MODEL_DIR NAMESPACE_TESTING_DIRCTORY PYTHONDONTWRITEBYTECODE
}
