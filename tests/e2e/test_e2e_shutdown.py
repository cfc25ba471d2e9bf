"""Shutdown and start-up bounds: SIGTERM honoured at any moment, --exit-timeout-secs a hard bound with
an error answer (not an empty reply) for what is still in flight, and a model whose initialize hangs
made UNAVAILABLE by --model-load-timeout-secs while the others serve. On SIGTERM the server refuses new
connections and serves the open ones on: sequences under way end, a keep-alive client's requests are
answered (the last with ``Connection: close``), and what comes after the exit timeout gets 503; the
process is gone within the timeout and a second, whatever a model does."""

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

from conftest import InferdProcess

from waiting import wait_for_file, wait_for_text, wait_until

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
    wait_for_file(started, 20)
    t0 = time.monotonic()
    server.proc.send_signal(signal.SIGTERM)
    server.proc.wait(20)
    took = time.monotonic() - t0
    caller.join(20)
    assert took < 2 + 3, f"exit took {took:.1f} s"
    assert server.proc.returncode == 0
    [(status, body)] = answer
    assert status == 503 and b"did not finish within 2 s" in body


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    for name, source in (("hangs", HANGING_INIT), ("fine", IDENTITY)):
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(CONFIG.format(name=name))
        (repo / name / "1" / "model.py").write_text(source)
    return repo


def _serve(repo: Path, log: Path, *args: str) -> InferdProcess:
    """A server of its own on HTTP alone, once live."""
    return InferdProcess(repo, log, ("--allow-grpc=false", "--allow-metrics=false", *args)).start()


def _get(port: int, path: str) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def test_a_hanging_initialize_is_given_up_and_the_others_serve(tmp_path: Path) -> None:
    server = _serve(_repo(tmp_path), tmp_path / "log", "--model-load-timeout-secs=2")
    proc, port = server.proc, server.port
    assert proc is not None
    try:
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
    cmd = [sys.executable, "-m", "inferd", "serve", "--model-repository", str(_repo(tmp_path)), "--http-port=0",
           "--allow-grpc=false", "--allow-metrics=false", "--model-load-timeout-secs=0"]  # fmt: skip
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    # the model's initialize is running (it sleeps for an hour): the case under test
    wait_for_text(log, "loading: hangs:1", 30)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    proc.wait(10)
    assert time.monotonic() - t0 < 5
    assert "Stopped while loading models" in log.read_text()


# -- SIGTERM during sequences and a keep-alive load (issue 25): the open connections are served on --
SEQ_SLOW = """
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        slow = any(pb_utils.get_input_tensor_by_name(r, "IN").as_numpy()[0] == SLOW for r in requests)
        time.sleep(30 if slow else 0.04)
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())])
            for r in requests
        ]
"""
SLOW = 99  # IN that makes seq_slow's execute outlast any exit timeout here
SEQ_CONFIG = """
name: "seq_slow"
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { count: 3 kind: KIND_CPU } ]
sequence_batching { max_sequence_idle_microseconds: 60000000 }
"""
SEQUENCE_LENGTH = 50


def _sequence_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    for name, config, source in (
        ("seq_slow", SEQ_CONFIG, SEQ_SLOW.replace("SLOW", str(SLOW))),
        ("fine", CONFIG.format(name="fine"), IDENTITY),
    ):
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(config)
        (repo / name / "1" / "model.py").write_text(source)
    return repo


class _Record:
    """What each request got: (kind, sent at, outcome), thread-safe."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.rows: list[tuple[str, float, str]] = []

    def add(self, kind: str, sent: float, outcome: str) -> None:
        with self.lock:
            self.rows.append((kind, sent, outcome))

    def outcomes(self, kind: str, before: float | None = None, after: float | None = None) -> list[str]:
        with self.lock:
            return [
                o
                for k, t, o in self.rows
                if k == kind and (before is None or t < before) and (after is None or t >= after)
            ]


def _sequence(server: Any, index: int, record: _Record, progress: list[int]) -> None:
    """One sequence of SEQUENCE_LENGTH requests (tritonclient HTTP, the third over gRPC)."""
    import numpy as np
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    grpc = index == 2
    client: Any = (
        grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
        if grpc
        else httpclient.InferenceServerClient(server.url, network_timeout=60)
    )
    module: Any = grpcclient if grpc else httpclient
    try:
        for k in range(SEQUENCE_LENGTH):
            inp = module.InferInput("IN", [1], "INT32")
            inp.set_data_from_numpy(np.array([k], np.int32))
            sent = time.monotonic()
            try:
                r = client.infer(
                    "seq_slow",
                    [inp],
                    sequence_id=100 + index,
                    sequence_start=k == 0,
                    sequence_end=k == SEQUENCE_LENGTH - 1,
                )
                record.add("seq", sent, "ok" if int(r.as_numpy("OUT")[0]) == k else "wrong answer")
            except Exception as e:
                record.add("seq", sent, f"{type(e).__name__}: {e}")
                return
            progress[index] += 1
    finally:
        client.close()


def _keep_alive_load(port: int, record: _Record, stop: threading.Event) -> None:
    """Requests one after the other on a keep-alive connection (a new one after ``Connection: close``)."""
    body = json.dumps({"inputs": [{"name": "INPUT0", "shape": [2], "datatype": "FP32", "data": [1, 2]}]})
    conn: http.client.HTTPConnection | None = None
    while not stop.is_set():
        sent = time.monotonic()
        try:
            if conn is None:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            conn.request("POST", "/v2/models/fine/infer", body)
            r = conn.getresponse()
            r.read()
            record.add("load", sent, str(r.status))
            if r.getheader("Connection") == "close":
                conn.close()
                conn = None
        except OSError as e:  # refused once the listener closed, or a connection cut
            record.add("load", sent, type(e).__name__)
            conn = None
            if isinstance(e, ConnectionRefusedError):
                return


def test_sigterm_lets_sequences_and_keep_alive_requests_finish(tmp_path: Path) -> None:
    exit_timeout = 20
    server = InferdProcess(
        _sequence_repo(tmp_path), tmp_path / "log", (f"--exit-timeout-secs={exit_timeout}",)
    ).start()
    record, stop, progress = _Record(), threading.Event(), [0, 0, 0]
    threads = [threading.Thread(target=_sequence, args=(server, i, record, progress)) for i in range(3)]
    threads += [
        threading.Thread(target=_keep_alive_load, args=(server.port, record, stop)) for _ in range(16)
    ]
    try:
        for t in threads:
            t.start()
        # each sequence spans the signal
        wait_until(lambda: min(progress) >= 10, "10 requests of each sequence", 60, detail=lambda: progress)
        assert server.proc is not None
        signalled = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        for t in threads[:3]:
            t.join(60)
        try:  # a new connection is refused from the signal on
            socket.create_connection(("127.0.0.1", server.port), timeout=5).close()
            new_connection = "accepted"
        except OSError:
            new_connection = "refused"
        server.proc.wait(exit_timeout + 10)
        exited = time.monotonic() - signalled
    finally:
        stop.set()
        for t in threads:
            t.join(60)
        server.kill()
    log = server.log()
    seq = record.outcomes("seq")
    assert seq == ["ok"] * 3 * SEQUENCE_LENGTH, (seq[-3:], log[-3000:])  # every sequence to its end
    before = record.outcomes("load", before=signalled)
    assert before and set(before) == {"200"}, set(before)  # none sent before the signal failed
    after = set(record.outcomes("load", after=signalled))
    assert after <= {"200", "ConnectionRefusedError"}, after  # answered, or sent elsewhere: no empty reply
    assert new_connection == "refused"
    assert server.proc.returncode == 0, log[-3000:]
    assert exited < exit_timeout, exited  # it left once the sequences ended, not at the timeout
    assert "Received SIGTERM" in log and "live sequence(s)" in log


def test_requests_after_the_exit_timeout_are_answered_unavailable(tmp_path: Path) -> None:
    """A sequence that never ends holds the drain to its deadline: its requests are served on its
    connection until then; the one still executing is answered 503, and so is the next one."""
    exit_timeout = 3
    server = InferdProcess(
        _sequence_repo(tmp_path), tmp_path / "log", (f"--exit-timeout-secs={exit_timeout}",)
    ).start()
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)

    def send(value: int, start: bool = False) -> tuple[float, str]:
        body = {
            "inputs": [{"name": "IN", "shape": [1], "datatype": "INT32", "data": [value]}],
            "parameters": {"sequence_id": 7, "sequence_start": start},
        }
        try:
            conn.request("POST", "/v2/models/seq_slow/infer", json.dumps(body))
            r = conn.getresponse()
            return time.monotonic(), f"{r.status} {r.read().decode()}"
        except OSError as e:
            return time.monotonic(), type(e).__name__

    assert send(0, start=True)[1].startswith("200")
    assert server.proc is not None
    signalled = time.monotonic()
    server.proc.send_signal(signal.SIGTERM)
    served = [send(k)[1] for k in range(1, 4)]  # the sequence goes on, on its connection
    at, slow = send(SLOW)  # still executing at the deadline
    _, after = send(5)  # sent after the deadline, on the same connection
    server.proc.wait(exit_timeout + 5)
    exited = time.monotonic() - signalled
    conn.close()
    assert [a[:3] for a in served] == ["200"] * 3, served
    assert (
        slow
        == f'503 {{"error":"the server is shutting down: the request did not finish within {exit_timeout} s"}}'
    )
    assert at - signalled > exit_timeout / 2, at - signalled  # the drain waited for the sequence
    assert after == '503 {"error":"Server is stopping"}', after  # an answer, not an empty reply
    assert exited < exit_timeout + 1, exited


def test_exit_within_the_timeout_whatever_a_model_does(tmp_path: Path) -> None:
    """A thread model whose initialize never returns (loaded by the repository API, given up at the
    load timeout) and one whose execute spins on the event loop: SIGTERM still ends the server
    within --exit-timeout-secs and a second."""
    repo = _repo(tmp_path)
    (repo / "spins" / "1").mkdir(parents=True)
    (repo / "spins" / "config.pbtxt").write_text(CONFIG.format(name="spins"))
    (repo / "spins" / "1" / "model.py").write_text(SPINS)
    exit_timeout = 3
    server = _serve(
        repo,
        tmp_path / "log",
        "--model-control-mode=explicit",
        "--load-model=spins",
        "--model-load-timeout-secs=1",
        f"--exit-timeout-secs={exit_timeout}",
    )
    proc, port = server.proc, server.port
    assert proc is not None
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("POST", "/v2/repository/models/hangs/load", b"{}")
        r = conn.getresponse()
        assert r.status == 400 and b"did not finish within 1 s" in r.read()  # its thread still sleeps
        for _ in range(20):  # short executes: the pool runs them on the event loop
            conn.request("POST", "/v2/models/spins/infer", _body(1.0))
            assert conn.getresponse().read()
        spinning = threading.Thread(
            target=_post, args=(port, "/v2/models/spins/infer", _body(-1.0)), daemon=True
        )
        spinning.start()
        wait_for_text(tmp_path / "log", "spinning", 30)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(exit_timeout + 10)
        took = time.monotonic() - t0
    finally:
        proc.kill()
        proc.wait(10)
    assert took < exit_timeout + 1, took


# an execute that spins (holding the loop when it runs inline) once told to, and says so in the log
SPINS = """
import logging

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
            if x[0] < 0:
                logging.getLogger("inferd").warning("spinning")
                while True:
                    pass
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
            for r in requests
        ]
"""


def _body(value: float) -> bytes:
    return json.dumps(
        {"inputs": [{"name": "INPUT0", "shape": [1], "datatype": "FP32", "data": [value]}]}
    ).encode()


def _post(port: int, path: str, body: bytes) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request("POST", path, body)
        conn.getresponse().read()
    except OSError:
        pass  # the server is gone: what this test wanted
    finally:
        conn.close()


FINALIZING = """
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        return []

    def finalize(self):
        open({marker!r}, "w").write("finalized")
"""


def test_a_start_that_fails_unloads_the_models_that_loaded(tmp_path: Path) -> None:
    """ "failed to load all models": the models that did load are finalized before the exit, as the
    reference's are, and no false "did not unload within the exit timeout" is logged."""
    repo = tmp_path / "repository"
    marker = tmp_path / "finalized"
    for name, source in (
        ("good", FINALIZING.format(marker=str(marker))),
        ("broken", "raise RuntimeError('no')\n"),
    ):
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text('backend: "python"\nmax_batch_size: 0\n')
        (repo / name / "1" / "model.py").write_text(source)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "inferd",
            "serve",
            "--model-repository",
            str(repo),
            "--http-port",
            "0",
            "--grpc-port",
            "0",
            "--metrics-port",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1
    assert "failed to load all models" in proc.stderr
    assert marker.read_text() == "finalized"
    assert "did not unload within the exit timeout" not in proc.stderr
