"""What every native backend (ONNX Runtime, PyTorch, OpenVINO, TensorFlow) must do alike, tested once
over all of them: the same add_sub written in each one's format (tests/native_backends.py), served by
one ``inferd serve``, driven by tritonclient HTTP and gRPC and by raw JSON. Each backend's own file
(test_e2e_onnx.py, _pytorch, _openvino, _tensorflow) keeps what only that backend does.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from conftest import InferdProcess, grpc_client, http_client, serving
from tritonclient.utils import InferenceServerException

from native_backends import BACKENDS, NativeBackend, backend_params, grpc_input, http_input

pytestmark = pytest.mark.timeout(180)

EVERY = backend_params()
AUTO_COMPLETING = backend_params(lambda b: b.auto_completes)


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("native") / "models"
    repo.mkdir()
    for backend in BACKENDS:
        if backend.available:
            backend.write_models(repo)
    return repo


@pytest.fixture(scope="module")
def server(repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[InferdProcess]:
    """One server for every backend's models: each backend's tests are one parameter."""
    with serving(repository, tmp_path_factory.mktemp("log") / "inferd-native.log") as proc:
        yield proc


@pytest.fixture(scope="module")
def http(server: InferdProcess) -> Iterator[httpclient.InferenceServerClient]:
    with http_client(server, concurrency=8) as c:
        yield c


@pytest.fixture(scope="module")
def grpc(server: InferdProcess) -> Iterator[grpcclient.InferenceServerClient]:
    with grpc_client(server) as c:
        yield c


def _pair(rows: int, seed: int = 0) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    rng = np.random.default_rng(seed)
    return rng.random((rows, 4), dtype=np.float32), rng.random((rows, 4), dtype=np.float32)


def _json_inputs(
    backend: NativeBackend, a: list[float], b: list[float], b_type: str = "FP32"
) -> dict[str, Any]:
    return {
        "inputs": [
            {"name": backend.inputs[0], "shape": [1, len(a)], "datatype": "FP32", "data": a},
            {"name": backend.inputs[1], "shape": [1, len(b)], "datatype": b_type, "data": b},
        ]
    }


@pytest.mark.parametrize("backend", EVERY)
def test_the_model_is_ready_and_a_corrupt_one_says_why(
    backend: NativeBackend, http: httpclient.InferenceServerClient
) -> None:
    """A model file the backend cannot read leaves only that model UNAVAILABLE, with a reason that
    names the backend's trouble and the file."""
    assert http.is_model_ready(backend.model("add_sub"))
    assert not http.is_model_ready(backend.model("corrupt"))
    entry = {e["name"]: e for e in http.get_model_repository_index()}[backend.model("corrupt")]
    assert entry["state"] == "UNAVAILABLE"
    for words in backend.corrupt_reason:
        assert words in entry["reason"], entry["reason"]
    assert f"{backend.model('corrupt')}/1/{backend.model_file}" in entry["reason"]


@pytest.mark.parametrize("backend", EVERY)
def test_metadata_and_config(
    backend: NativeBackend, http: httpclient.InferenceServerClient, grpc: grpcclient.InferenceServerClient
) -> None:
    name = backend.model("add_sub")
    cfg = http.get_model_config(name)
    assert (cfg["backend"], cfg["platform"], cfg["default_model_filename"]) == (
        backend.name,
        backend.platform,
        backend.model_file,
    )
    assert cfg["max_batch_size"] == 8 and cfg["dynamic_batching"]["max_queue_delay_microseconds"] == 20000
    meta = http.get_model_metadata(name)
    assert meta["platform"] == backend.metadata_platform
    assert meta["inputs"] == [{"name": n, "datatype": "FP32", "shape": [-1, 4]} for n in backend.inputs]
    assert meta["outputs"] == [{"name": n, "datatype": "FP32", "shape": [-1, 4]} for n in backend.outputs]
    g = grpc.get_model_metadata(name, as_json=True)
    assert [(i["name"], i["datatype"], i["shape"]) for i in g["inputs"]] == [
        (n, "FP32", ["-1", "4"]) for n in backend.inputs
    ]
    assert grpc.get_model_config(name, as_json=True)["config"]["backend"] == backend.name


@pytest.mark.parametrize("backend", AUTO_COMPLETING)
def test_a_model_without_config_is_completed_from_the_model(
    backend: NativeBackend, http: httpclient.InferenceServerClient
) -> None:
    cfg = http.get_model_config(backend.model("auto"))
    assert cfg["backend"] == backend.name and cfg["default_model_filename"] == backend.model_file
    assert cfg["max_batch_size"] == 4 and "dynamic_batching" in cfg
    assert [(i["name"], i["data_type"], i["dims"]) for i in cfg["input"]] == [
        (n, "TYPE_FP32", [4]) for n in backend.inputs
    ]
    assert sorted((o["name"], o["data_type"], o["dims"]) for o in cfg["output"]) == sorted(
        (n, "TYPE_FP32", [4]) for n in backend.outputs
    )  # in the model's order (a SavedModel's signature: by name)
    a, b = _pair(2, seed=5)
    r = http.infer(
        backend.model("auto"), [http_input(n, x) for n, x in zip(backend.inputs, (a, b), strict=True)]
    )
    np.testing.assert_allclose(r.as_numpy(backend.outputs[0]), a + b, rtol=1e-5)


@pytest.mark.parametrize("backend", EVERY)
def test_infer_over_http_and_grpc(
    backend: NativeBackend, http: httpclient.InferenceServerClient, grpc: grpcclient.InferenceServerClient
) -> None:
    """Binary tensors over HTTP, gRPC asking for one output (the other is not sent), JSON."""
    name, (i0, i1), (o0, o1) = backend.model("add_sub"), backend.inputs, backend.outputs
    a, b = _pair(3)
    r = http.infer(name, [http_input(i0, a), http_input(i1, b)])
    np.testing.assert_allclose(r.as_numpy(o0), a + b, rtol=1e-5)
    np.testing.assert_allclose(r.as_numpy(o1), a - b, rtol=1e-5, atol=1e-6)
    g = grpc.infer(
        name, [grpc_input(i0, a), grpc_input(i1, b)], outputs=[grpcclient.InferRequestedOutput(o1)]
    )
    np.testing.assert_allclose(g.as_numpy(o1), a - b, rtol=1e-5, atol=1e-6)
    assert g.as_numpy(o0) is None


@pytest.mark.parametrize("backend", EVERY)
def test_concurrent_requests_are_answered_each_its_own_and_batched(
    backend: NativeBackend, server: InferdProcess, http: httpclient.InferenceServerClient
) -> None:
    """16 single-row requests at once: each gets its own rows back (dynamic batching joins some)."""
    name, (i0, i1), (o0, o1) = backend.model("add_sub"), backend.inputs, backend.outputs

    def counts() -> tuple[int, int]:
        stats = http.get_inference_statistics(name)["model_stats"][0]
        return int(stats["inference_count"]), int(stats["execution_count"])

    before = counts()
    pairs = [_pair(1, seed=i) for i in range(16)]
    pending = [http.async_infer(name, [http_input(i0, a), http_input(i1, b)]) for a, b in pairs]
    for p, (a, b) in zip(pending, pairs, strict=True):
        result = p.get_result()
        np.testing.assert_allclose(result.as_numpy(o0), a + b, rtol=1e-5)
        np.testing.assert_allclose(result.as_numpy(o1), a - b, rtol=1e-5, atol=1e-6)
    after = counts()
    assert after[0] - before[0] == 16
    assert 1 <= after[1] - before[1] <= 16


@pytest.mark.parametrize("backend", EVERY)
def test_bad_requests_are_client_errors_and_the_model_keeps_serving(
    backend: NativeBackend,
    server: InferdProcess,
    http: httpclient.InferenceServerClient,
    grpc: grpcclient.InferenceServerClient,
) -> None:
    """Triton's status codes and texts for what the client got wrong, whatever the backend; then a
    good request is answered."""
    name, (i0, i1) = backend.model("add_sub"), backend.inputs
    a = np.ones((1, 4), np.float32)
    with pytest.raises(InferenceServerException) as e:  # a row of 5 where the model takes 4
        http.infer(name, [http_input(i0, np.ones((1, 5), np.float32)), http_input(i1, a)])
    assert e.value.status() == "400"
    assert f"unexpected shape for input '{i0}' for model '{name}'. Expected [-1,4], got [1,5]" in str(e.value)
    with pytest.raises(InferenceServerException, match="batch-size must be <= 8"):
        http.infer(
            name, [http_input(i0, np.ones((9, 4), np.float32)), http_input(i1, np.ones((9, 4), np.float32))]
        )
    with pytest.raises(
        InferenceServerException, match=f"data-type is 'FP64', but model '{name}' expects 'FP32'"
    ):
        http.infer(name, [http_input(i0, a.astype(np.float64)), http_input(i1, a)])
    with pytest.raises(InferenceServerException, match="expected 2 inputs but got 1") as g:
        grpc.infer(name, [grpc_input(i0, a)])
    assert g.value.status() == "StatusCode.INVALID_ARGUMENT"
    with pytest.raises(InferenceServerException, match=f"data-type is 'INT32', but model '{name}' expects"):
        grpc.infer(name, [grpc_input(i0, a), grpc_input(i1, np.ones((1, 4), np.int32))])
    with pytest.raises(
        InferenceServerException, match=f"'{backend.model('corrupt')}' has no available versions"
    ):
        grpc.infer(backend.model("corrupt"), [grpc_input(i0, a), grpc_input(i1, a)])
    # raw JSON: an unparsable body is a 500 (as the reference), a short data array too; a wrong datatype 400
    bad = server.infer(name, b'{"inputs": [{"name": "A", "shape": [1, 4]')  # truncated
    assert bad.status == 500 and "failed to parse the request JSON buffer" in bad.error, bad.body
    short_doc = _json_inputs(backend, [1, 2, 3, 4], [1, 2, 3, 4])
    short_doc["inputs"][0]["data"] = [1, 2, 3]  # 3 values for a [1, 4] tensor
    short = server.infer(name, short_doc)
    assert short.status == 500 and "Unable to parse 'data'" in short.error, short.body
    wrong = server.infer(name, _json_inputs(backend, [1, 2, 3, 4], [1, 2, 3, 4], "INT32"))
    assert wrong.status == 400, wrong.body
    assert f"inference input '{i1}' data-type is 'INT32', but model '{name}' expects 'FP32'" in wrong.error
    ok = server.infer(name, _json_inputs(backend, [1, 2, 3, 4], [1, 1, 1, 1]))
    assert ok.status == 200, ok.body
    outputs = {o["name"]: o["data"] for o in ok.json()["outputs"]}
    assert outputs == dict(zip(backend.outputs, ([2.0, 3.0, 4.0, 5.0], [0.0, 1.0, 2.0, 3.0]), strict=True))
    r = grpc.infer(name, [grpc_input(i0, a), grpc_input(i1, a)])
    np.testing.assert_array_equal(r.as_numpy(backend.outputs[0]), 2 * a)
