"""The Python backend's API end to end (issue 16), with tritonclient over HTTP and gRPC: async
executes overlapping on one instance, decoupled BLS streamed from sync, async and thread code,
custom metrics on /metrics, non-decoupled senders, sys.argv and SystemExit, triton_grpc_error."""

from __future__ import annotations

import queue
import re
import shutil
import time
import urllib.request
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

pytestmark = pytest.mark.timeout(120)
MODELS = Path(__file__).resolve().parents[1] / "fixtures" / "python_api"
X4 = np.arange(4, dtype=np.float32)


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InferdProcess]:
    root = tmp_path_factory.mktemp("python_api")
    repo = root / "models"
    shutil.copytree(MODELS, repo, ignore=shutil.ignore_patterns("__pycache__"))
    proc = InferdProcess(repo, root / "inferd.log").start()
    try:
        yield proc
    finally:
        assert proc.stop() == 0, proc.log()[-3000:]


def _http(srv: InferdProcess) -> httpclient.InferenceServerClient:
    return httpclient.InferenceServerClient(f"127.0.0.1:{srv.port}", concurrency=16)


def _grpc(srv: InferdProcess) -> grpcclient.InferenceServerClient:
    return grpcclient.InferenceServerClient(f"127.0.0.1:{srv.grpc_port}")


def _in(mod: Any, name: str, arr: np.ndarray[Any, Any]) -> Any:
    t = mod.InferInput(
        name, list(arr.shape), mod.np_to_triton_dtype(arr.dtype) if arr.dtype != object else "BYTES"
    )
    t.set_data_from_numpy(arr)
    return t


# -- async execute ---------------------------------------------------------------------------------


def test_async_executes_of_one_instance_overlap_over_http(srv: InferdProcess) -> None:
    """12 executes on one instance, each waiting until all 12 have arrived (io_async's "together"):
    they end only if they overlap, whatever the machine's speed."""
    client = _http(srv)
    together = {"group": "http", "together": 12}
    handles = [
        client.async_infer("io_async", [_in(httpclient, "INPUT0", X4 + i)], parameters=together)
        for i in range(12)
    ]
    results = [h.get_result() for h in handles]
    client.close()
    for i, r in enumerate(results):
        np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), X4 + i)


def test_async_executes_overlap_over_grpc(srv: InferdProcess) -> None:
    client = _grpc(srv)
    done: queue.Queue[Any] = queue.Queue()
    for i in range(8):
        client.async_infer(
            "io_async",
            [_in(grpcclient, "INPUT0", X4 + i)],
            lambda result, error: done.put((result, error)),
            parameters={"group": "grpc", "together": 8},
        )
    got = [done.get(timeout=60) for _ in range(8)]
    assert all(e is None for _, e in got), [str(e) for _, e in got]
    assert sorted(float(r.as_numpy("OUTPUT0")[0]) for r, _ in got) == list(range(8))
    client.close()


# -- decoupled BLS -------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["sync", "async", "thread"])
def test_decoupled_bls_is_streamed(srv: InferdProcess, mode: str) -> None:
    client = _grpc(srv)
    got: queue.Queue[Any] = queue.Queue()
    client.start_stream(lambda result, error: got.put((result, error)))
    client.async_stream_infer(
        "bls_stream", [_in(grpcclient, "IN", np.array([3], np.int32))], parameters={"mode": mode}
    )
    values = []
    for _ in range(3):
        result, error = got.get(timeout=10)
        assert error is None
        values.append(int(result.as_numpy("OUT")[0]))
    client.stop_stream()
    client.close()
    assert values == [3, 2, 1]


def test_a_cancelled_stream_reaches_the_async_model(srv: InferdProcess) -> None:
    client = _grpc(srv)
    got: queue.Queue[Any] = queue.Queue()
    client.start_stream(lambda result, error: got.put((result, error)))
    client.async_stream_infer("countdown", [_in(grpcclient, "IN", np.array([500], np.int32))])
    got.get(timeout=10)
    client.stop_stream(cancel_requests=True)
    client.close()
    # the model saw is_cancelled() and stopped: a new request is answered at once
    client = _grpc(srv)
    t0 = time.monotonic()
    client.start_stream(lambda result, error: got.put((result, error)))
    while not got.empty():
        got.get()
    client.async_stream_infer("countdown", [_in(grpcclient, "IN", np.array([1], np.int32))])
    result, error = got.get(timeout=10)
    assert error is None and int(result.as_numpy("OUT")[0]) == 1
    assert time.monotonic() - t0 < 2
    client.stop_stream()
    client.close()


# -- custom metrics --------------------------------------------------------------------------------------


def _metrics(srv: InferdProcess) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{srv.metrics_port}/metrics", timeout=10) as r:
        return str(r.read().decode())


def test_custom_metrics_are_served_with_the_servers_own(srv: InferdProcess) -> None:
    client = _http(srv)
    for route, x in (("a", 0.5), ("a", 5.0), ("b", 50.0)):
        client.infer(
            "metrics_app", [_in(httpclient, "IN", np.array([x], np.float32))], parameters={"route": route}
        )
    client.close()
    text = _metrics(srv)
    assert text.index("nv_inference_request_success") < text.index("app_requests_total")
    assert "# HELP app_requests_total requests by route\n# TYPE app_requests_total counter\n" in text
    routes = dict(re.findall(r'app_requests_total\{route="(\w+)"\} (\S+)', text))
    assert routes == {"a": "2", "b": "1"}
    assert 'app_values_bucket{le="1"} 1' in text
    assert 'app_values_bucket{le="10"} 2' in text
    assert 'app_values_bucket{le="+Inf"} 3' in text
    assert "app_values_sum 55.5" in text
    assert re.search(r'app_last_value\{instance="metrics_app_0_[01]"\} 50', text)


# -- non-decoupled senders -----------------------------------------------------------------------------


def test_a_batch_answered_by_return_by_sender_and_by_a_later_thread(srv: InferdProcess) -> None:
    client = _http(srv)
    with ThreadPoolExecutor(3) as pool:
        futures = [
            pool.submit(client.infer, "late_sender", [_in(httpclient, "IN", np.array([[i]], np.int32))])
            for i in (0, 1, 2)
        ]
        outs = [int(f.result().as_numpy("OUT")[0][0]) for f in futures]
    client.close()
    assert outs == [0, 10, 20]


# -- what a model's process looks like --------------------------------------------------------------


def test_models_see_an_empty_command_line(srv: InferdProcess) -> None:
    client = _http(srv)
    r = client.infer("argv_exit", [_in(httpclient, "IN", np.array([0], np.int32))])
    assert r.as_numpy("ARGV").tolist() == [b""]
    client.close()


@pytest.mark.parametrize(("how", "text"), [(1, "SystemExit: 3"), (2, "SystemExit: False")])
def test_system_exit_in_execute_is_answered(srv: InferdProcess, how: int, text: str) -> None:
    client = _grpc(srv)
    with pytest.raises(InferenceServerException) as info:
        client.infer("argv_exit", [_in(grpcclient, "IN", np.array([how], np.int32))], client_timeout=10)
    assert f"Failed to process the request(s) for model 'argv_exit_0', message: {text}" in str(info.value)
    client.close()


# -- triton_grpc_error ---------------------------------------------------------------------------------


def test_triton_grpc_error_ends_the_stream_with_the_errors_status(srv: InferdProcess) -> None:
    client = _grpc(srv)
    got: queue.Queue[Any] = queue.Queue()
    client.start_stream(lambda result, error: got.put((result, error)), headers={"triton_grpc_error": "true"})
    client.async_stream_infer("countdown", [_in(grpcclient, "IN", np.array([1], np.int32))])
    assert got.get(timeout=10)[1] is None
    client.async_stream_infer("no_such_model", [_in(grpcclient, "IN", np.array([1], np.int32))])
    result, error = got.get(timeout=10)
    assert result is None
    assert str(error.status()) == "StatusCode.NOT_FOUND"
    assert "Request for unknown model: 'no_such_model' is not found" in error.message()
    client.stop_stream()
    client.close()


def test_without_the_header_errors_stay_messages(srv: InferdProcess) -> None:
    client = _grpc(srv)
    got: queue.Queue[Any] = queue.Queue()
    client.start_stream(lambda result, error: got.put((result, error)))
    client.async_stream_infer("no_such_model", [_in(grpcclient, "IN", np.array([1], np.int32))])
    client.async_stream_infer("countdown", [_in(grpcclient, "IN", np.array([1], np.int32))])
    (r1, e1), (_, e2) = got.get(timeout=10), got.get(timeout=10)
    assert r1 is None and "no_such_model" in e1.message() and e2 is None  # the stream went on
    client.stop_stream()
    client.close()


def test_every_metrics_line_is_prometheus_text(srv: InferdProcess) -> None:
    # what the collector writes is the Prometheus text format: every sample line parses
    for line in _metrics(srv).splitlines():
        if line and not line.startswith("#"):
            name_labels, value = line.rsplit(" ", 1)
            float(value.replace("+Inf", "inf").replace("Nan", "nan"))
            assert re.match(r"^[a-zA-Z_:][a-zA-Z0-9_:]*(\{.*\})?$", name_labels), line
