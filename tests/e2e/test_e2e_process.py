"""Process instances behind a real ``inferd serve``: every test model answers in process mode as in
thread mode, the workers do not outlive a server killed with SIGKILL, and a model in a worker streams
a decoupled BLS request's responses to a gRPC client as they come (async_exec)."""

from __future__ import annotations

import os
import queue
import shutil
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from conftest import InferdProcess

from repo_paths import FIXTURE_MODELS


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
        if int(fields[1]) == pid and b"inferd.backends.python.worker" in cmd:
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
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(os.path.exists(f"/proc/{w}") for w in workers):
        time.sleep(0.05)
    alive = [w for w in workers if os.path.exists(f"/proc/{w}")]
    assert not alive, f"workers outlived the server: {alive}"


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
