"""Shutdown and start-up bounds: SIGTERM honoured at any moment, --exit-timeout-secs a hard bound with
an error answer (not an empty reply) for what is still in flight, and a model whose initialize hangs
made UNAVAILABLE by --model-load-timeout-secs while the others serve."""

from __future__ import annotations

import http.client
import json
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HANGING_INIT = """
import time


class TritonPythonModel:
    def initialize(self, args):
        time.sleep(3600)

    def execute(self, requests):
        return []
"""
CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
"""
IDENTITY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())]
            )
            for r in requests
        ]
"""


def _wait_for(cond: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return False


def test_sigterm_past_the_exit_timeout_answers_the_request_in_flight(
    start_server: Callable[..., Any], tmp_path: Path
) -> None:
    server = start_server("--exit-timeout-secs=2")
    started = tmp_path / "started"
    answer: list[tuple[int, bytes]] = []

    def call() -> None:
        body = {
            "inputs": [{"name": "SLEEP_MS", "shape": [1], "datatype": "INT32", "data": [30000]}],
            "parameters": {"started_file": str(started)},
        }
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
        conn.request("POST", "/v2/models/parallel_sleep/infer", json.dumps(body))
        r = conn.getresponse()
        answer.append((r.status, r.read()))
        conn.close()

    caller = threading.Thread(target=call)
    caller.start()
    assert _wait_for(started.exists, 20)
    t0 = time.monotonic()
    server.proc.send_signal(signal.SIGTERM)
    server.proc.wait(20)
    took = time.monotonic() - t0
    caller.join(20)
    assert took < 2 + 3, f"exit took {took:.1f} s"
    assert server.proc.returncode == 0
    [(status, body)] = answer
    assert status == 503 and b"did not finish within 2 s" in body


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    for name, source in (("hangs", HANGING_INIT), ("fine", IDENTITY)):
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(CONFIG.format(name=name))
        (repo / name / "1" / "model.py").write_text(source)
    return repo


def _serve(repo: Path, log: Path, *args: str) -> tuple[subprocess.Popen[bytes], int]:
    port = _free_port()
    cmd = [sys.executable, "-m", "inferd", "serve", "--model-repository", str(repo), "--http-port", str(port),
           "--allow-grpc=false", "--allow-metrics=false", "--exit-on-error=false", *args]  # fmt: skip
    with open(log, "wb") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT), port


def _get(port: int, path: str) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def test_a_hanging_initialize_is_given_up_and_the_others_serve(tmp_path: Path) -> None:
    proc, port = _serve(_repo(tmp_path), tmp_path / "log", "--model-load-timeout-secs=2")
    try:

        def live() -> bool:
            try:
                return _get(port, "/v2/health/live")[0] == 200
            except OSError:
                return False

        assert _wait_for(live, 30), (tmp_path / "log").read_text()
        assert _get(port, "/v2/models/fine/ready")[0] == 200
        assert _get(port, "/v2/models/hangs/ready")[0] == 400
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        conn.request("POST", "/v2/repository/index", b"{}")
        index = {m["name"]: m for m in json.loads(conn.getresponse().read())}
        conn.close()
        assert index["hangs"]["state"] == "UNAVAILABLE"
        assert "did not finish within 2 s" in index["hangs"]["reason"]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(20)
    assert proc.returncode == 0  # the loader thread still sleeping did not hold the exit


def test_sigterm_while_a_model_loads_is_honoured(tmp_path: Path) -> None:
    log = tmp_path / "log"
    proc, _ = _serve(_repo(tmp_path), log, "--model-load-timeout-secs=0")
    # the model's initialize is running (it sleeps for an hour): the case under test
    assert _wait_for(lambda: "loading: hangs:1" in log.read_text(), 30), log.read_text()
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    proc.wait(10)
    assert time.monotonic() - t0 < 5
    assert "Stopped while loading models" in log.read_text()
