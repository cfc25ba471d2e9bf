"""One slow load holds up no other model's load or unload (issue 42): a model whose initialize
waits for the test loads on a thread of the test, while other models load, serve and unload over
HTTP and gRPC; a second load of the slow model waits for the first and then finds nothing to do."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from conftest import InferdProcess

CONFIG = (
    'backend: "python"\nmax_batch_size: 0\n'
    'input [{name: "IN" data_type: TYPE_FP32 dims: [1]}]\n'
    'output [{name: "OUT" data_type: TYPE_FP32 dims: [1]}]\n'
)
MODEL = """
import os
import time
import triton_python_backend_utils as pb_utils

GATE = {gate!r}


class TritonPythonModel:
    def initialize(self, args):
        open(GATE + ".started", "w").close()
        while GATE and not os.path.exists(GATE):  # the test opens the gate when it is done
            time.sleep(0.01)

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN")
                .as_numpy())]) for r in requests]
"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[InferdProcess, Path]]:
    repo = tmp_path / "repository"
    gate = tmp_path / "gate"
    for name, model_gate in (("slow", str(gate)), ("quick", ""), ("other", "")):
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(CONFIG)
        (repo / name / "1" / "model.py").write_text(MODEL.format(gate=model_gate))
    proc = InferdProcess(
        repo, tmp_path / "server.log", ("--model-control-mode=explicit", "--load-model=other")
    ).start()
    try:
        yield proc, gate
    finally:
        gate.touch()  # a failing test must not leave the load waiting
        assert proc.stop() == 0, proc.log()[-3000:]


def _infer(client: httpclient.InferenceServerClient, model: str) -> list[float]:
    x = httpclient.InferInput("IN", [1], "FP32")
    x.set_data_from_numpy(np.array([5.0], dtype=np.float32))
    result: list[float] = client.infer(model, [x]).as_numpy("OUT").tolist()
    return result


def _raw_load(proc: InferdProcess, model: str) -> None:
    """A load on a thread of the test (tritonclient's HTTP client is not shared across threads)."""
    r = proc.request("POST", f"/v2/repository/models/{model}/load", {}, timeout=120)
    assert r.status == 200, r.error


def test_a_slow_load_holds_up_no_other_models_load_or_unload(server: tuple[InferdProcess, Path]) -> None:
    proc, gate = server
    http = httpclient.InferenceServerClient(proc.url, network_timeout=120)
    grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{proc.grpc_port}")
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        try:
            slow = pool.submit(_raw_load, proc, "slow")
            started = gate.with_name("gate.started")
            deadline = 600  # x 0.05 s: the slow model's initialize has begun (a file it writes)
            while not started.exists() and deadline and not slow.done():
                deadline -= 1
                concurrent.futures.wait([slow], timeout=0.05)
            assert started.exists(), proc.log()[-2000:]
            # meanwhile: another model loads (HTTP), serves, and unloads (gRPC); one loaded before too
            http.load_model("quick")
            assert _infer(http, "quick") == [5.0]
            grpc.unload_model("quick")
            assert not grpc.is_model_ready("quick")
            grpc.unload_model("other")
            assert not http.is_model_ready("other")
            # a second load of the slow model waits for the first
            again = pool.submit(grpc.load_model, "slow")
            assert not slow.done() and not again.done()
            assert not http.is_model_ready("slow")
            gate.touch()
            slow.result(timeout=120)
            again.result(timeout=120)
            assert _infer(http, "slow") == [5.0]
        finally:
            gate.touch()
            http.close()
            grpc.close()
    log = proc.log()
    assert log.count("successfully loaded 'slow' version 1") == 1  # the second found it unchanged
    assert "'slow' is unchanged since it was loaded: nothing to load" in log
