"""Load on demand under --model-memory-budget (engine/on_demand.py) behind a real ``inferd serve``:
the first request loads its model (tritonclient HTTP and gRPC, curl, the in-process API), the least
recently used idle model is unloaded to fit, concurrent requests share one load, a request whose
model is being unloaded succeeds, a model over the whole budget gets a clear error, and the
flag's bad values are refused at start. The test models allocate a known amount of resident memory
in ``initialize``."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from conftest import InferdProcess
from tritonclient.utils import InferenceServerException

import inferd
from repo_paths import REFERENCE_MODELS

# resident memory of MIB mebibytes while loaded; finalize takes FINALIZE_S seconds (an unload in
# progress long enough for requests to arrive meanwhile)
HOG = """
import json
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        params = json.loads(args["model_config"])["parameters"]
        self.finalize_s = float(params["FINALIZE_S"]["string_value"])
        self.block = np.full(int(params["MIB"]["string_value"]) << 20, 1, dtype=np.uint8)

    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())]
            )
            for r in requests
        ]

    def finalize(self):
        time.sleep(self.finalize_s)
        self.block = None
"""
MIB = 60  # three of them do not fit in BUDGET, two do
BUDGET = "150MiB"


def _config(name: str, mib: int, finalize_s: float = 0.2) -> str:
    return f"""
name: "{name}"
backend: "python"
input [ {{ name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
parameters {{ key: "MIB" value {{ string_value: "{mib}" }} }}
parameters {{ key: "FINALIZE_S" value {{ string_value: "{finalize_s}" }} }}
parameters {{ key: "execution_mode" value {{ string_value: "thread" }} }}
"""


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("on_demand") / "models"
    for name, mib in (("hog_a", MIB), ("hog_b", MIB), ("hog_c", MIB), ("hog_big", 200)):
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(_config(name, mib))
        (repo / name / "1" / "model.py").write_text(HOG)
    for name in ("add_sub", "mul_fp32", "ensemble_add_sub"):
        shutil.copytree(REFERENCE_MODELS / name, repo / name)
    return repo


@pytest.fixture
def server(repository: Path, tmp_path: Path) -> Iterator[InferdProcess]:
    proc = InferdProcess(
        repository,
        tmp_path / "inferd.log",
        ("--model-control-mode=explicit", f"--model-memory-budget={BUDGET}"),
    ).start()
    try:
        yield proc
    finally:
        proc.stop()


def _infer_http(client: httpclient.InferenceServerClient, model: str, value: int = 7) -> None:
    inp = httpclient.InferInput("IN", [1], "INT32")
    inp.set_data_from_numpy(np.array([value], dtype=np.int32))
    assert client.infer(model, [inp]).as_numpy("OUT").tolist() == [value]


def _states(client: httpclient.InferenceServerClient) -> dict[str, str]:
    return {m["name"]: m.get("state", "") for m in client.get_model_repository_index()}


def _loads(proc: InferdProcess, model: str) -> int:
    return proc.log().count(f"loading: {model}:1")


def test_the_first_request_loads_its_model_over_http_grpc_and_curl(server: InferdProcess) -> None:
    client = httpclient.InferenceServerClient(server.url)
    grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    try:
        assert _states(client)["hog_a"] == ""  # in the repository, not loaded
        assert not client.is_model_ready("hog_a")
        _infer_http(client, "hog_a")
        assert client.is_model_ready("hog_a")
        inp = grpcclient.InferInput("IN", [1], "INT32")
        inp.set_data_from_numpy(np.array([3], dtype=np.int32))
        assert grpc.infer("hog_b", [inp]).as_numpy("OUT").tolist() == [3]
        out = subprocess.run(
            [
                "curl",
                "-s",
                "-d",
                '{"inputs":[{"name":"IN","datatype":"INT32","shape":[1],"data":[5]}]}',
                f"{server.base_url}/v2/models/hog_a/infer",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert '"data":[5]' in out
        assert _loads(server, "hog_a") == 1  # loaded once, then served
        metrics = _metrics(server)
        sizes = dict(re.findall(r'inferd_model_memory_bytes\{model="(\w+)"\} (\d+)', metrics))
        assert MIB << 20 <= int(sizes["hog_a"]) < (MIB + 20) << 20, sizes  # measured, not guessed
        assert f"inferd_model_memory_budget_bytes {150 << 20}" in metrics
    finally:
        client.close()
        grpc.close()


def _metrics(proc: InferdProcess) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{proc.metrics_port}/metrics", timeout=10) as r:
        return str(r.read().decode())


def test_the_least_recently_used_idle_model_is_unloaded_to_fit(server: InferdProcess) -> None:
    client = httpclient.InferenceServerClient(server.url)
    try:
        _infer_http(client, "hog_a")
        _infer_http(client, "hog_b")
        _infer_http(client, "hog_a")  # b is now the least recently used
        _infer_http(client, "hog_c")
        states = _states(client)
        assert (states["hog_a"], states["hog_b"], states["hog_c"]) == ("READY", "UNAVAILABLE", "READY")
        assert "unloading 'hog_b' (" in server.log()
        _infer_http(client, "hog_b")  # loads again, and a (used before c) goes
        states = _states(client)
        assert (states["hog_a"], states["hog_b"], states["hog_c"]) == ("UNAVAILABLE", "READY", "READY")
        metrics = _metrics(server)
        assert 'inferd_model_evictions_total{model="hog_b"} 1' in metrics
        assert 'inferd_model_evictions_total{model="hog_a"} 1' in metrics
        assert 'inferd_model_memory_bytes{model="hog_a"}' not in metrics  # unloaded
    finally:
        client.close()


def test_concurrent_requests_share_one_load_and_requests_during_an_unload_succeed(
    server: InferdProcess,
) -> None:
    def one(model_value: tuple[str, int]) -> int:
        client = httpclient.InferenceServerClient(server.url)
        try:
            inp = httpclient.InferInput("IN", [1], "INT32")
            inp.set_data_from_numpy(np.array([model_value[1]], dtype=np.int32))
            return int(client.infer(model_value[0], [inp]).as_numpy("OUT")[0])
        finally:
            client.close()

    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(one, [("hog_a", i) for i in range(8)])) == list(range(8))
        assert _loads(server, "hog_a") == 1
        # a, b, c in turns: every load of one unloads another (its finalize takes a while), and
        # requests keep coming for the one being unloaded: each is answered
        jobs = [(("hog_a", "hog_b", "hog_c")[i % 3], i) for i in range(30)]
        assert list(pool.map(one, jobs)) == list(range(30))
    assert "unloading 'hog_" in server.log()


def test_a_model_larger_than_the_budget_gets_a_clear_error(server: InferdProcess) -> None:
    r = server.infer("hog_big", {"inputs": [{"name": "IN", "datatype": "INT32", "shape": [1], "data": [1]}]})
    assert r.status == 400
    assert re.fullmatch(
        r"load failed for model 'hog_big': it needs 2\d\d\.\d MiB of memory \(measured when it loaded\), "
        r"more than the whole --model-memory-budget of 150\.0 MiB",
        r.error,
    ), r.error
    grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    try:
        inp = grpcclient.InferInput("IN", [1], "INT32")
        inp.set_data_from_numpy(np.array([1], dtype=np.int32))
        with pytest.raises(InferenceServerException) as e:
            grpc.infer("hog_big", [inp])
        assert e.value.status() == "StatusCode.INVALID_ARGUMENT"
        assert "'hog_big'" in e.value.message() and "150.0 MiB" in e.value.message()
    finally:
        grpc.close()
    assert _loads(server, "hog_big") == 1  # the second request was refused from what it measured
    client = httpclient.InferenceServerClient(server.url)
    try:
        _infer_http(client, "hog_a")  # the others serve
        assert _states(client)["hog_big"] == "UNAVAILABLE"
    finally:
        client.close()


def test_unknown_models_keep_the_reference_texts(server: InferdProcess) -> None:
    doc = {"inputs": [{"name": "IN", "datatype": "INT32", "shape": [1], "data": [1]}]}
    r = server.infer("nope", doc)
    assert (r.status, r.body) == (404, b'{"error":"Request for unknown model: \'nope\' is not found"}')
    grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    try:
        inp = grpcclient.InferInput("IN", [1], "INT32")
        inp.set_data_from_numpy(np.array([1], dtype=np.int32))
        with pytest.raises(InferenceServerException) as e:
            grpc.infer("nope", [inp])
        assert e.value.status() == "StatusCode.NOT_FOUND"
        assert e.value.message() == "Request for unknown model: 'nope' is not found"
    finally:
        grpc.close()
    # a request the model refuses, once loaded: the model's own answer
    bad = server.infer(
        "hog_a", {"inputs": [{"name": "WRONG", "datatype": "INT32", "shape": [1], "data": [1]}]}
    )
    assert bad.status == 400 and "WRONG" in bad.error


def test_an_ensemble_loaded_on_demand_loads_its_steps(server: InferdProcess) -> None:
    client = httpclient.InferenceServerClient(server.url)
    try:
        a = np.arange(16, dtype=np.float32).reshape(1, 16)
        inputs = [
            httpclient.InferInput("INPUT0", [1, 16], "FP32"),
            httpclient.InferInput("INPUT1", [1, 16], "FP32"),
        ]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(np.ones_like(a))
        out = client.infer("ensemble_add_sub", inputs).as_numpy("OUTPUT0")
        np.testing.assert_allclose(out, (a + 1) * (a - 1))
        states = _states(client)
        assert states["add_sub"] == states["mul_fp32"] == states["ensemble_add_sub"] == "READY"
    finally:
        client.close()


def test_the_in_process_api_loads_on_demand(repository: Path) -> None:
    with inferd.Server(repository, model_control_mode="explicit", model_memory_budget=BUDGET) as server:
        assert not server.model_ready("hog_c")
        out = server.infer("hog_c", {"IN": np.array([9], dtype=np.int32)})
        assert out["OUT"].tolist() == [9]
        assert server.model_ready("hog_c")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--model-control-mode=explicit", "--model-memory-budget=2GB"), "'2GB' is not a size"),
        (("--model-control-mode=explicit", "--model-memory-budget=0"), "must be more than 0 bytes"),
        (("--model-memory-budget=1GiB",), "requires --model-control-mode=explicit"),
        (("--model-control-mode=poll", "--model-memory-budget=1GiB"), "in 'poll' mode"),
    ],
)
def test_bad_budget_flags_are_refused_at_start(repository: Path, args: tuple[str, ...], message: str) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "inferd", "serve", "--model-repository", str(repository), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2
    assert message in r.stderr and "--model-memory-budget" in r.stderr
