"""Process instances behind a real ``inferd serve``: every test model answers in process mode as in
thread mode, the workers do not outlive a server killed with SIGKILL, a model in a worker streams
a decoupled BLS request's responses to a gRPC client as they come (async_exec), a model that
segfaults or calls os._exit in the default configuration fails only its own requests, and a worker
past its memory limit restarts with a clear error while the other models serve."""

from __future__ import annotations

import os
import queue
import shutil
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from conftest import InferdProcess

from repo_paths import FIXTURE_MODELS
from waiting import wait_until


def _children(pid: int) -> set[int]:
    out = set()
    for p in os.listdir("/proc"):
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{p}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if int(fields[1]) == pid and b"inferd.backends.process.worker" in cmd:
            out.add(int(p))
    return out


def test_process_mode_serves_and_dies_with_the_server(start_server: Callable[..., Any]) -> None:
    server = start_server("--backend-config=python,execution-mode=process")
    client = httpclient.InferenceServerClient(server.url)
    try:
        a = np.arange(16, dtype=np.float32).reshape(1, 16)
        inputs = [
            httpclient.InferInput("INPUT0", [1, 16], "FP32").set_data_from_numpy(a),
            httpclient.InferInput("INPUT1", [1, 16], "FP32").set_data_from_numpy(np.ones_like(a)),
        ]
        result = client.infer("add_sub", inputs)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + 1)
        strings = np.array([b"x", b"yz"], dtype=np.object_)
        s = httpclient.InferInput("INPUT0", [2], "BYTES").set_data_from_numpy(strings)
        assert client.infer("identity_bytes", [s]).as_numpy("OUTPUT0").tolist() == [b"x", b"yz"]
        index = {m["name"]: m for m in client.get_model_repository_index()}
        assert "init exploded on purpose" in index["init_fails"]["reason"]  # the same reason as threads
    finally:
        client.close()
    workers = _children(server.proc.pid)
    assert workers
    server.proc.send_signal(signal.SIGKILL)
    server.proc.wait(10)
    wait_until(
        lambda: not any(os.path.exists(f"/proc/{w}") for w in workers),
        "the workers to exit with the server",
        10,
        detail=lambda: [w for w in workers if os.path.exists(f"/proc/{w}")],
    )


# decoupled, in a worker process: relays each response of the fixture model 'decoupled' (N responses,
# then the final flag alone), awaited through a decoupled BLS request, then OUT = its own process id
RELAY = """
import os

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            n = pb_utils.get_input_tensor_by_name(request, "N").as_numpy()
            bls = pb_utils.InferenceRequest(
                model_name="decoupled", inputs=[pb_utils.Tensor("INPUT0", n)], requested_output_names=["OUTPUT0"]
            )
            async for response in await bls.async_exec(decoupled=True):
                if response.has_error():
                    raise pb_utils.TritonModelException(response.error().message())
                for t in response.output_tensors():
                    sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", t.as_numpy())]))
            pid = np.array([os.getpid()], np.int32)
            sender.send(
                pb_utils.InferenceResponse([pb_utils.Tensor("OUT", pid)]),
                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
            )
        return None
"""
RELAY_CONFIG = """
name: "relay"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "N" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
parameters { key: "execution_mode" value: { string_value: "process" } }
"""


def test_a_worker_streams_decoupled_bls_responses_to_a_grpc_client(tmp_path: Path) -> None:
    repo = tmp_path / "models"
    shutil.copytree(
        FIXTURE_MODELS / "decoupled", repo / "decoupled", ignore=shutil.ignore_patterns("__pycache__")
    )
    (repo / "relay" / "1").mkdir(parents=True)
    (repo / "relay" / "config.pbtxt").write_text(RELAY_CONFIG)
    (repo / "relay" / "1" / "model.py").write_text(RELAY)
    server = InferdProcess(repo, tmp_path / "inferd.log").start()
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    results: queue.Queue[tuple[Any, Any]] = queue.Queue()
    try:
        client.start_stream(callback=lambda result, error: results.put((result, error)))
        n = grpcclient.InferInput("N", [1], "INT32").set_data_from_numpy(np.array([4], np.int32))
        client.async_stream_infer("relay", [n])
        got = []
        while True:
            result, error = results.get(timeout=30)
            assert error is None, error
            got.append(int(result.as_numpy("OUT")[0]))
            if result.get_response().parameters["triton_final_response"].bool_param:
                break
        client.stop_stream()
        *streamed, pid = got
        assert streamed == [0, 1, 2, 3]
        assert server.proc is not None and pid in _children(server.proc.pid)  # a worker sent them
    finally:
        client.close()
        code = server.stop()
    assert code == 0, server.log()[-4000:]


# -- the default configuration survives a crashing model (issue 25) ---------------------------------
# INPUT0 < 0: a segfault (ctypes) or os._exit, as CRASH says; else the identity
CRASHING = """
import ctypes
import os

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for r in requests:
            if pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()[0] < 0:
                if "{crash}" == "segfault":
                    ctypes.string_at(0)
                os._exit(3)
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
            for r in requests
        ]
"""
# 100 MiB more kept at each request with INPUT0 > 0 (a leak)
LEAKY = """
import numpy as np
import triton_python_backend_utils as pb_utils

KEPT = []


class TritonPythonModel:
    def execute(self, requests):
        for r in requests:
            if pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()[0] > 0:
                KEPT.append(np.ones(100 << 20, np.uint8))
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
            for r in requests
        ]
"""
IDENTITY_CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
{extra}
"""
IDENTITY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
            for r in requests
        ]
"""


def _repo_with(tmp_path: Path, name: str, source: str, extra: str = "") -> Path:
    repo = tmp_path / "models"
    for model, text, more in ((name, source, extra), ("other", IDENTITY, "")):
        (repo / model / "1").mkdir(parents=True)
        (repo / model / "config.pbtxt").write_text(IDENTITY_CONFIG.format(name=model, extra=more))
        (repo / model / "1" / "model.py").write_text(text)
    return repo


class _Loop:
    """A tritonclient HTTP client inferring on 'other' in a loop, counting what failed."""

    def __init__(self, server: InferdProcess) -> None:
        self.client = httpclient.InferenceServerClient(server.url, network_timeout=30)
        self.ok = 0
        self.failed: list[str] = []
        self._stop = False
        self._thread = threading.Thread(target=self._run)
        self._thread.start()

    def _run(self) -> None:
        x = httpclient.InferInput("INPUT0", [2], "FP32").set_data_from_numpy(np.array([1, 2], np.float32))
        while not self._stop:
            try:
                self.client.infer("other", [x])
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
        self._stop = True
        self._thread.join(60)
        self.client.close()


def _infer(server: InferdProcess, model: str, value: float) -> tuple[int, str]:
    r = server.infer(
        model, {"inputs": [{"name": "INPUT0", "shape": [1], "datatype": "FP32", "data": [value]}]}
    )
    return r.status, r.body.decode()


@pytest.mark.parametrize(("crash", "how"), [("segfault", "signal 11 (SIGSEGV)"), ("exit", "exit status 3")])
def test_a_crashing_model_in_the_default_configuration_takes_only_its_own_requests(
    tmp_path: Path, crash: str, how: str
) -> None:
    repo = _repo_with(tmp_path, "crashes", CRASHING.replace("{crash}", crash))
    server = InferdProcess(repo, tmp_path / "inferd.log").start()  # the default execution_mode: auto
    other = _Loop(server)
    try:
        other.served(20)
        status, body = _infer(server, "crashes", -1.0)
        assert status == 503 and how in body and "model 'crashes' instance 'crashes_0'" in body, body
        served = other.served(200)  # the other model's client goes on as if nothing happened
        # the model itself serves again (a new worker; within the 30 s window: how fast is measured in
        # RELIABILITY.md, not asserted, a busy machine took 5.5 s)
        wait_until(lambda: _infer(server, "crashes", 1.0)[0] == 200, "the crashed model to serve again", 30)
    finally:
        other.stop()
        code = server.stop()
    assert not other.failed, other.failed[:3]  # not even the in-flight ones: the server never stopped
    assert served >= 220
    log = server.log()
    assert "model 'crashes' (execution_mode auto) runs in worker processes" in log
    assert f"exited unexpectedly ({how})" in log
    assert code == 0, log[-3000:]


def test_a_process_model_past_its_memory_limit_restarts_with_a_clear_error(tmp_path: Path) -> None:
    limit = 300 << 20
    extra = f'parameters [ {{ key: "memory_limit_bytes" value: {{ string_value: "{limit}" }} }} ]'
    server = InferdProcess(_repo_with(tmp_path, "leaky", LEAKY, extra), tmp_path / "inferd.log").start()
    other = _Loop(server)
    errors = []
    try:
        other.served(20)
        for _ in range(8):  # 800 MiB without a limit; each answered, or refused with why
            status, body = _infer(server, "leaky", 1.0)
            if status != 200:
                errors.append((status, body))
        assert _infer(server, "leaky", 0.0)[0] == 200  # a worker under its limit again
        other.served(20)
    finally:
        other.stop()
        code = server.stop()
    log = server.log()
    assert "was killed: it used" in log and "more than its memory_limit_bytes of 300.0 MiB" in log
    for status, body in errors:  # a request that met the kill says why
        assert status == 503 and "more than its memory_limit_bytes of 300.0 MiB" in body, body
    assert not other.failed, other.failed[:3]
    assert code == 0, log[-3000:]
