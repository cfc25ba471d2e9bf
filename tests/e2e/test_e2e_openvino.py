"""OpenVINO models served by `inferd serve`: IR (model.xml + model.bin) and ONNX read through OpenVINO.

A tmp repository holds a matmul IR with its weights in model.bin and dynamic batching, and the
add_sub graph as model.onnx for backend openvino; tritonclient HTTP and gRPC. What OpenVINO does as
every native backend does (an IR add_sub with and without config.pbtxt, metadata, a corrupt
model.xml, bad inputs) is tested in test_e2e_native_backends.py.
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

from native_backends import grpc_input, http_input, onnx_add_sub, onnx_graph, version_folder

pytestmark = pytest.mark.timeout(120)

F = TensorProto.FLOAT
W = np.arange(9, dtype=np.float32).reshape(3, 3)


def _matmul() -> Any:
    return onnx_graph(
        [helper.make_node("MatMul", ["X", "W"], ["Y"])],
        [helper.make_tensor_value_info("X", F, ["N", 3])],
        [helper.make_tensor_value_info("Y", F, ["N", 3])],
        [numpy_helper.from_array(W, "W")],
    )


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("openvino")
    repo = root / "models"

    def ir(model: Any, dest: Path) -> None:
        onnx.save(model, str(root / "tmp.onnx"))
        ov.save_model(ov.convert_model(str(root / "tmp.onnx")), str(dest / "model.xml"))

    matmul = 'backend: "openvino"\nmax_batch_size: 8\n'
    matmul += 'input [ { name: "X" data_type: TYPE_FP32 dims: [ 3 ] } ]\n'
    matmul += 'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 3 ] } ]\n'
    matmul += "dynamic_batching { max_queue_delay_microseconds: 20000 }\n"
    ir(_matmul(), version_folder(repo, "ov_matmul", matmul))
    onnx_dir = version_folder(repo, "ov_onnx", 'backend: "openvino"\ndefault_model_filename: "model.onnx"\n')
    onnx.save(onnx_add_sub(), str(onnx_dir / "model.onnx"))
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


def test_onnx_through_openvino_over_grpc(grpc: grpcclient.InferenceServerClient) -> None:
    a = np.full((1, 4), 3.0, np.float32)
    b = np.ones((1, 4), np.float32)
    r = grpc.infer(
        "ov_onnx",
        [grpc_input("A", a), grpc_input("B", b)],
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
    pending = [http.async_infer("ov_matmul", [http_input("X", x)]) for x in xs]
    outs = [p.get_result().as_numpy("Y") for p in pending]
    for x, y in zip(xs, outs, strict=True):
        np.testing.assert_allclose(y, x @ W, rtol=1e-3)
    x = np.array([[1, 0, 0], [0, 0, 1]], np.float32)
    np.testing.assert_allclose(grpc.infer("ov_matmul", [grpc_input("X", x)]).as_numpy("Y"), x @ W)
