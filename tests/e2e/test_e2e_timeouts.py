"""Timeouts behind a real ``inferd serve``, with tritonclient: the execute watchdog (a thread instance
that never answers, a process instance killed and restarted) and the dynamic batcher's queue
policy (a request's ``timeout`` parameter, the maximum queue size)."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from conftest import InferdProcess
from tritonclient.utils import InferenceServerException

from waiting import wait_until

# sleeps SLEEP_MS; a sleep of a second or more says so with a file in the model's folder meanwhile
SLEEPY = """
import os
import time
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.mark = os.path.join(args["model_repository"], "executing")

    def execute(self, requests):
        out = []
        for request in requests:
            ms = pb_utils.get_input_tensor_by_name(request, "SLEEP_MS").as_numpy()
            long = ms.reshape(-1)[0] >= 1000
            if long:
                open(self.mark, "w").close()
            time.sleep(float(ms.reshape(-1)[0]) / 1000)
            if long:
                os.remove(self.mark)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", ms.astype(np.int32))]))
        return out
"""


def _config(name: str, extra: str, max_batch_size: int = 0) -> str:
    return f"""
name: "{name}"
backend: "python"
max_batch_size: {max_batch_size}
input [ {{ name: "SLEEP_MS" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
{extra}
"""


MODELS = {
    "sleepy": _config("sleepy", 'parameters { key: "execute_timeout_secs" value: { string_value: "0.5" } }'),
    "sleepy_proc": _config(
        "sleepy_proc",
        'parameters { key: "execute_timeout_secs" value: { string_value: "0.5" } }\n'
        'parameters { key: "execution_mode" value: { string_value: "process" } }',
    ),
    "queued": _config(
        "queued",
        "dynamic_batching { default_queue_policy { default_timeout_microseconds: 20000000 "
        "allow_timeout_override: true max_queue_size: 2 } }",
        max_batch_size=1,
    ),
    "bad_timeout": _config(
        "bad_timeout", 'parameters { key: "execute_timeout_secs" value: { string_value: "soon" } }'
    ),
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InferdProcess]:
    repo = tmp_path_factory.mktemp("timeouts") / "models"
    for name, config in MODELS.items():
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(config)
        (repo / name / "1" / "model.py").write_text(SLEEPY)
    log = Path(str(repo.parent)) / "inferd.log"
    proc = InferdProcess(repo, log).start()
    try:
        yield proc
    finally:
        proc.stop()


def _http_inputs(ms: int, batched: bool = False) -> list[httpclient.InferInput]:
    shape = [1, 1] if batched else [1]
    return [
        httpclient.InferInput("SLEEP_MS", shape, "INT32").set_data_from_numpy(np.full(shape, ms, np.int32))
    ]


def _grpc_inputs(ms: int, batched: bool = False) -> list[grpcclient.InferInput]:
    shape = [1, 1] if batched else [1]
    return [
        grpcclient.InferInput("SLEEP_MS", shape, "INT32").set_data_from_numpy(np.full(shape, ms, np.int32))
    ]


def _until_ok(call: Callable[[], Any], timeout_s: float = 30) -> Any:
    """The model serves again (a stuck thread returned, a process restarted)."""
    return wait_until(lambda: (call(),), "the model to serve again", timeout_s, interval=0.05,
                      ignore=(InferenceServerException,))[0]  # fmt: skip


def test_a_hanging_thread_instance_fails_its_request_at_the_limit(server: InferdProcess) -> None:
    client = httpclient.InferenceServerClient(server.url, network_timeout=60)
    try:
        t0 = time.monotonic()
        with pytest.raises(InferenceServerException) as e:
            client.infer("sleepy", _http_inputs(8000))
        took = time.monotonic() - t0
        assert e.value.status() == "503"
        assert "the execute did not finish within 0.5 s (execute_timeout_secs)" in e.value.message()
        assert 0.5 <= took < 6, took  # well before the execute ends (8 s), also on a loaded machine
        # its one instance is still asleep: requests fail at once rather than wait behind it
        with pytest.raises(InferenceServerException, match="every instance is stuck"):
            client.infer("sleepy", _http_inputs(0))
        # another model is not affected
        assert client.infer("queued", _http_inputs(0, batched=True)).as_numpy("OUT").tolist() == [[0]]
        result = _until_ok(lambda: client.infer("sleepy", _http_inputs(7)))
        assert result.as_numpy("OUT").tolist() == [7]
    finally:
        client.close()


def test_a_hanging_process_instance_is_killed_and_restarts(server: InferdProcess) -> None:
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    try:
        t0 = time.monotonic()
        with pytest.raises(InferenceServerException) as e:
            client.infer("sleepy_proc", _grpc_inputs(60_000))
        assert time.monotonic() - t0 < 10  # the execute would sleep 60 s
        assert e.value.status() == "StatusCode.UNAVAILABLE"
        assert "its process is killed and restarts" in e.value.message()
        result = _until_ok(lambda: client.infer("sleepy_proc", _grpc_inputs(5)))
        assert result.as_numpy("OUT").tolist() == [5]
        assert "was killed: model 'sleepy_proc' version 1: the execute did not finish" in server.log()
    finally:
        client.close()


def test_a_request_timeout_rejects_it_in_the_queue(server: InferdProcess) -> None:
    client = httpclient.InferenceServerClient(server.url, network_timeout=60)
    gclient = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    try:
        busy = _background(server, 1500)
        _until_busy(server)
        with pytest.raises(InferenceServerException) as e:
            client.infer("queued", _http_inputs(0, batched=True), timeout=100_000)
        assert e.value.status() == "503" and e.value.message() == "Request timeout expired"
        with pytest.raises(InferenceServerException) as g:
            gclient.infer("queued", _grpc_inputs(0, batched=True), timeout=100_000)
        assert g.value.status() == "StatusCode.UNAVAILABLE" and g.value.message() == "Request timeout expired"
        # without its own timeout, a request waits (the policy's is 20 s) and is served
        waiting = _background(server, 3)
        assert busy.result(30) == [[1500]]
        assert waiting.result(30) == [[3]]
        stats = client.get_inference_statistics("queued")["model_stats"][0]["inference_stats"]
        assert stats["fail"]["count"] == 2
    finally:
        client.close()
        gclient.close()


def test_the_maximum_queue_size_refuses_more(server: InferdProcess) -> None:
    client = httpclient.InferenceServerClient(server.url, network_timeout=60)
    try:
        busy = _background(server, 1000)
        _until_busy(server)
        queued = [_background(server, 1) for _ in range(2)]
        _until_queued(server, 2)
        with pytest.raises(InferenceServerException) as e:
            client.infer("queued", _http_inputs(1, batched=True), request_id="r9")
        assert e.value.status() == "503"
        assert e.value.message() == "[request id: r9] Exceeds maximum queue size"
        assert busy.result(30) == [[1000]]
        assert [q.result(30) for q in queued] == [[[1]], [[1]]]
    finally:
        client.close()


def test_a_bad_execute_timeout_makes_the_model_unavailable(server: InferdProcess) -> None:
    r = server.request("POST", "/v2/repository/index", {})
    reasons = {m["name"]: m.get("reason", "") for m in r.json()}
    assert reasons["bad_timeout"] == (
        "Invalid argument: model 'bad_timeout': parameter 'execute_timeout_secs' must be a number of seconds "
        ">= 0, not 'soon'"
    )


_THREADS = ThreadPoolExecutor(4)


def _background(server: InferdProcess, ms: int) -> Future[Any]:
    """A request to "queued" on a thread of its own, with a client of its own (tritonclient's
    async_infer runs on gevent, which a blocked test thread never lets run)."""

    def call() -> Any:
        client = httpclient.InferenceServerClient(server.url, network_timeout=60)
        try:
            return client.infer("queued", _http_inputs(ms, batched=True)).as_numpy("OUT").tolist()
        finally:
            client.close()

    return _THREADS.submit(call)


def _until_busy(server: InferdProcess) -> None:
    """The model's one instance is in a long execute (the model's marker file exists)."""
    mark = server.repository / "queued" / "executing"
    deadline = time.monotonic() + 30
    while not mark.exists():
        assert time.monotonic() < deadline, "the model never started its long execute"
        time.sleep(0.005)


def _until_queued(server: InferdProcess, n: int) -> None:
    """``n`` requests wait in the model's queue (nv_inference_pending_request_count)."""
    line = f'nv_inference_pending_request_count{{model="queued",version="1"}} {n}'
    deadline = time.monotonic() + 30
    while (
        line not in urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics").read().decode()
    ):
        assert time.monotonic() < deadline, f"never {n} queued"
        time.sleep(0.005)
