"""C/C++ backends in worker processes (``execution_mode: process``, issue 44): the backend's library is
loaded and executed in one worker process per instance, so a backend that crashes fails the requests
that instance held and the instance restarts, while the server and its other models serve on. Checked
with tritonclient over HTTP and gRPC against a real ``inferd serve``; the backends are built from
tests/fixtures/c_backends with the system compiler (``c_backends``)."""

from __future__ import annotations

import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from conftest import InferdProcess, grpc_client, http_client

import c_backends

pytestmark = pytest.mark.timeout(300)

_FP32_IO = """max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""
_PROCESS = 'parameters { key: "execution_mode" value { string_value: "process" } }\n'

#: name -> config (after ``name:``)
MODELS = {
    "c_crash": f'backend: "crash"\n{_FP32_IO}{_PROCESS}',
    "c_identity": f'backend: "identity"\n{_FP32_IO}',
    "c_identity_proc": f'backend: "identity"\n{_FP32_IO}{_PROCESS}',
    "c_identity_thread": f'backend: "identity"\n{_FP32_IO}{_PROCESS.replace("process", "thread")}',
    "c_repeat_proc": c_backends.GOOD_MODELS["c_repeat"] + _PROCESS,
    "c_batch_proc": c_backends.GOOD_MODELS["c_batch"] + _PROCESS,
    "c_accumulate_proc": c_backends.GOOD_MODELS["c_accumulate"] + _PROCESS,
}
CRASH = 13.0  # crash.c's CRASH_VALUE


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InferdProcess]:
    root = tmp_path_factory.mktemp("c_process")
    repo, backends = root / "models", root / "backends"
    for name, text in MODELS.items():
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(f'name: "{name}"\n{text}')
    for backend in ("crash", "identity", "repeat", "accumulate", "batch_sum"):
        c_backends.install(backend, backends / backend)
    proc = InferdProcess(
        repo, root / "inferd.log", ("--backend-directory", str(backends)), env=c_backends.server_env()
    ).start()
    try:
        yield proc
    finally:
        code = proc.stop()
        assert code == 0, f"inferd exited with {code}; log:\n{proc.log()[-4000:]}"


def _rows(value: float = 1.0, rows: int = 1) -> np.ndarray[Any, Any]:
    return np.full((rows, 4), value, dtype=np.float32) + np.arange(4, dtype=np.float32)


def _http(client: Any, model: str, x: np.ndarray[Any, Any], **kw: Any) -> Any:
    i = httpclient.InferInput("INPUT0", list(x.shape), "FP32")
    i.set_data_from_numpy(x)
    return client.infer(model, [i], **kw)


def _grpc(client: Any, model: str, x: np.ndarray[Any, Any], **kw: Any) -> Any:
    i = grpcclient.InferInput("INPUT0", list(x.shape), "FP32")
    i.set_data_from_numpy(x)
    return client.infer(model, [i], **kw)


def _pid_http(result: Any) -> int:
    return int(result.get_response()["parameters"]["pid"])


def _pid_grpc(result: Any) -> int:
    return int(result.get_response().parameters["pid"].int64_param)


def test_the_backend_answers_from_a_worker_process(server: InferdProcess) -> None:
    x = _rows(1.0, 2)
    with http_client(server) as h, grpc_client(server) as g:
        rh, rg = _http(h, "c_crash", x), _grpc(g, "c_crash", x)
    np.testing.assert_array_equal(rh.as_numpy("OUTPUT0"), x)
    np.testing.assert_array_equal(rg.as_numpy("OUTPUT0"), x)
    pid = _pid_http(rh)
    assert pid == _pid_grpc(rg) and pid != server.proc.pid
    log = server.log()
    assert f"model 'c_crash' instance 'c_crash_0' runs in process {pid}" in log
    assert "backend 'crash' runs in worker processes, one per instance (execution_mode process)" in log
    # the backend's own log line, written in the worker, is in the server's log
    assert f"crash: instance c_crash_0 runs in process {pid}" in log
    # the library never opened in the server's process (its auto-complete ran in a worker too)
    maps = Path(f"/proc/{server.proc.pid}/maps").read_text()
    assert "libtriton_crash.so" not in maps and "libtriton_identity.so" in maps


class _Loop:
    """A tritonclient HTTP client inferring on an in-process model in a loop, counting what failed."""

    def __init__(self, server: InferdProcess, model: str) -> None:
        self.client = httpclient.InferenceServerClient(server.url, network_timeout=30)
        self.model = model
        self.ok = 0
        self.failed: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                _http(self.client, self.model, _rows())
                self.ok += 1
            except Exception as e:
                self.failed.append(f"{type(e).__name__}: {e}")

    def served(self, n: int) -> int:
        """Wait until ``n`` more requests succeeded (the client goes on); the count now."""
        target = self.ok + n
        deadline = time.monotonic() + 60
        while self.ok < target and time.monotonic() < deadline and self._thread.is_alive():
            time.sleep(0.01)
        return self.ok

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)
        self.client.close()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_crash_in_execute_fails_only_its_request(server: InferdProcess, protocol: str) -> None:
    """SIGSEGV in TRITONBACKEND_ModelInstanceExecute: that request fails with UNAVAILABLE saying how the
    worker ended (the Python process host's error), the next request is served by a new worker, and
    another model's client never sees an error (the server never stopped)."""
    infer, pid_of = (_http, _pid_http) if protocol == "http" else (_grpc, _pid_grpc)
    other = _Loop(server, "c_identity")
    connect = http_client if protocol == "http" else grpc_client
    try:
        with connect(server) as c:
            before = pid_of(infer(c, "c_crash", _rows()))
            other.served(20)
            with pytest.raises(Exception) as crashed:
                infer(c, "c_crash", _rows(CRASH))
            message = str(crashed.value)
            assert (
                "the process of model 'c_crash' instance 'c_crash_0' exited unexpectedly (signal 11 (SIGSEGV)); "
                "the requests it held failed and the instance restarts" in message
            ), message
            assert ("503" if protocol == "http" else "UNAVAILABLE") in message, message
            served = other.served(50)  # the other model's client goes on
            after = infer(c, "c_crash", _rows(2.0))  # the next request starts a new worker
            np.testing.assert_array_equal(after.as_numpy("OUTPUT0"), _rows(2.0))
            assert pid_of(after) not in (before, server.proc.pid)
    finally:
        other.stop()
    assert not other.failed, other.failed[:3]
    assert served >= 70
    assert server.proc.poll() is None
    log = server.log()
    assert f"the process {before} of model 'c_crash' instance 'c_crash_0' exited unexpectedly" in log
    stats = server.request("GET", "/v2/models/c_crash/stats").json()["model_stats"][0]["inference_stats"]
    assert stats["fail"]["count"] >= 1


def _stats(server: InferdProcess, model: str) -> dict[str, Any]:
    # three answered requests (the fourth, naming an output the model lacks, is refused before it queues:
    # no statistics; the wait used to return at its deadline whatever it saw)
    return dict(c_backends.settled_stats(server, model, 3)["inference_stats"])


def test_identity_in_a_worker_answers_as_in_the_server(server: InferdProcess) -> None:
    """The same library, in process and in a worker: the same outputs, response parameters (request
    parameters echoed, flags), errors and statistics."""
    x = _rows(5.0, 3)
    answers: dict[str, list[Any]] = {}
    for model in ("c_identity_thread", "c_identity_proc"):
        with http_client(server) as h, grpc_client(server) as g:
            rh = _http(h, model, x, request_id="a", parameters={"echo": "hello"})
            rg = _grpc(g, model, x, request_id="b", parameters={"echo": 7})
            i = httpclient.InferInput("INPUT0", [1, 4], "FP32").set_data_from_numpy(_rows())
            rh2 = h.infer(model, [i], outputs=[httpclient.InferRequestedOutput("OUTPUT0", binary_data=False)])
            with pytest.raises(Exception) as bad:  # the backend's own error
                h.infer(
                    model,
                    [i],
                    outputs=[
                        httpclient.InferRequestedOutput("OUTPUT0"),
                        httpclient.InferRequestedOutput("OTHER"),
                    ],
                )
        response = rh.get_response()
        response.pop("model_name")
        answers[model] = [
            rh.as_numpy("OUTPUT0").tolist(),
            response,
            rg.as_numpy("OUTPUT0").tolist(),
            rg.get_response().parameters["echo"].int64_param,
            rh2.get_response()["outputs"],
            str(bad.value).replace(model, "M"),
        ]
    assert answers["c_identity_thread"] == answers["c_identity_proc"]
    assert answers["c_identity_thread"][0] == x.tolist()
    s_thread, s_proc = _stats(server, "c_identity_thread"), _stats(server, "c_identity_proc")
    for key in ("success", "fail"):
        assert s_proc[key]["count"] == s_thread[key]["count"], (key, s_thread, s_proc)
    # the backend's custom metric, counted in the worker, is on the server's /metrics
    with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics") as r:
        metrics = r.read().decode()
    counted = {
        line.split("{")[1].split(",")[0]: float(line.split()[-1])
        for line in metrics.splitlines()
        if line.startswith("identity_input_bytes{")
    }
    assert counted['model="c_identity_proc"'] == counted['model="c_identity_thread"'] > 0, counted


def test_the_dynamic_batcher_hands_the_worker_many_requests_at_once(server: InferdProcess) -> None:
    # preferred_batch_size 4, max_queue_delay 2 s: four requests sent together reach one execute
    with http_client(server, concurrency=4) as c:
        pending = [c.async_infer("c_batch_proc", [_input(k)]) for k in range(4)]
        results = [p.get_result() for p in pending]
    stats = c_backends.settled_stats(server, "c_batch_proc", 4)
    for k, r in enumerate(results):
        np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), [[4.0 * k]])
        assert r.get_response()["parameters"] == {"execute_requests": 4, "execute_batch": 4}
    assert [b["batch_size"] for b in stats["batch_stats"]] == [4]
    assert stats["execution_count"] == 1 and stats["inference_count"] == 4


def _input(k: int) -> Any:
    return httpclient.InferInput("INPUT0", [1, 4], "FP32").set_data_from_numpy(np.full((1, 4), k, np.float32))


def test_a_decoupled_backend_streams_from_its_worker(server: InferdProcess) -> None:
    import queue

    got: queue.Queue[Any] = queue.Queue()
    with grpc_client(server) as g:
        g.start_stream(callback=lambda result, error: got.put((result, error)))
        i = grpcclient.InferInput("IN", [3], "INT32").set_data_from_numpy(np.array([5, 6, 7], np.int32))
        g.async_stream_infer("c_repeat_proc", [i], request_id="r", enable_empty_final_response=True)
        out = []
        while True:
            result, error = got.get(timeout=30)
            assert error is None, error
            if result.get_response().parameters["triton_final_response"].bool_param:
                break
            out.append((int(result.as_numpy("OUT")[0]), int(result.as_numpy("IDX")[0])))
        g.stop_stream()
    assert out == [(5, 0), (6, 1), (7, 2)]


def test_implicit_state_in_a_worker(server: InferdProcess) -> None:
    with grpc_client(server) as g:
        got: dict[int, list[int]] = {7: [], 8: []}
        for seq, value, start, end in [
            (7, 1, True, False),
            (8, 10, True, False),
            (7, 2, False, False),
            (8, 20, False, True),
            (7, 3, False, True),
        ]:
            i = grpcclient.InferInput("INPUT0", [1, 1], "INT32")
            i.set_data_from_numpy(np.array([[value]], dtype=np.int32))
            r = g.infer("c_accumulate_proc", [i], sequence_id=seq, sequence_start=start, sequence_end=end)
            got[seq].append(int(r.as_numpy("OUTPUT0")[0, 0]))
    assert got == {7: [1, 3, 6], 8: [10, 30]}
