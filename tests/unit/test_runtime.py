"""The composition root: inferd.Server and inferd serve start and stop the same Runtime."""

from __future__ import annotations

import asyncio
import sys
import threading
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from inferd import Server
from inferd.options import ServerOptions
from inferd.runtime import FrontendError, Runtime
from waiting import wait_until

CONFIG = """
name: "slow_identity"
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
"""
#: beside model.py (Python models import their neighbours); the test imports it too, to hold executes
GATE_MODULE = """
import threading
import time

GATE = threading.Event()  # set by the test to let an execute finish
STARTED = threading.Event()
"""
MODEL = """
import triton_python_backend_utils as pb_utils
from {gate} import GATE, STARTED


class TritonPythonModel:
    def execute(self, requests):
        STARTED.set()
        GATE.wait(30)
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())]
            )
            for r in requests
        ]

    def finalize(self):
        with open({marker!r}, "w") as f:
            f.write("gate was " + ("open" if GATE.is_set() else "closed"))
"""


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    d = tmp_path / "repo" / "slow_identity"
    (d / "1").mkdir(parents=True)
    (d / "config.pbtxt").write_text(CONFIG)
    gate = f"gate_{uuid.uuid4().hex}"
    (d / "1" / f"{gate}.py").write_text(GATE_MODULE)
    marker = repr(str(tmp_path / "finalized"))
    (d / "1" / "model.py").write_text(MODEL.replace("{gate}", gate).replace("{marker!r}", marker))
    return tmp_path / "repo"


def _gates(repo: Path) -> list[Any]:
    """The model's gate modules (imported by the model at load, so already loaded): one a server,
    each under the name its server gives it (every loaded model's helper modules are its own)."""
    [path] = (repo / "slow_identity" / "1").glob("gate_*.py")
    return [m for m in list(sys.modules.values()) if getattr(m, "__file__", None) == str(path)]


def _gate(repo: Path) -> tuple[threading.Event, threading.Event]:
    """The events of the one server's model's gate module."""
    [module] = _gates(repo)
    return module.GATE, module.STARTED


def _open_gates(repo: Path) -> None:
    for module in _gates(repo):
        module.GATE.set()


def test_the_in_process_api_serves_grpc_and_metrics_too(repo: Path) -> None:
    with Server(repo, grpc_port=0, metrics_port=0) as server:
        gate, _ = _gate(repo)
        gate.set()
        assert server.http_port is None and server.grpc_port and server.metrics_port
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
        inp = grpcclient.InferInput("INPUT0", [2], "FP32").set_data_from_numpy(np.array([1, 2], np.float32))
        assert client.infer("slow_identity", [inp]).as_numpy("OUTPUT0").tolist() == [1, 2]
        client.close()
        with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10) as r:
            text = r.read().decode()
        assert 'nv_inference_request_success{model="slow_identity",version="1"} 1' in text


def test_stop_drains_the_request_in_flight_before_unloading(repo: Path, tmp_path: Path) -> None:
    server = Server(repo).start()
    gate, started = _gate(repo)
    answer: list[object] = []
    caller = threading.Thread(
        target=lambda: answer.append(server.infer("slow_identity", {"INPUT0": np.ones(3, np.float32)}))
    )
    caller.start()
    assert started.wait(10)
    stopper = threading.Thread(target=server.stop)
    stopper.start()
    assert not (tmp_path / "finalized").exists()  # still draining: nothing unloaded
    gate.set()
    stopper.join(30)
    caller.join(30)
    assert answer and np.asarray(answer[0]["OUTPUT0"]).tolist() == [1, 1, 1]  # type: ignore[index]
    assert (tmp_path / "finalized").read_text() == "gate was open"  # unloaded after the answer


def test_a_port_in_use_stops_what_started(repo: Path) -> None:
    async def main() -> None:
        first = Runtime(ServerOptions(model_repository=[repo], http_port=0, grpc_port=0, allow_metrics=False))
        await first.load()
        await first.start_frontends()
        taken = first.http.port
        second = Runtime(
            ServerOptions(model_repository=[repo], http_port=taken, grpc_port=0, allow_metrics=False)
        )
        await second.load()
        _open_gates(repo)
        with pytest.raises(FrontendError, match=f"failed to start HTTP service at 0.0.0.0:{taken}"):
            await second.start_frontends()
        assert second.grpc is not None and second.core.live() is False  # gRPC started, then stopped
        await first.stop(0)

    asyncio.run(main())


def test_reuse_http_port_lets_two_servers_share_the_http_port(repo: Path) -> None:
    """--reuse-http-port, as tritonserver's: every server sharing the port sets it."""

    async def main() -> None:
        def options(port: int) -> ServerOptions:
            return ServerOptions(
                model_repository=[repo],
                http_port=port,
                allow_grpc=False,
                allow_metrics=False,
                reuse_http_port=True,
            )

        first = Runtime(options(0))
        await first.load()
        await first.start_frontends()
        shared = first.http.port
        second = Runtime(options(shared))
        await second.load()
        _open_gates(repo)
        await second.start_frontends()  # no "address in use"
        assert second.http.port == shared
        await second.stop(0)
        await first.stop(0)

    asyncio.run(main())


def test_an_idle_keep_alive_connection_gets_an_answer_while_the_server_drains(repo: Path) -> None:
    # closing idle connections at once raced with requests already on their way (empty replies)
    import http.client
    import socket

    server = Server(repo, http_port=0).start()
    gate, started = _gate(repo)
    try:
        busy = http.client.HTTPConnection("127.0.0.1", server.http_port or 0, timeout=30)
        idle = http.client.HTTPConnection("127.0.0.1", server.http_port or 0, timeout=30)
        idle.request("GET", "/v2/health/live")
        first = idle.getresponse()
        first.read()
        assert first.status == 200 and first.getheader("Connection") != "close"  # kept alive
        body = b'{"inputs":[{"name":"INPUT0","shape":[1],"datatype":"FP32","data":[1]}]}'
        busy.request("POST", "/v2/models/slow_identity/infer", body)  # holds the drain open
        assert started.wait(10)
        stopper = threading.Thread(target=server.stop)
        stopper.start()

        # the drain has begun once new connections are refused
        def refused() -> bool:
            try:
                socket.create_connection(("127.0.0.1", server.http_port or 0), timeout=1).close()
            except OSError:
                return True
            return False

        wait_until(refused, "new connections to be refused", 10, interval=0)
        idle.request("GET", "/v2/health/live")  # on the connection that was idle when the drain began
        second = idle.getresponse()
        second.read()
        assert second.getheader("Connection") == "close"  # answered, and told to go elsewhere
        gate.set()
        answered = busy.getresponse()
        answered.read()
        assert answered.status == 200
        stopper.join(30)
        busy.close()
        idle.close()
    finally:
        gate.set()
        server.stop()
