"""What the reference's QA files found (qa/L0_backend_python bls, qa/L0_parameters, qa/L0_http
generate_endpoint), behind a real ``inferd serve``: a model that forks workers which end with SIGTERM
leaves the server serving, a model's functions pickle for multiprocessing.Pool and its forked workers
run BLS requests (through the server's socket for them, forked.py), HTTP headers are
forwarded by --http-header-forward-pattern, and a decoupled model's responses stream as it sends them
even after many quick requests."""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import InferdProcess

from repo_paths import FIXTURE_MODELS

FORKING = """
import multiprocessing
import os
import signal
import numpy as np
import triton_python_backend_utils as pb_utils


def square(x):
    return x * x


class TritonPythonModel:
    def execute(self, requests):
        pid = os.fork()
        if pid == 0:  # a child that ends as a pool's workers do: SIGTERM
            os.kill(os.getpid(), signal.SIGTERM)
            os._exit(0)
        os.waitpid(pid, 0)
        with multiprocessing.get_context("fork").Pool(2) as pool:  # pickles this module's function
            squares = pool.map(square, [1, 2, 3])
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array(squares, np.int32))]) for _ in requests]
"""
FORKING_CONFIG = """
name: "{name}"
backend: "python"
input [ {{ name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_INT32 dims: [ 3 ] }} ]
{extra}
"""
# the same model in a worker process, which ignores SIGTERM (the server decides when it stops): its
# pool's workers must not, or the pool's exit waits for them forever
IN_PROCESS = 'parameters { key: "execution_mode" value: { string_value: "process" } }'
# a model whose pool workers (forked from its execute) each run a BLS request, as qa's bls model
# test_multiprocess does; 20,000 INT32 each way: the tensors cross through shared memory
FORK_BLS = """
import multiprocessing
import numpy as np
import triton_python_backend_utils as pb_utils


def double(k):
    x = np.arange(20000, dtype=np.int32) + k
    request = pb_utils.InferenceRequest(
        model_name="doubler", inputs=[pb_utils.Tensor("IN", x)], requested_output_names=["OUT"]
    )
    response = request.exec()
    if response.has_error():
        return response.error().message()
    return int((pb_utils.get_output_tensor_by_name(response, "OUT").as_numpy() - 2 * x).sum())


def missing(_):
    request = pb_utils.InferenceRequest(model_name="nope", inputs=[], requested_output_names=[])
    return request.exec().error().message()


class TritonPythonModel:
    def execute(self, requests):
        with multiprocessing.get_context("fork").Pool(3) as pool:
            diffs = pool.map(double, [1, 2, 3, 4])
            errors = pool.map(missing, [0])
        out = np.array([str(d).encode() for d in diffs + errors], dtype=np.object_)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", out)]) for _ in requests]
"""
FORK_BLS_CONFIG = """
name: "fork_bls"
backend: "python"
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_STRING dims: [ 5 ] } ]
"""
DOUBLER = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", 2 * pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())]
            )
            for r in requests
        ]
"""
DOUBLER_CONFIG = """
name: "doubler"
backend: "python"
input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ -1 ] } ]
"""
# a decoupled model that sends three responses 300 ms apart (as qa's mock_llm)
STREAMER = """
import time
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            n = int(pb_utils.get_input_tensor_by_name(request, "N").as_numpy()[0])
            for i in range(n):
                if n > 1:
                    time.sleep(0.3)
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([i], np.int32))]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""
STREAMER_CONFIG = """
name: "streamer"
backend: "python"
model_transaction_policy { decoupled: true }
input [ { name: "N" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InferdProcess]:
    repo = tmp_path_factory.mktemp("qa_found") / "models"
    for name, model, config in (
        ("forking", FORKING, FORKING_CONFIG.format(name="forking", extra="")),
        ("forking_process", FORKING, FORKING_CONFIG.format(name="forking_process", extra=IN_PROCESS)),
        ("streamer", STREAMER, STREAMER_CONFIG),
        ("fork_bls", FORK_BLS, FORK_BLS_CONFIG),
        ("doubler", DOUBLER, DOUBLER_CONFIG),
    ):
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(config)
        (repo / name / "1" / "model.py").write_text(model)
    echo = FIXTURE_MODELS / "echo_request"
    (repo / "echo_request" / "1").mkdir(parents=True)
    (repo / "echo_request" / "config.pbtxt").write_text((echo / "config.pbtxt").read_text())
    (repo / "echo_request" / "1" / "model.py").write_text((echo / "1" / "model.py").read_text())
    proc = InferdProcess(
        repo, Path(str(repo.parent)) / "inferd.log", ("--http-header-forward-pattern", "MY_HEADER.*")
    )
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.mark.parametrize("model", ["forking", "forking_process"])
def test_a_model_forking_workers_that_end_with_sigterm_leaves_the_server_serving(
    server: InferdProcess, model: str
) -> None:
    """The workers' SIGTERM ends them only, also when it comes before they first ran (a busy
    machine: backends/python/fork_signals.py), so the pool's exit returns and the server serves on."""
    doc = {"inputs": [{"name": "IN", "shape": [1], "datatype": "INT32", "data": [0]}]}
    for _ in range(2):
        r = server.infer(model, doc)
        assert r.status == 200, r.body
        assert r.json()["outputs"][0]["data"] == [1, 4, 9]
    assert server.request("GET", "/v2/health/live").status == 200
    assert server.proc is not None and server.proc.poll() is None


def test_the_processes_a_model_forks_run_bls_requests(server: InferdProcess) -> None:
    doc = {"inputs": [{"name": "IN", "shape": [1], "datatype": "INT32", "data": [0]}]}
    for _ in range(2):  # the second time through the socket the first fork opened
        r = server.infer("fork_bls", doc)
        assert r.status == 200, r.body
        *diffs, missing = r.json()["outputs"][0]["data"]
        assert diffs == ["0", "0", "0", "0"]
        assert missing == (
            "Model nope - Error when running inference: Failed for execute the inference request. "
            "Model 'nope' is not ready."
        )
    assert server.proc is not None and server.proc.poll() is None


def test_http_headers_matching_the_pattern_reach_the_model(server: InferdProcess) -> None:
    doc = {
        "inputs": [{"name": "INPUT0", "shape": [1], "datatype": "INT32", "data": [1]}],
        "parameters": {"p": 1},
    }
    headers = {"my_header_1": "v1", "My_Header_2": "v2", "header_3": "v3", "Content-Type": "application/json"}
    for _ in range(2):  # the second request meets the cached header: still its own parameters
        r = server.infer("echo_request", doc, headers)
        assert r.status == 200, r.body
        outputs = {o["name"]: o["data"][0] for o in r.json()["outputs"]}
        params = json.loads(outputs["PARAMETERS"])
        assert params == {"p": 1, "my_header_1": "v1", "my_header_2": "v2"}


def test_a_decoupled_model_streams_as_it_sends_after_many_quick_requests(server: InferdProcess) -> None:
    for _ in range(50):  # enough executes for the pool to try running them on the loop
        assert server.request("POST", "/v2/models/streamer/generate_stream", {"N": 1}).status == 200
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        conn.request("POST", "/v2/models/streamer/generate_stream", body=json.dumps({"N": 3}))
        resp = conn.getresponse()
        arrivals: list[float] = []
        t0 = time.monotonic()
        while len(arrivals) < 3:
            line = resp.fp.readline()
            assert line, "the stream ended early"
            if line.startswith(b"data:"):
                arrivals.append(time.monotonic() - t0)
    finally:
        conn.close()
    # each event as the model sent it (300 ms apart), not all three when its execute ended
    assert arrivals[1] - arrivals[0] > 0.15 and arrivals[2] - arrivals[1] > 0.15, arrivals
