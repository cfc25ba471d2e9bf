"""A Python model's own ``is_ready()`` (engine/readiness.py), asked by the model-ready endpoints behind a
real ``inferd serve``: HTTP (tritonclient and curl), gRPC ModelReady, in thread and in process
instances. True, False, an exception, a value that is not a bool, an async one, none at all, one
that changes its answer, and one that hangs (not ready within the timeout, never an error)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from conftest import InferdProcess

from inferd.engine.readiness import TIMEOUT_S

BODIES = {
    "ready_true": "    def is_ready(self):\n        return True\n",
    "ready_false": "    def is_ready(self):\n        return False\n",
    "ready_raises": "    def is_ready(self):\n        raise RuntimeError('database unreachable')\n",
    "ready_not_bool": "    def is_ready(self):\n        return 1\n",
    "ready_async": "    async def is_ready(self):\n        await asyncio.sleep(0)\n        return True\n",
    "ready_absent": "",
    # ready while a file named "up" exists beside the model
    "ready_flag": "    def is_ready(self):\n        return os.path.exists(os.path.join(self.dir, 'up'))\n",
    "ready_hangs": "    def is_ready(self):\n        time.sleep(60)\n        return True\n",
}
MODEL = """
import asyncio
import os
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.dir = args["model_repository"]

    def execute(self, requests):
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())])
            for r in requests
        ]

"""
CONFIG = """
name: "{name}"
backend: "python"
input [ {{ name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
instance_group [ {{ count: 2 kind: KIND_CPU }} ]
"""
EXPECTED = {
    "ready_true": True,
    "ready_false": False,
    "ready_raises": False,
    "ready_not_bool": False,
    "ready_async": True,
    "ready_absent": True,
}


@pytest.fixture(scope="module", params=["thread", "process"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[InferdProcess]:
    root = tmp_path_factory.mktemp(f"is_ready_{request.param}")
    repo = root / "models"
    for name, body in BODIES.items():
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(CONFIG.format(name=name))
        (repo / name / "1" / "model.py").write_text(MODEL + body)
    proc = InferdProcess(
        repo, root / "inferd.log", (f"--backend-config=python,execution-mode={request.param}",)
    )
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_the_ready_endpoints_ask_is_ready(server: InferdProcess, name: str) -> None:
    expected = EXPECTED[name]
    r = server.request("GET", f"/v2/models/{name}/ready")
    assert r.status == (200 if expected else 400), r.body
    if not expected:  # the reference's answer for a model that is not ready, not an error
        assert r.body == b'{"error":"Model version not ready"}'
    assert server.request("GET", f"/v2/models/{name}/versions/1/ready").status == r.status
    http = httpclient.InferenceServerClient(server.url)
    grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    try:
        assert http.is_model_ready(name) is expected
        assert grpc.is_model_ready(name) is expected
        assert grpc.is_model_ready(name, "1") is expected
        assert http.is_server_ready()  # the server's readiness does not ask the models
    finally:
        http.close()
        grpc.close()


def test_a_model_that_is_not_ready_still_serves_requests(server: InferdProcess) -> None:
    r = server.infer(
        "ready_false", {"inputs": [{"name": "IN", "datatype": "INT32", "shape": [1], "data": [4]}]}
    )
    assert r.status == 200 and r.json()["outputs"][0]["data"] == [4]


def test_is_ready_is_asked_each_time(server: InferdProcess) -> None:
    flag = server.repository / "ready_flag" / "up"
    url = f"{server.base_url}/v2/models/ready_flag/ready"

    def curl() -> str:
        return subprocess.run(
            ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", url],
            capture_output=True,
            text=True,
            check=True,
        ).stdout

    try:
        assert curl() == "400"
        flag.touch()
        assert curl() == "200"
    finally:
        flag.unlink(missing_ok=True)
    assert curl() == "400"


def test_a_hanging_is_ready_is_not_ready_within_the_timeout(server: InferdProcess) -> None:
    grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    try:
        for _ in range(2):  # the second call waits on the check still running, no longer
            t0 = time.monotonic()
            r = server.request("GET", "/v2/models/ready_hangs/ready", timeout=30)
            assert r.status == 400
            assert time.monotonic() - t0 < TIMEOUT_S + 3
        assert grpc.is_model_ready("ready_hangs") is False
        assert server.request("GET", "/v2/health/live").status == 200
    finally:
        grpc.close()


def test_unknown_models_are_not_ready(server: InferdProcess) -> None:
    assert server.request("GET", "/v2/models/nope/ready").status == 400
    assert server.request("GET", "/v2/models/ready_true/versions/9/ready").status == 400
