"""Stateful models behind a real ``inferd serve``: the sequence batcher through tritonclient HTTP and
gRPC (unary and streaming), ``direct`` and ``oldest``, control inputs, implicit state on a Python
model and an ONNX model (built here with ``onnx.helper``), interleaved sequences, the idle timeout,
and the reference's answers to bad sequence requests (the server keeps serving the others)."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from conftest import InferdProcess
from tritonclient.utils import InferenceServerException

pytestmark = pytest.mark.timeout(180)

# OUT = IN + STATE_IN; STATE_OUT = OUT (the implicit state); CONTROLS = [START, END, READY] and
# CORRID_OUT = the CORRID control, as the model received them
ACCUMULATOR = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            def get(name):
                return pb_utils.get_input_tensor_by_name(request, name).as_numpy()

            x = get("IN")
            total = (x + get("STATE_IN")).astype(np.int32)
            controls = np.stack(
                [get("START").reshape(-1), get("END").reshape(-1).astype(np.int32), get("READY").reshape(-1)]
            ).astype(np.int32).reshape(x.shape[:-1] + (3,))
            corrid = get("CORRID")
            responses.append(
                pb_utils.InferenceResponse(
                    [
                        pb_utils.Tensor("OUT", total),
                        pb_utils.Tensor("STATE_OUT", total),
                        pb_utils.Tensor("CONTROLS", controls),
                        pb_utils.Tensor("CORRID_OUT", corrid),
                    ]
                )
            )
        return responses
"""


def _python_config(
    name: str, mbs: int, strategy: str = "", corrid: str = "TYPE_UINT64", idle_us: int = 0, extra: str = ""
) -> str:
    idle = f"max_sequence_idle_microseconds: {idle_us}" if idle_us else ""
    corrid_out = "TYPE_STRING" if corrid == "TYPE_STRING" else "TYPE_UINT64"
    return f"""
name: "{name}"
backend: "python"
max_batch_size: {mbs}
input [ {{ name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [
  {{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }},
  {{ name: "CONTROLS" data_type: TYPE_INT32 dims: [ 3 ] }},
  {{ name: "CORRID_OUT" data_type: {corrid_out} dims: [ 1 ] }}
]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
{extra}
sequence_batching {{
  {idle}
  {strategy}
  control_input [
    {{ name: "START" control [ {{ kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] }} ] }},
    {{ name: "END" control [ {{ kind: CONTROL_SEQUENCE_END fp32_false_true: [ 0, 1 ] }} ] }},
    {{ name: "READY" control [ {{ kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] }} ] }},
    {{ name: "CORRID" control [ {{ kind: CONTROL_SEQUENCE_CORRID data_type: {corrid} }} ] }}
  ]
  state [ {{ input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
}}
"""


def _onnx_config(name: str, strategy: str = "") -> str:
    return f"""
name: "{name}"
backend: "onnxruntime"
max_batch_size: 8
input [ {{ name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [
  {{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }},
  {{ name: "START_OUT" data_type: TYPE_INT32 dims: [ 1 ] }}
]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
sequence_batching {{
  {strategy}
  control_input [
    {{ name: "START" control [ {{ kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] }} ] }}
  ]
  state [
    {{
      input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_INT32 dims: [ 1 ]
      initial_state {{ data_type: TYPE_INT32 dims: [ 1 ] name: "start_at" data_file: "start_at.bin" }}
    }}
  ]
}}
"""


ONNX_START_AT = 1000  # the ONNX model's initial state (from a data file): its sums start there


def _onnx_accumulator() -> Any:
    """OUT = IN + STATE_IN, STATE_OUT = OUT, START_OUT = START: a graph with a state and a control."""
    import onnx
    from onnx import TensorProto, helper

    def io(name: str) -> Any:
        return helper.make_tensor_value_info(name, TensorProto.INT32, ["batch", 1])

    graph = helper.make_graph(
        [
            helper.make_node("Add", ["IN", "STATE_IN"], ["OUT"]),
            helper.make_node("Identity", ["OUT"], ["STATE_OUT"]),
            helper.make_node("Identity", ["START"], ["START_OUT"]),
        ],
        "accumulator",
        [io("IN"), io("STATE_IN"), io("START")],
        [io("OUT"), io("STATE_OUT"), io("START_OUT")],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="inferd-tests"
    )
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


PYTHON_MODELS = {
    "seq_direct": _python_config("seq_direct", 4),
    "seq_oldest": _python_config("seq_oldest", 4, "oldest { max_candidate_sequences: 4 }"),
    # its instance in a worker process: controls, state and fillers cross the process boundary
    "seq_process": _python_config(
        "seq_process", 4, extra='parameters { key: "execution_mode" value: { string_value: "process" } }'
    ),
    "seq_nobatch": _python_config("seq_nobatch", 0),
    "seq_strid": _python_config("seq_strid", 4, corrid="TYPE_STRING"),
    # one slot and a short idle timeout: a quiet sequence is released and its slot reused
    "seq_idle": _python_config("seq_idle", 0, idle_us=300_000),
    # one slot: a second sequence waits in the backlog
    "seq_oneslot": _python_config("seq_oneslot", 0, idle_us=30_000_000),
}
ONNX_MODELS = {
    "seq_onnx": _onnx_config("seq_onnx"),
    "seq_onnx_oldest": _onnx_config("seq_onnx_oldest", "oldest { max_candidate_sequences: 8 }"),
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InferdProcess]:
    import onnx

    repo = tmp_path_factory.mktemp("sequence") / "models"
    for name, config in PYTHON_MODELS.items():
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(config)
        (repo / name / "1" / "model.py").write_text(ACCUMULATOR)
    for name, config in ONNX_MODELS.items():
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "initial_state").mkdir()
        (repo / name / "config.pbtxt").write_text(config)
        (repo / name / "initial_state" / "start_at.bin").write_bytes(np.int32(ONNX_START_AT).tobytes())
        onnx.save(_onnx_accumulator(), str(repo / name / "1" / "model.onnx"))
    proc = InferdProcess(repo, Path(str(repo.parent)) / "inferd.log").start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def http(server: InferdProcess) -> Iterator[httpclient.InferenceServerClient]:
    c = httpclient.InferenceServerClient(server.url)
    yield c
    c.close()


@pytest.fixture
def grpc(server: InferdProcess) -> Iterator[grpcclient.InferenceServerClient]:
    c = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    yield c
    c.close()


def _batched(model: str) -> bool:
    return model not in ("seq_nobatch", "seq_idle", "seq_oneslot")


def _inputs(module: Any, model: str, value: int) -> list[Any]:
    shape = [1, 1] if _batched(model) else [1]
    t = module.InferInput("IN", shape, "INT32")
    t.set_data_from_numpy(np.full(shape, value, dtype=np.int32))
    return [t]


def _step(client: Any, module: Any, model: str, cid: int | str, value: int, start: bool, end: bool) -> Any:
    return client.infer(
        model, _inputs(module, model, value), sequence_id=cid, sequence_start=start, sequence_end=end
    )


def _run_sequence(client: Any, module: Any, model: str, cid: int | str, values: list[int]) -> list[Any]:
    last = len(values) - 1
    return [_step(client, module, model, cid, v, i == 0, i == last) for i, v in enumerate(values)]


def _first(result: Any, name: str) -> Any:
    return result.as_numpy(name).reshape(-1)[0]


# -- control inputs and implicit state on a Python model ---------------------------------------------


@pytest.mark.parametrize("model", ["seq_direct", "seq_oldest", "seq_nobatch", "seq_process"])
def test_http_sequence_sums_with_state_and_sees_its_controls(
    http: httpclient.InferenceServerClient, model: str
) -> None:
    results = _run_sequence(http, httpclient, model, 1001, [3, 4, 5])
    assert [int(_first(r, "OUT")) for r in results] == [3, 7, 12]
    controls = [r.as_numpy("CONTROLS").reshape(-1).tolist() for r in results]
    assert controls == [[1, 0, 1], [0, 0, 1], [0, 1, 1]]  # START, END, READY
    assert [int(_first(r, "CORRID_OUT")) for r in results] == [1001] * 3
    # the state is the server's: the client never sees it
    assert all(r.get_output("STATE_OUT") is None for r in results)


def test_grpc_unary_sequence_with_a_string_id(grpc: grpcclient.InferenceServerClient) -> None:
    results = _run_sequence(grpc, grpcclient, "seq_strid", "session-42", [10, 20, 30])
    assert [int(_first(r, "OUT")) for r in results] == [10, 30, 60]
    assert [_first(r, "CORRID_OUT") for r in results] == [b"session-42"] * 3
    assert results[0].get_output("STATE_OUT") is None


def test_a_numeric_id_and_the_same_string_are_two_sequences(http: httpclient.InferenceServerClient) -> None:
    _step(http, httpclient, "seq_strid", 77, 1, True, False)
    _step(http, httpclient, "seq_strid", "77", 100, True, False)
    assert int(_first(_step(http, httpclient, "seq_strid", 77, 1, False, True), "OUT")) == 2
    assert int(_first(_step(http, httpclient, "seq_strid", "77", 1, False, True), "OUT")) == 101


@pytest.mark.parametrize("model", ["seq_direct", "seq_oldest"])
def test_interleaved_sequences_over_http_keep_their_own_state(server: InferdProcess, model: str) -> None:
    """Six sequences (more than the 4 slots: some wait in the backlog) run at once, each from its own
    thread and client; each one's sums are its own."""

    def one(k: int) -> list[int]:
        client = httpclient.InferenceServerClient(server.url)
        try:
            values = [k, 1, 2, 3, 4]
            return [int(_first(r, "OUT")) for r in _run_sequence(client, httpclient, model, 2000 + k, values)]
        finally:
            client.close()

    with ThreadPoolExecutor(6) as pool:
        sums = list(pool.map(one, range(1, 7)))
    assert sums == [[k, k + 1, k + 3, k + 6, k + 10] for k in range(1, 7)]


# -- gRPC streaming ---------------------------------------------------------------------------------


class Collector:
    """A stream callback that queues results by request id."""

    def __init__(self) -> None:
        self.items: queue.Queue[tuple[Any, Any]] = queue.Queue()

    def __call__(self, result: Any, error: Any) -> None:
        self.items.put((result, error))

    def take(self, n: int, timeout: float = 60) -> list[tuple[Any, Any]]:
        return [self.items.get(timeout=timeout) for _ in range(n)]


@pytest.mark.parametrize("model", ["seq_direct", "seq_oldest", "seq_process", "seq_onnx", "seq_onnx_oldest"])
def test_grpc_stream_interleaves_sequences_in_order(
    grpc: grpcclient.InferenceServerClient, model: str
) -> None:
    """Three sequences' requests sent interleaved on one stream without waiting: each sequence's
    requests execute in order, with its own state."""
    got = Collector()
    grpc.start_stream(callback=got)
    try:
        n, steps = 3, 6
        for step in range(steps):
            for s in range(n):
                cid = 3000 + s
                grpc.async_stream_infer(
                    model,
                    _inputs(grpcclient, model, s + 1),
                    request_id=f"{cid}:{step}",
                    sequence_id=cid,
                    sequence_start=step == 0,
                    sequence_end=step == steps - 1,
                )
        answers: dict[str, int] = {}
        for result, error in got.take(n * steps):
            assert error is None, error
            answers[result.get_response().id] = int(_first(result, "OUT"))
    finally:
        grpc.stop_stream()
    base = ONNX_START_AT if "onnx" in model else 0
    for s in range(n):
        assert [answers[f"{3000 + s}:{step}"] for step in range(steps)] == [
            base + (s + 1) * (step + 1) for step in range(steps)
        ]


# -- implicit state on an ONNX model -----------------------------------------------------------------


@pytest.mark.parametrize("model", ["seq_onnx", "seq_onnx_oldest"])
def test_onnx_state_starts_from_its_data_file_and_accumulates(
    http: httpclient.InferenceServerClient, grpc: grpcclient.InferenceServerClient, model: str
) -> None:
    for client, module, cid in ((http, httpclient, 4001), (grpc, grpcclient, 4002)):
        results = _run_sequence(client, module, model, cid, [1, 2, 3])
        assert [int(_first(r, "OUT")) for r in results] == [1001, 1003, 1006]
        assert [int(_first(r, "START_OUT")) for r in results] == [1, 0, 0]
        assert results[0].get_output("STATE_OUT") is None


# -- the idle timeout ----------------------------------------------------------------------------------


def test_an_idle_sequence_is_released_and_its_slot_serves_another(
    http: httpclient.InferenceServerClient,
) -> None:
    """seq_idle has one slot and an idle timeout of 0.3 s. Waited for by state, not by a clock: the
    second sequence waits in the backlog until the idle timer releases the first one's slot; then
    the first's continuation is refused. The other sequences are one request each (START and END at
    once): no pause of a busy machine between two requests of theirs can outlast the timeout."""
    _step(http, httpclient, "seq_idle", 5001, 1, True, False)  # takes the only slot, then idles
    result = _step(http, httpclient, "seq_idle", 5002, 2, True, True)  # answered once 5001 is released
    assert int(_first(result, "OUT")) == 2
    assert result.as_numpy("CONTROLS").reshape(-1).tolist() == [1, 1, 1]  # START, END, READY
    with pytest.raises(InferenceServerException) as e:
        _step(http, httpclient, "seq_idle", 5001, 1, False, True)
    assert e.value.status() == "400"
    assert e.value.message() == (
        "inference request for sequence 5001 to model 'seq_idle' must specify the START flag on the first "
        "request of the sequence"
    )
    # the slot is free again (5002 ended): another sequence runs, its state its own
    result = _step(http, httpclient, "seq_idle", 5003, 3, True, True)
    assert int(_first(result, "OUT")) == 3


def test_a_backlogged_sequence_runs_once_the_slot_frees(
    server: InferdProcess, http: httpclient.InferenceServerClient
) -> None:
    """seq_oneslot has one slot: a second sequence's START waits until the first ends."""
    _step(http, httpclient, "seq_oneslot", 6001, 1, True, False)
    done: list[Any] = []

    def second() -> None:
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")  # a client per thread
        try:
            done.append(int(_first(_step(client, grpcclient, "seq_oneslot", 6002, 50, True, True), "OUT")))
        except Exception as e:  # the assertion below shows it
            done.append(e)
        finally:
            client.close()

    t = threading.Thread(target=second)
    t.start()
    t.join(0.1)
    assert not done  # still waiting for the slot
    assert int(_first(_step(http, httpclient, "seq_oneslot", 6001, 2, False, True), "OUT")) == 3
    t.join(30)
    assert done == [50]


# -- bad input ---------------------------------------------------------------------------------------


def _raw(model: str, params: dict[str, Any], batched: bool = True) -> dict[str, Any]:
    shape = [1, 1] if batched else [1]
    return {
        "inputs": [{"name": "IN", "shape": shape, "datatype": "INT32", "data": [1]}],
        "parameters": params,
    }


def test_bad_sequence_requests_get_the_reference_answers(server: InferdProcess) -> None:
    # a live sequence, before and after every bad request
    ok = server.infer("seq_direct", _raw("seq_direct", {"sequence_id": 7001, "sequence_start": True}))
    assert ok.status == 200, ok.body
    cases: list[tuple[dict[str, Any], int, str]] = [
        (
            {},
            400,
            "inference request to model 'seq_direct' must specify a non-zero or non-empty correlation ID",
        ),
        (
            {"sequence_id": 0, "sequence_start": True},
            400,
            "inference request to model 'seq_direct' must specify a non-zero or non-empty correlation ID",
        ),
        (
            {"sequence_id": 7002},
            400,
            "inference request for sequence 7002 to model 'seq_direct' must specify the START flag on the "
            "first request of the sequence",
        ),
        (
            {"sequence_id": "nope", "sequence_end": True},
            400,
            "inference request for sequence nope to model 'seq_direct' must specify the START flag on the "
            "first request of the sequence",
        ),
    ]
    for params, status, message in cases:
        r = server.infer("seq_direct", _raw("seq_direct", params))
        assert (r.status, r.error) == (status, message), params
    # an ID that is neither an unsigned integer nor a string: refused by the HTTP decoder
    for bad in (-1, 1.5, True):
        r = server.infer("seq_direct", _raw("seq_direct", {"sequence_id": bad, "sequence_start": True}))
        assert (r.status, r.error) == (
            500,
            "Unable to parse 'sequence_id': attempt to access JSON non-string as string",
        )
    # a request of batch size 2
    r = server.infer(
        "seq_direct",
        {
            "inputs": [{"name": "IN", "shape": [2, 1], "datatype": "INT32", "data": [1, 2]}],
            "parameters": {"sequence_id": 7003, "sequence_start": True},
        },
    )
    assert (r.status, r.error) == (
        400,
        "inference request to model 'seq_direct' must specify batch-size 1 due to requirements of sequence "
        "batcher",
    )
    # the live sequence went on undisturbed
    r = server.infer("seq_direct", _raw("seq_direct", {"sequence_id": 7001, "sequence_end": True}))
    assert r.status == 200, r.body
    outputs = {o["name"]: o["data"] for o in r.json()["outputs"]}
    assert outputs["OUT"] == [2] and "STATE_OUT" not in outputs


def test_bad_sequence_requests_over_grpc(grpc: grpcclient.InferenceServerClient) -> None:
    with pytest.raises(InferenceServerException) as e:
        _step(grpc, grpcclient, "seq_direct", 8001, 1, False, False)
    assert e.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "must specify the START flag on the first request of the sequence" in e.value.message()
    with pytest.raises(InferenceServerException) as e:
        grpc.infer("seq_direct", _inputs(grpcclient, "seq_direct", 1))
    assert "must specify a non-zero or non-empty correlation ID" in e.value.message()
    # on a stream, errors are responses and the stream goes on
    got = Collector()
    grpc.start_stream(callback=got)
    try:
        grpc.async_stream_infer("seq_direct", _inputs(grpcclient, "seq_direct", 1), sequence_id=8002)
        grpc.async_stream_infer(
            "seq_direct",
            _inputs(grpcclient, "seq_direct", 5),
            sequence_id=8003,
            sequence_start=True,
            sequence_end=True,
        )
        (r1, e1), (r2, e2) = got.take(2)
    finally:
        grpc.stop_stream()
    errors = [e for e in (e1, e2) if e is not None]
    results = [r for r in (r1, r2) if r is not None]
    assert len(errors) == 1 and "must specify the START flag" in errors[0].message()
    assert [int(_first(r, "OUT")) for r in results] == [5]
