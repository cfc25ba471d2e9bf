"""``inferd serve --workers 2`` behind real clients: the connections spread over two processes, and
statistics, metrics and model control are the whole server's; a process that dies is started again
(and catches up on the models loaded meanwhile); SIGTERM stops every process, SIGKILL of the
supervisor too; a process that cannot start stops the server."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from conftest import REPO_ROOT, InferdProcess

from repo_paths import FIXTURE_MODELS, REFERENCE_MODELS
from waiting import wait_until

#: a model that answers with the pid of the process that ran it
WHOAMI_CONFIG = """
name: "whoami"
backend: "python"
max_batch_size: 0
input [ { name: "IN", data_type: TYPE_INT32, dims: [ 1 ] } ]
output [ { name: "PID", data_type: TYPE_INT64, dims: [ 1 ] } ]
"""
WHOAMI = """
import os
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        pid = np.array([os.getpid()], np.int64)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("PID", pid)]) for _ in requests]
"""
ALL_SERVING = "all 2 workers serving"
START_TIMEOUT_S = 90.0


def _repository(root: Path) -> Path:
    repo = root / "models"
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(REFERENCE_MODELS / "add_sub", repo / "add_sub", ignore=ignore)
    shutil.copytree(FIXTURE_MODELS / "init_fails", repo / "init_fails", ignore=ignore)
    (repo / "whoami" / "1").mkdir(parents=True)
    (repo / "whoami" / "config.pbtxt").write_text(WHOAMI_CONFIG)
    (repo / "whoami" / "1" / "model.py").write_text(WHOAMI)
    return repo


def _wait_starting(server: InferdProcess, predicate: Callable[[], bool], what: str) -> None:
    """A start of serving processes, waited for as any server's start: as long as it moves."""
    assert server.wait_starting(predicate), (
        f"{what}: the server exited or its start stalled; log:\n{server.log()[-3000:]}"
    )


def _serving_processes(server: InferdProcess) -> set[int]:
    """The pids of the supervisor's children (the serving processes)."""
    assert server.proc is not None
    out = set()
    for p in os.listdir("/proc"):
        with contextlib.suppress(OSError, IndexError, ValueError), open(f"/proc/{p}/stat") as f:
            if int(f.read().rsplit(")", 1)[1].split()[1]) == server.proc.pid:
                out.add(int(p))
    return out


def _whoami_fresh_connection(server: InferdProcess) -> int:
    """One request on a new connection: the pid of the process the kernel gave it to."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        body = {"inputs": [{"name": "IN", "datatype": "INT32", "shape": [1], "data": [1]}]}
        conn.request("POST", "/v2/models/whoami/infer", json.dumps(body))
        answer = conn.getresponse()
        doc = json.loads(answer.read())
        assert answer.status == 200, doc
        return int(doc["outputs"][0]["data"][0])
    finally:
        conn.close()


def _ready_everywhere(server: InferdProcess, model: str, tries: int = 16) -> set[bool]:
    """What ``model``'s readiness is over ``tries`` new connections (a set of one answer when every
    process agrees)."""
    seen = set()
    for _ in range(tries):
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        try:
            conn.request("GET", f"/v2/models/{model}/ready")
            seen.add(conn.getresponse().status == 200)
        finally:
            conn.close()
    return seen


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[InferdProcess]:
    server = InferdProcess(_repository(tmp_path), tmp_path / "inferd.log", ("--workers", "2")).start()
    try:
        _wait_starting(server, lambda: ALL_SERVING in server.log(), ALL_SERVING)
        yield server
    finally:
        server.kill()


def test_connections_spread_and_statistics_and_metrics_are_the_whole_servers(workers: InferdProcess) -> None:
    children = _serving_processes(workers)
    assert len(children) == 2
    pids = [_whoami_fresh_connection(workers) for _ in range(40)]
    assert set(pids) == children, "both processes should have served some of 40 new connections"
    http_stats = httpclient.InferenceServerClient(workers.url).get_inference_statistics("whoami")
    (entry,) = http_stats["model_stats"]
    assert entry["inference_count"] == 40
    assert entry["inference_stats"]["success"]["count"] == 40
    grpc_client = grpcclient.InferenceServerClient(f"127.0.0.1:{workers.grpc_port}")
    try:
        grpc_stats = grpc_client.get_inference_statistics("whoami", as_json=True)
        assert int(grpc_stats["model_stats"][0]["inference_count"]) == 40
        everything = grpc_client.get_inference_statistics(as_json=True)
        assert {s["name"] for s in everything["model_stats"]} == {"add_sub", "whoami"}
    finally:
        grpc_client.close()
    conn = http.client.HTTPConnection("127.0.0.1", workers.metrics_port, timeout=30)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    assert 'nv_inference_count{model="whoami",version="1"} 40' in text
    # the machine's figures once, not once per process
    total = [line for line in text.splitlines() if line.startswith("nv_cpu_memory_total_bytes ")]
    assert len(total) == 1 and float(total[0].split()[1]) == os.sysconf("SC_PAGE_SIZE") * os.sysconf(
        "SC_PHYS_PAGES"
    )
    # an unknown model is this process's error, as one process answers it
    bad = http.client.HTTPConnection("127.0.0.1", workers.port, timeout=30)
    bad.request("GET", "/v2/models/nope/stats")
    answer = bad.getresponse()
    assert answer.status == 400
    assert json.loads(answer.read()) == {"error": "requested model 'nope' is not available"}


def test_a_process_that_dies_is_started_again(workers: InferdProcess) -> None:
    before = _serving_processes(workers)
    victim = min(before)
    os.kill(victim, signal.SIGKILL)
    # the other process serves on meanwhile (once the victim is gone: a connection the kernel had
    # queued on its socket is reset, as with any crashed server)
    wait_until(lambda: not os.path.exists(f"/proc/{victim}"), "the victim to be reaped", START_TIMEOUT_S)
    assert _whoami_fresh_connection(workers) != victim
    wait_until(
        lambda: len(_serving_processes(workers) - {victim}) == 2, "the process started again", START_TIMEOUT_S
    )
    _wait_starting(workers, lambda: workers.log().count(" ready in ") >= 3, "the new process to serve")
    assert "exited unexpectedly (signal 9 (SIGKILL)); starting it again" in workers.log()
    wait_until(
        lambda: len({_whoami_fresh_connection(workers) for _ in range(20)}) == 2,
        "both processes serving",
        START_TIMEOUT_S,
    )
    assert workers.stop() == 0
    assert not _serving_processes(workers)


def test_model_control_reaches_every_process(tmp_path: Path) -> None:
    server = InferdProcess(
        _repository(tmp_path),
        tmp_path / "inferd.log",
        ("--workers", "2", "--model-control-mode", "explicit", "--load-model", "whoami"),
    ).start()
    try:
        _wait_starting(server, lambda: ALL_SERVING in server.log(), ALL_SERVING)
        assert _ready_everywhere(server, "add_sub") == {False}
        client = httpclient.InferenceServerClient(server.url)
        client.load_model("add_sub")
        assert _ready_everywhere(server, "add_sub") == {True}
        a = np.arange(16, dtype=np.float32).reshape(1, 16)
        for _ in range(6):  # a new client each time: both processes answer
            fresh = httpclient.InferenceServerClient(server.url)
            inputs = [
                httpclient.InferInput("INPUT0", [1, 16], "FP32").set_data_from_numpy(a),
                httpclient.InferInput("INPUT1", [1, 16], "FP32").set_data_from_numpy(a),
            ]
            np.testing.assert_array_equal(fresh.infer("add_sub", inputs).as_numpy("OUTPUT0"), a + a)
            fresh.close()
        # a load that fails is the client's error (here, in the process that took it)
        with pytest.raises(Exception, match="init exploded on purpose"):
            client.load_model("init_fails")
        # a process started again loads what the others serve
        victim = min(_serving_processes(server))
        os.kill(victim, signal.SIGKILL)
        _wait_starting(server, lambda: server.log().count(" ready in ") >= 3, "the new process to serve")
        assert _ready_everywhere(server, "add_sub") == {True}
        grpc_client = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
        grpc_client.unload_model("add_sub")
        grpc_client.close()
        wait_until(lambda: _ready_everywhere(server, "add_sub") == {False}, "unloaded everywhere", 30)
        client.close()
    finally:
        code = server.stop()
    assert code == 0, server.log()[-4000:]


def _status_everywhere(server: InferdProcess, tries: int = 12) -> set[tuple[str, ...]]:
    """The region names each of ``tries`` new clients (new connections) is told."""
    seen = set()
    for _ in range(tries):
        client = httpclient.InferenceServerClient(server.url)
        seen.add(tuple(sorted(r["name"] for r in client.get_system_shared_memory_status())))
        client.close()
    return seen


def test_a_shared_memory_region_serves_on_every_connection(workers: InferdProcess) -> None:
    """perf_analyzer's way: one client registers, others (other connections) infer through it."""
    key = f"/inferd_workers_{os.getpid()}"
    region = shm.create_shared_memory_region("in", key, 128)
    try:
        a = np.arange(16, dtype=np.float32).reshape(1, 16)
        shm.set_shared_memory_region(region, [a, np.ones_like(a)])
        first = httpclient.InferenceServerClient(workers.url)
        first.register_system_shared_memory("in", key, 128)
        assert _status_everywhere(workers) == {("in",)}
        for _ in range(6):
            fresh = httpclient.InferenceServerClient(workers.url)
            inputs = [
                httpclient.InferInput("INPUT0", [1, 16], "FP32"),
                httpclient.InferInput("INPUT1", [1, 16], "FP32"),
            ]
            inputs[0].set_shared_memory("in", 64)
            inputs[1].set_shared_memory("in", 64, offset=64)
            np.testing.assert_array_equal(fresh.infer("add_sub", inputs).as_numpy("OUTPUT0"), a + 1)
            fresh.close()
        # a process started again maps what the others hold
        victim = min(_serving_processes(workers))
        os.kill(victim, signal.SIGKILL)
        _wait_starting(workers, lambda: workers.log().count(" ready in ") >= 3, "the new process to serve")
        assert _status_everywhere(workers) == {("in",)}
        grpc_client = grpcclient.InferenceServerClient(f"127.0.0.1:{workers.grpc_port}")
        grpc_client.unregister_system_shared_memory("in")
        grpc_client.close()
        assert _status_everywhere(workers) == {()}
        first.close()
    finally:
        shm.destroy_shared_memory_region(region)


def _get_fresh(server: InferdProcess, path: str) -> object:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        conn.request("GET", path)
        return json.loads(conn.getresponse().read())
    finally:
        conn.close()


def _post(server: InferdProcess, path: str, doc: object) -> object:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        conn.request("POST", path, json.dumps(doc))
        answer = conn.getresponse()
        body = json.loads(answer.read())
        assert answer.status == 200, body
        return body
    finally:
        conn.close()


def test_log_and_trace_settings_reach_every_process(workers: InferdProcess) -> None:
    """Applied just after the answer in the other process: every new connection sees them soon."""
    assert _post(workers, "/v2/logging", {"log_verbose_level": 1})["log_verbose_level"] == 1  # type: ignore[index]
    wait_until(
        lambda: {_get_fresh(workers, "/v2/logging")["log_verbose_level"] for _ in range(12)} == {1},  # type: ignore[index]
        "the verbose level everywhere",
        30,
    )
    assert _post(workers, "/v2/trace/setting", {"trace_rate": "7"})["trace_rate"] == "7"  # type: ignore[index]
    wait_until(
        lambda: {_get_fresh(workers, "/v2/trace/setting")["trace_rate"] for _ in range(12)} == {"7"},  # type: ignore[index]
        "the trace rate everywhere",
        30,
    )
    grpc_client = grpcclient.InferenceServerClient(f"127.0.0.1:{workers.grpc_port}")
    try:
        grpc_client.update_log_settings({"log_verbose_level": 0})
        grpc_client.update_trace_settings(settings={"trace_rate": "9"})
    finally:
        grpc_client.close()
    wait_until(
        lambda: {_get_fresh(workers, "/v2/logging")["log_verbose_level"] for _ in range(12)} == {0},  # type: ignore[index]
        "the verbose level from gRPC everywhere",
        30,
    )
    wait_until(
        lambda: {_get_fresh(workers, "/v2/trace/setting")["trace_rate"] for _ in range(12)} == {"9"},  # type: ignore[index]
        "the trace rate from gRPC everywhere",
        30,
    )


def test_sigkill_of_the_supervisor_stops_every_process(workers: InferdProcess) -> None:
    children = _serving_processes(workers)
    assert workers.proc is not None
    workers.proc.send_signal(signal.SIGKILL)
    workers.proc.wait(10)
    wait_until(lambda: not any(os.path.exists(f"/proc/{c}") for c in children), "the processes to exit", 30)


def test_a_process_that_cannot_start_stops_the_server(tmp_path: Path) -> None:
    """``--exit-on-error`` (the default) with a model that fails: every process exits, and so does
    the supervisor, with the failure's status."""
    repo = _repository(tmp_path)
    cmd = [sys.executable, "-m", "inferd", "serve", "--model-repository", str(repo), "--workers", "2"]
    cmd += ["--http-port", "0", "--grpc-port", "0", "--metrics-port", "0"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)
    assert done.returncode == 1, done.stderr[-3000:]
    assert "before it was ready; stopping" in done.stderr
    assert "failed to load all models" in done.stderr


@pytest.mark.parametrize("taken", ["grpc", "http"])
def test_a_second_server_on_the_same_ports_fails_to_start(workers: InferdProcess, taken: str) -> None:
    """The processes share their ports with SO_REUSEPORT, but not with another server: a second
    ``--workers`` server on a port of the first one's fails as one process would (it used to start
    and take half of the first one's connections), and the first serves on."""
    ports = {"http": 0, "grpc": 0, "metrics": 0}
    ports[taken] = workers.port if taken == "http" else workers.grpc_port
    cmd = [sys.executable, "-m", "inferd", "serve", "--model-repository", str(workers.repository)]
    cmd += ["--workers", "2", "--exit-on-error=false"]
    cmd += ["--http-port", str(ports["http"]), "--grpc-port", str(ports["grpc"])]
    cmd += ["--metrics-port", str(ports["metrics"])]
    second = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, cwd=REPO_ROOT)
    try:
        _, stderr = second.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        second.kill()
        pytest.fail(
            f"the second server started on the first one's {taken} port: {second.communicate()[1][-3000:]}"
        )
    assert second.returncode == 1, stderr[-3000:]
    service = "HTTP service" if taken == "http" else "GRPC service"
    assert f"error: failed to start {service} at 0.0.0.0:{ports[taken]}: " in stderr
    assert "in use" in stderr and "started worker" not in stderr
    assert {_whoami_fresh_connection(workers) for _ in range(20)} <= _serving_processes(workers)


def test_each_process_writes_its_own_trace_file(tmp_path: Path) -> None:
    trace = tmp_path / "trace.json"
    flags: tuple[str, ...] = ("--trace-config", f"triton,file={trace}", "--trace-config", "level=TIMESTAMPS")
    flags += ("--trace-config", "rate=1")
    server = InferdProcess(_repository(tmp_path), tmp_path / "inferd.log", ("--workers", "2", *flags)).start()
    try:
        _wait_starting(server, lambda: ALL_SERVING in server.log(), ALL_SERVING)
        pids = {_whoami_fresh_connection(server) for _ in range(30)}
        assert len(pids) == 2
    finally:
        assert server.stop() == 0
    traces = [json.loads((tmp_path / f"trace.json.{i}").read_text()) for i in (0, 1)]
    assert all(traces) and not trace.exists()
    assert sum(1 for doc in traces for t in doc if t.get("model_name") == "whoami") == 30
