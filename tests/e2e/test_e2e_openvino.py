"""OpenVINO models served by `inferd serve`: IR (model.xml + model.bin) and ONNX read through OpenVINO.

A tmp repository holds an auto-completed add_sub IR (no config.pbtxt), a matmul IR with its
weights in model.bin and dynamic batching, the add_sub graph as model.onnx for backend openvino,
and a corrupt model.xml that must leave only itself UNAVAILABLE; tritonclient HTTP and gRPC.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import openvino as ov
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from conftest import InferdProcess, grpc_client, http_client, serving
from onnx import TensorProto, helper, numpy_helper
from tritonclient.utils import InferenceServerException

pytestmark = pytest.mark.timeout(120)

F = TensorProto.FLOAT
W = np.arange(9, dtype=np.float32).reshape(3, 3)


def _graph(nodes: list[Any], inputs: list[Any], outputs: list[Any], inits: list[Any] | None = None) -> Any:
    model = helper.make_model(
        helper.make_graph(nodes, "g", inputs, outputs, inits or []),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    model.ir_version = 8
    return model


def _add_sub() -> Any:
    shape: list[str | int] = ["N", 4]
    return _graph(
        [helper.make_node("Add", ["A", "B"], ["SUM"]), helper.make_node("Sub", ["A", "B"], ["DIFF"])],
        [helper.make_tensor_value_info("A", F, shape), helper.make_tensor_value_info("B", F, shape)],
        [helper.make_tensor_value_info("SUM", F, shape), helper.make_tensor_value_info("DIFF", F, shape)],
    )


def _matmul() -> Any:
    return _graph(
        [helper.make_node("MatMul", ["X", "W"], ["Y"])],
        [helper.make_tensor_value_info("X", F, ["N", 3])],
        [helper.make_tensor_value_info("Y", F, ["N", 3])],
        [numpy_helper.from_array(W, "W")],
    )


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("openvino")
    repo = root / "models"

    def version(name: str, config: str | None = None) -> Path:
        (repo / name / "1").mkdir(parents=True)
        if config is not None:
            (repo / name / "config.pbtxt").write_text(config)
        return repo / name / "1"

    def ir(model: Any, dest: Path) -> None:
        onnx.save(model, str(root / "tmp.onnx"))
        ov.save_model(ov.convert_model(str(root / "tmp.onnx")), str(dest / "model.xml"))

    ir(_add_sub(), version("ov_add_sub"))
    matmul = 'backend: "openvino"\nmax_batch_size: 8\n'
    matmul += 'input [ { name: "X" data_type: TYPE_FP32 dims: [ 3 ] } ]\n'
    matmul += 'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 3 ] } ]\n'
    matmul += "dynamic_batching { max_queue_delay_microseconds: 20000 }\n"
    ir(_matmul(), version("ov_matmul", matmul))
    onnx_dir = version("ov_onnx", 'backend: "openvino"\ndefault_model_filename: "model.onnx"\n')
    onnx.save(_add_sub(), str(onnx_dir / "model.onnx"))
    corrupt = version("ov_corrupt", 'backend: "openvino"\n')
    (corrupt / "model.xml").write_text("<net><layers>truncated")
    (corrupt / "model.bin").write_bytes(b"")
    return repo


@pytest.fixture(scope="module")
def ov_server(repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[InferdProcess]:
    with serving(repository, tmp_path_factory.mktemp("log") / "inferd-openvino.log") as proc:
        yield proc


@pytest.fixture(scope="module")
def http(ov_server: InferdProcess) -> Iterator[httpclient.InferenceServerClient]:
    with http_client(ov_server) as c:
        yield c


@pytest.fixture(scope="module")
def grpc(ov_server: InferdProcess) -> Iterator[grpcclient.InferenceServerClient]:
    with grpc_client(ov_server) as c:
        yield c


def _http_input(name: str, arr: np.ndarray[Any, Any]) -> Any:
    t = httpclient.InferInput(name, list(arr.shape), "FP32")
    t.set_data_from_numpy(arr, binary_data=True)
    return t


def _grpc_input(name: str, arr: np.ndarray[Any, Any]) -> Any:
    t = grpcclient.InferInput(name, list(arr.shape), "FP32")
    t.set_data_from_numpy(arr)
    return t


def test_models_are_ready_and_the_corrupt_one_says_why(http: httpclient.InferenceServerClient) -> None:
    for name in ("ov_add_sub", "ov_matmul", "ov_onnx"):
        assert http.is_model_ready(name), name
    assert not http.is_model_ready("ov_corrupt")
    index = {e["name"]: e for e in http.get_model_repository_index()}
    corrupt = index["ov_corrupt"]
    assert corrupt["state"] == "UNAVAILABLE"
    assert "is not a loadable OpenVINO IR" in corrupt["reason"]
    assert "ov_corrupt/1/model.xml" in corrupt["reason"]


def test_config_is_completed_from_the_model(http: httpclient.InferenceServerClient) -> None:
    cfg = http.get_model_config("ov_add_sub")
    assert cfg["backend"] == "openvino" and cfg["default_model_filename"] == "model.xml"
    assert cfg["max_batch_size"] == 4 and "dynamic_batching" in cfg
    assert [(i["name"], i["data_type"], i["dims"]) for i in cfg["input"]] == [
        ("A", "TYPE_FP32", [4]),
        ("B", "TYPE_FP32", [4]),
    ]
    assert [o["name"] for o in cfg["output"]] == ["SUM", "DIFF"]


def test_add_sub_over_http(http: httpclient.InferenceServerClient) -> None:
    rng = np.random.default_rng(0)
    a, b = rng.random((2, 4), dtype=np.float32), rng.random((2, 4), dtype=np.float32)
    r = http.infer("ov_add_sub", [_http_input("A", a), _http_input("B", b)])
    np.testing.assert_allclose(r.as_numpy("SUM"), a + b, rtol=1e-3)
    np.testing.assert_allclose(r.as_numpy("DIFF"), a - b, rtol=1e-3, atol=1e-3)


def test_onnx_through_openvino_over_grpc(grpc: grpcclient.InferenceServerClient) -> None:
    a = np.full((1, 4), 3.0, np.float32)
    b = np.ones((1, 4), np.float32)
    r = grpc.infer(
        "ov_onnx",
        [_grpc_input("A", a), _grpc_input("B", b)],
        outputs=[grpcclient.InferRequestedOutput("DIFF")],
    )
    np.testing.assert_array_equal(r.as_numpy("DIFF"), a - b)
    assert r.as_numpy("SUM") is None
    cfg = grpc.get_model_config("ov_onnx", as_json=True)["config"]
    assert cfg["backend"] == "openvino" and cfg["default_model_filename"] == "model.onnx"


def test_matmul_weights_from_model_bin_with_dynamic_batching(
    http: httpclient.InferenceServerClient, grpc: grpcclient.InferenceServerClient
) -> None:
    rng = np.random.default_rng(1)
    xs = [rng.random((1, 3), dtype=np.float32) for _ in range(8)]
    pending = [http.async_infer("ov_matmul", [_http_input("X", x)]) for x in xs]
    outs = [p.get_result().as_numpy("Y") for p in pending]
    for x, y in zip(xs, outs, strict=True):
        np.testing.assert_allclose(y, x @ W, rtol=1e-3)
    x = np.array([[1, 0, 0], [0, 0, 1]], np.float32)
    np.testing.assert_allclose(grpc.infer("ov_matmul", [_grpc_input("X", x)]).as_numpy("Y"), x @ W)


def test_wrong_inputs_are_client_errors(
    http: httpclient.InferenceServerClient, grpc: grpcclient.InferenceServerClient
) -> None:
    a = np.ones((1, 4), np.float32)
    with pytest.raises(InferenceServerException, match="unexpected shape for input 'A'") as e:
        http.infer("ov_add_sub", [_http_input("A", np.ones((1, 5), np.float32)), _http_input("B", a)])
    assert e.value.status() == "400"
    with pytest.raises(InferenceServerException, match="expected 2 inputs but got 1") as g:
        grpc.infer("ov_add_sub", [_grpc_input("A", a)])
    assert g.value.status() == "StatusCode.INVALID_ARGUMENT"
    with pytest.raises(InferenceServerException, match="ov_corrupt"):
        http.infer("ov_corrupt", [_http_input("A", a)])
    r = http.infer("ov_add_sub", [_http_input("A", a), _http_input("B", a)])
    np.testing.assert_array_equal(r.as_numpy("SUM"), 2 * a)
