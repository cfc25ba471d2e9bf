"""Triton C/C++ backends (issue 44): libtriton_<name>.so built from tests/fixtures/c_backends with the
system compiler, served by a real ``inferd serve`` through its backend host, checked with tritonclient
over HTTP and gRPC.

One server serves the whole repository of ``c_backends.repository``: the good backends from
``--backend-directory``, the bad ones (each way a library can fail to load) from their model's folders.
The bad ones fail their own load with the reference's texts; everything else serves."""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import InferdProcess, grpc_client, http_client

import c_backends
from waiting import wait_for_text, wait_until

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module", params=["plain", "sanitized", "process"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[InferdProcess]:
    """The server of every test here, three times: as built; with the host and backends built with
    AddressSanitizer and UBSan (preloaded into the server; any report ends it and fails the tests);
    and with every model's instances in worker processes (``execution-mode=process``: the same
    answers, statistics, streams, state, BLS, metrics and log lines from there)."""
    sanitize = request.param == "sanitized"
    root = tmp_path_factory.mktemp("c_backends")
    repo, backends = c_backends.repository(root, sanitize)
    args: tuple[str, ...] = ("--backend-directory", str(backends))
    if request.param == "process":
        args += ("--backend-config=execution-mode=process",)
    proc = InferdProcess(repo, root / "inferd.log", args, env=c_backends.server_env(sanitize)).start()
    if request.param == "process":
        assert "model 'c_identity' version 1: backend 'identity' runs in worker processes" in proc.log()
    try:
        yield proc
    finally:
        code = proc.stop()
        log = proc.log()
        assert code == 0, f"inferd exited with {code}; log:\n{log[-4000:]}"
        for report in ("ERROR: AddressSanitizer", "runtime error:", "ERROR: LeakSanitizer"):
            assert report not in log, log[log.index(report) - 2000 :]


def _fp32(rows: int = 2) -> np.ndarray[Any, Any]:
    return np.arange(rows * 4, dtype=np.float32).reshape(rows, 4)


def _assert_serving(server: InferdProcess) -> None:
    doc = {"inputs": [{"name": "INPUT0", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}
    r = server.infer("c_identity", doc)
    assert r.status == 200, r.body
    assert r.json()["outputs"][0]["data"] == [1.0, 2.0, 3.0, 4.0]


def _index(server: InferdProcess) -> dict[str, dict[str, Any]]:
    r = server.request("POST", "/v2/repository/index", {})
    assert r.status == 200, r.body
    return {m["name"]: m for m in r.json()}


def test_good_models_are_ready_and_bad_ones_say_why(server: InferdProcess) -> None:
    index = _index(server)
    for name in c_backends.GOOD_MODELS:
        assert index[name]["state"] == "READY", (name, index[name])
    for name, (_, why) in c_backends.BAD_MODELS.items():
        assert index[name]["state"] == "UNAVAILABLE", (name, index[name])
        assert why in index[name]["reason"], (name, index[name]["reason"])
    _assert_serving(server)


def test_a_backend_that_does_not_load_is_named_in_the_log(server: InferdProcess) -> None:
    log = server.log()
    assert "backend 'fail_init' (" in log and "libtriton_fail_init.so) did not load: fail_init refuses" in log
    assert "backend 'fail_missing_symbol' (" in log and "undefined symbol: TRITONSERVER_NoSuchFunction" in log


def test_identity_over_http_and_grpc(server: InferdProcess) -> None:
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    x = _fp32()
    with http_client(server) as c:
        i = httpclient.InferInput("INPUT0", [2, 4], "FP32")
        i.set_data_from_numpy(x)
        r = c.infer("c_identity", [i], request_id="req-1", parameters={"echo": "hello"})
        np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), x)
        body = r.get_response()
        assert body["id"] == "req-1"
        assert body["parameters"] == {"echo": "hello"}
        assert body["model_version"] == "1"
        # JSON data too (the tensor reaches the backend through its wire bytes)
        i = httpclient.InferInput("INPUT0", [2, 4], "FP32")
        i.set_data_from_numpy(x, binary_data=False)
        r = c.infer("c_identity", [i], parameters={"echo": 7})
        np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), x)
        assert r.get_response()["parameters"] == {"echo": 7}
    with grpc_client(server) as g:
        i = grpcclient.InferInput("INPUT0", [2, 4], "FP32")
        i.set_data_from_numpy(x)
        r = g.infer("c_identity", [i], request_id="req-2", parameters={"echo": True})
        np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), x)
        resp = r.get_response()
        assert resp.id == "req-2"
        assert resp.parameters["echo"].bool_param is True


def test_bytes_and_reshape(server: InferdProcess) -> None:
    import tritonclient.http as httpclient

    with http_client(server) as c:
        data = np.array([b"a", b"", "ünï".encode(), b"x" * 1000], dtype=np.object_)
        i = httpclient.InferInput("INPUT0", [4], "BYTES")
        i.set_data_from_numpy(data)
        r = c.infer("c_identity_bytes", [i])
        assert r.as_numpy("OUTPUT0").tolist() == data.tolist()
        # the backend sees [3, 2, 2] (the reshape) and answers in it; the client gets [3, 4] back
        counted = c.get_inference_statistics("c_identity_reshape")["model_stats"][0]
        x = np.arange(12, dtype=np.int32).reshape(3, 4)
        i = httpclient.InferInput("INPUT0", [3, 4], "INT32")
        i.set_data_from_numpy(x)
        r = c.infer("c_identity_reshape", [i])
        out = r.as_numpy("OUTPUT0")
        assert out.shape == (3, 4)
        np.testing.assert_array_equal(out, x)
    # counted a moment after its answer: the statistics test after it must not see it land late
    c_backends.settled_stats(server, "c_identity_reshape", counted["inference_stats"]["success"]["count"] + 1)


def test_statistics_are_what_the_backend_reported(server: InferdProcess) -> None:
    import tritonclient.http as httpclient

    with http_client(server) as c:
        before = c.get_inference_statistics("c_identity_reshape")["model_stats"][0]
        x = np.zeros((2, 4), dtype=np.int32)
        for _ in range(3):
            i = httpclient.InferInput("INPUT0", [2, 4], "INT32")
            i.set_data_from_numpy(x)
            c.infer("c_identity_reshape", [i])
    after = c_backends.settled_stats(
        server, "c_identity_reshape", before["inference_stats"]["success"]["count"] + 3
    )
    assert after["inference_stats"]["success"]["count"] - before["inference_stats"]["success"]["count"] == 3
    assert after["inference_count"] - before["inference_count"] == 6
    assert after["execution_count"] - before["execution_count"] == 3
    batch2 = next(b for b in after["batch_stats"] if b["batch_size"] == 2)
    assert batch2["compute_infer"]["count"] >= 3
    assert after["inference_stats"]["compute_infer"]["ns"] > 0


def test_the_dynamic_batcher_hands_the_backend_many_requests_at_once(server: InferdProcess) -> None:
    import tritonclient.http as httpclient

    # preferred_batch_size 4, max_queue_delay 2 s: four requests sent together reach one execute
    results: list[Any] = []
    with http_client(server, concurrency=4) as c:
        pending = []
        for k in range(4):
            i = httpclient.InferInput("INPUT0", [1, 4], "FP32")
            i.set_data_from_numpy(np.full((1, 4), k, dtype=np.float32))
            pending.append(c.async_infer("c_batch", [i]))
        results = [p.get_result() for p in pending]
    stats = c_backends.settled_stats(server, "c_batch", 4)
    for k, r in enumerate(results):
        np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), [[4.0 * k]])
        assert r.get_response()["parameters"] == {"execute_requests": 4, "execute_batch": 4}
    assert [b["batch_size"] for b in stats["batch_stats"]] == [4]
    assert stats["execution_count"] == 1 and stats["inference_count"] == 4


def _stream(server: InferdProcess, model: str, values: list[int], **kwargs: Any) -> list[Any]:
    """Every response of one decoupled request over a gRPC stream, the empty final one included."""
    import tritonclient.grpc as grpcclient

    got: queue.Queue[Any] = queue.Queue()
    with grpc_client(server) as g:
        g.start_stream(callback=lambda result, error: got.put((result, error)))
        i = grpcclient.InferInput("IN", [len(values)], "INT32")
        i.set_data_from_numpy(np.array(values, dtype=np.int32))
        g.async_stream_infer(model, [i], enable_empty_final_response=True, **kwargs)
        out = []
        while True:
            result, error = got.get(timeout=30)
            out.append((result, error))
            if error is not None or result.get_response().parameters["triton_final_response"].bool_param:
                break
        g.stop_stream()
    return out


def test_a_decoupled_backend_answers_from_its_own_threads(server: InferdProcess) -> None:
    out = _stream(server, "c_repeat", [5, 6, 7], request_id="r")
    assert [e for _, e in out] == [None] * 4
    values = [(r.as_numpy("OUT").tolist(), r.as_numpy("IDX").tolist()) for r, _ in out[:3]]
    assert values == [([5], [0]), ([6], [1]), ([7], [2])]
    final = out[3][0].get_response()
    assert final.parameters["triton_final_response"].bool_param and not final.outputs
    # none at all: only the final flag
    out = _stream(server, "c_repeat", [])
    assert len(out) == 1 and not out[0][0].get_response().outputs


def test_a_decoupled_backend_waits_for_a_slow_client(tmp_path: Path) -> None:
    """Flow control: with a window of 8 KiB of unread responses, 300 responses (about 1 KiB each) to a
    client that reads one every few milliseconds all arrive, in order: the backend's thread waited in
    its TRITONBACKEND_ResponseSend rather than the server holding them all."""
    import tritonclient.grpc as grpcclient

    repo, backends = c_backends.repository(tmp_path)
    cfg = repo / "c_repeat" / "config.pbtxt"
    cfg.write_text(cfg.read_text().replace('string_value: "20"', 'string_value: "0"'))
    proc = InferdProcess(
        repo,
        tmp_path / "inferd.log",
        ("--backend-directory", str(backends), "--stream-max-unread-bytes", "8192"),
        env=c_backends.server_env(),
    ).start()
    try:
        got: queue.Queue[Any] = queue.Queue()

        def slow(result: Any, error: Any) -> None:
            time.sleep(0.002)
            got.put((result, error))

        with grpc_client(proc) as g:
            g.start_stream(callback=slow)
            i = grpcclient.InferInput("IN", [300], "INT32")
            i.set_data_from_numpy(np.arange(300, dtype=np.int32))
            g.async_stream_infer("c_repeat", [i], enable_empty_final_response=True)
            values = []
            while True:
                result, error = got.get(timeout=60)
                assert error is None, error
                if result.get_response().parameters["triton_final_response"].bool_param:
                    break
                values.append(int(result.as_numpy("OUT")[0]))
            g.stop_stream()
        assert values == list(range(300))
    finally:
        assert proc.stop() == 0, proc.log()[-3000:]


def test_a_cancelled_request_reaches_the_backend(server: InferdProcess) -> None:
    import tritonclient.grpc as grpcclient

    with grpc_client(server) as g:
        i = grpcclient.InferInput("INPUT0", [1, 4], "FP32")
        i.set_data_from_numpy(_fp32(1))
        done: queue.Queue[Any] = queue.Queue()
        call = g.async_infer("c_slow", [i], lambda result, error: done.put(error), request_id="to-cancel")
        # the request is in the backend (its 5 s execute has begun) before the client gives up
        wait_for_text(server.log, "identity: executing request 'to-cancel' slowly", 10)
        call.cancel()
        error = done.get(timeout=10)
        assert error is not None and "CANCELLED" in str(error.status())
    wait_for_text(server.log, "identity: request 'to-cancel' was cancelled", 10)

    # the backend reported it failed (ReportStatistics): a failure in the model's statistics
    def inference_stats() -> Any:
        return server.request("GET", "/v2/models/c_slow/stats").json()["model_stats"][0]["inference_stats"]

    wait_until(lambda: inference_stats()["fail"]["count"], "a failure in c_slow's statistics", 10)
    stats = inference_stats()
    assert (stats["fail"]["count"], stats["success"]["count"]) == (1, 0)


def test_the_sequence_batcher_feeds_the_backend_its_controls(server: InferdProcess) -> None:
    import tritonclient.http as httpclient

    with http_client(server) as c:
        got = []
        for step, (start, end) in enumerate(((True, False), (False, False), (False, True))):
            i = httpclient.InferInput("INPUT0", [1, 1], "INT32")
            i.set_data_from_numpy(np.array([[10 + step]], dtype=np.int32))
            r = c.infer("c_sequence", [i], sequence_id=42, sequence_start=start, sequence_end=end)
            params = r.get_response().get("parameters", {})
            got.append((int(r.as_numpy("OUTPUT0")[0, 0]), int(r.as_numpy("OUTPUT1")[0, 0]), params))
    assert [(a, b) for a, b, _ in got] == [(10, 1), (11, 0), (12, 0)]
    # the request's correlation id and flags reach the backend (identity answers them as parameters)
    assert [p.get("correlation_id") for _, _, p in got] == [42, 42, 42]
    assert [p.get("request_flags") for _, _, p in got] == [1, None, 2]


def test_bls_from_a_c_backend(server: InferdProcess) -> None:
    """TRITONSERVER_ServerInferAsync: c_bls asks c_identity for each request (over both protocols, the
    execute waiting on its answer); a target that does not exist answers its error."""
    doc = {"inputs": [{"name": "INPUT0", "shape": [2, 4], "datatype": "FP32", "data": list(range(8))}]}
    for _ in range(3):
        r = server.infer("c_bls", doc)
        assert r.status == 200, r.body
        assert r.json()["outputs"][0]["data"] == [float(x) for x in range(8)]
    r = server.infer("c_bls_nowhere", doc)
    assert r.status == 404, r.body
    assert r.error == "Request for unknown model: 'nowhere' is not found"


def test_implicit_state_is_kept_between_a_sequences_requests(server: InferdProcess) -> None:
    """TRITONBACKEND_StateNew/StateBuffer/StateUpdate: c_accumulate's running sum, two sequences
    interleaved, each from the initial (zero) state; the state never reaches the client."""
    import tritonclient.grpc as grpcclient

    with grpc_client(server) as g:
        got: dict[int, list[int]] = {7: [], 8: []}
        steps = [
            (7, 1, True, False),
            (8, 10, True, False),
            (7, 2, False, False),
            (8, 20, False, True),
            (7, 3, False, True),
        ]
        for seq, value, start, end in steps:
            i = grpcclient.InferInput("INPUT0", [1, 1], "INT32")
            i.set_data_from_numpy(np.array([[value]], dtype=np.int32))
            r = g.infer("c_accumulate", [i], sequence_id=seq, sequence_start=start, sequence_end=end)
            assert [o.name for o in r.get_response().outputs] == ["OUTPUT0"]
            got[seq].append(int(r.as_numpy("OUTPUT0")[0, 0]))
    assert got == {7: [1, 3, 6], 8: [10, 30]}


def _input_bytes_metric(server: InferdProcess, model: str) -> float:
    import urllib.request

    text = (
        urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10).read().decode()
    )
    for line in text.splitlines():
        if line.startswith("identity_input_bytes{") and f'model="{model}"' in line:
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no identity_input_bytes series for {model} in /metrics:\n{text[-2000:]}")


def test_a_backends_custom_metrics_are_on_metrics(server: InferdProcess) -> None:
    """TRITONSERVER_MetricFamilyNew / MetricNew / MetricIncrement into the server's /metrics."""
    before = _input_bytes_metric(server, "c_identity_bytes")
    doc = {"inputs": [{"name": "INPUT0", "shape": [2], "datatype": "BYTES", "data": ["ab", "cde"]}]}
    assert server.infer("c_identity_bytes", doc).status == 200
    # two elements: a 4-byte length and the bytes each; the backend counts them after it sent the
    # response (identity.c), so the counter may move a moment after the answer
    wait_until(lambda: _input_bytes_metric(server, "c_identity_bytes") != before, "the counter to move", 10)
    assert _input_bytes_metric(server, "c_identity_bytes") - before == 4 + 2 + 4 + 3


def test_autocomplete_sets_the_config(server: InferdProcess) -> None:
    r = server.request("GET", "/v2/models/c_autofill/config")
    assert r.status == 200
    cfg = r.json()
    assert cfg["max_batch_size"] == 4
    assert [(t["name"], t["data_type"], t["dims"]) for t in cfg["input"]] == [("IN", "TYPE_FP32", [2])]
    assert [(t["name"], t["data_type"], t["dims"]) for t in cfg["output"]] == [("OUT", "TYPE_FP32", [2])]
    r = server.infer(
        "c_autofill", {"inputs": [{"name": "IN", "shape": [1, 2], "datatype": "FP32", "data": [1, 2]}]}
    )
    assert r.status == 200, r.body
    assert r.json()["outputs"][0]["data"] == [2.0, 4.0]


@pytest.mark.parametrize(
    ("model", "status", "text"),
    [
        ("c_fail_execute", 503, "fail_execute: the device is gone"),
        (
            "c_throw",
            500,
            "TRITONBACKEND_ModelInstanceExecute threw an exception: throwing: out of range in the model",
        ),
        ("c_no_final", 500, "the backend released the request without sending its final response"),
    ],
)
def test_execute_failures_answer_the_request_and_the_server_serves_on(
    server: InferdProcess, model: str, status: int, text: str
) -> None:
    doc = {"inputs": [{"name": "INPUT0", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}
    for _ in range(2):  # and again: nothing was left broken
        r = server.infer(model, doc)
        assert r.status == status, r.body
        assert text in r.error, r.error
    _assert_serving(server)


def test_a_response_after_the_final_one_is_refused_and_logged(server: InferdProcess) -> None:
    doc = {"inputs": [{"name": "INPUT0", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}
    r = server.infer("c_late_send", doc)
    assert r.status == 200, r.body
    wait_for_text(
        server.log, "model 'c_late_send': a response was sent after the request's final response; dropped", 5
    )
    wait_for_text(server.log, "late send refused: model 'c_late_send'", 5)


def test_instance_kinds_and_counts(server: InferdProcess) -> None:
    log = server.log()
    for name, kind in (("c_kinds_0_0", "MODEL"), ("c_kinds_0_1", "MODEL"), ("c_kinds_1_0", "CPU")):
        assert f"TRITONBACKEND_ModelInstanceInitialize: {name} ({kind} device 0)" in log, name


def test_backend_log_lines_carry_their_file_and_line(server: InferdProcess) -> None:
    log = server.log()
    assert "identity.c:" in log and "TRITONBACKEND_ModelInitialize: c_identity (version 1)" in log
    # the backend configuration it read (the message is escaped in the log line)
    assert '{\\"cmdline\\":{\\"auto-complete-config\\":\\"true\\",\\"backend-directory\\":' in log


def test_inputs_are_not_copied_on_the_way_in(tmp_path: Path, server: InferdProcess) -> None:
    """A large input is served without the server's memory growing by copies of it."""
    import tritonclient.http as httpclient

    x = np.ones((8, 4), dtype=np.float32)
    with http_client(server) as c:
        for _ in range(20):
            i = httpclient.InferInput("INPUT0", list(x.shape), "FP32")
            i.set_data_from_numpy(x)
            np.testing.assert_array_equal(c.infer("c_identity", [i]).as_numpy("OUTPUT0"), x)


def test_many_requests_at_once_from_many_clients(server: InferdProcess) -> None:
    import tritonclient.http as httpclient

    errors: list[BaseException] = []

    def client(k: int) -> None:
        try:
            with http_client(server) as c:
                for n in range(25):
                    x = np.full((1, 4), k * 100 + n, dtype=np.float32)
                    i = httpclient.InferInput("INPUT0", [1, 4], "FP32")
                    i.set_data_from_numpy(x)
                    np.testing.assert_array_equal(c.infer("c_identity", [i]).as_numpy("OUTPUT0"), x)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_load_unload_cycles_in_explicit_mode(tmp_path: Path) -> None:
    """A C model loaded, served, unloaded and loaded again (ModelInitialize and the finalizers each
    time, the backend opened once), and an instance_group update in place, while a decoupled model
    streams; the server stops cleanly."""
    repo, backends = c_backends.repository(tmp_path)
    proc = InferdProcess(
        repo,
        tmp_path / "inferd.log",
        ("--backend-directory", str(backends), "--model-control-mode", "explicit", "--log-verbose", "1"),
        env=c_backends.server_env(),
    ).start()
    doc = {"inputs": [{"name": "INPUT0", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}
    try:
        for cycle in range(3):
            r = proc.request("POST", "/v2/repository/models/c_identity/load", {})
            assert r.status == 200, r.body
            assert proc.infer("c_identity", doc).status == 200
            assert proc.request("POST", "/v2/repository/models/c_repeat/load", {}).status == 200
            out = _stream(proc, "c_repeat", [1, 2])
            assert [r.as_numpy("OUT").tolist() for r, _ in out[:2]] == [[1], [2]], cycle
            r = proc.request("POST", "/v2/repository/models/c_identity/unload", {})
            assert r.status == 200, r.body
            assert proc.infer("c_identity", doc).status != 200
        assert proc.request("POST", "/v2/repository/models/c_identity/load", {}).status == 200
        cfg = proc.request("GET", "/v2/models/c_identity/config").json()
        cfg["instance_group"] = [{"count": 3, "kind": "KIND_CPU"}]
        r = proc.request(
            "POST", "/v2/repository/models/c_identity/load", {"parameters": {"config": json.dumps(cfg)}}
        )
        assert r.status == 200, r.body
        for _ in range(6):
            assert proc.infer("c_identity", doc).status == 200
    finally:
        code = proc.stop()
        log = proc.log()
    assert code == 0, log[-4000:]
    assert log.count("TRITONBACKEND_Initialize: identity") == 1
    # each load: auto-complete's and the load's; the instance_group update: auto-complete's alone
    assert log.count("TRITONBACKEND_ModelInitialize: c_identity (version 1)") == 2 * 4 + 1
    assert "instances updated in place (1 kept, 2 created, 0 removed)" in log
