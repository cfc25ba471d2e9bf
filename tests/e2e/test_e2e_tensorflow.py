"""TensorFlow SavedModels served by `inferd serve`, driven by tritonclient HTTP and gRPC.

A tmp repository holds an auto-completed add_sub SavedModel (no config.pbtxt), a string model,
a config that serves another signature (TF_SIGNATURE_DEF) with dynamic batching and thread
parameters, and a corrupt saved_model.pb that must leave only itself UNAVAILABLE.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorflow as tf
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from conftest import InferdProcess, grpc_client, http_client, serving
from tritonclient.utils import InferenceServerException

pytestmark = pytest.mark.timeout(180)


class AddSub(tf.Module):
    """A, B [N, 4] FP32 -> SUM, DIFF; signature ``product`` -> PROD = A * B."""

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32), tf.TensorSpec([None, 4], tf.float32)])
    def add_sub(self, A: Any, B: Any) -> Any:
        return {"SUM": A + B, "DIFF": A - B}

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32), tf.TensorSpec([None, 4], tf.float32)])
    def product(self, A: Any, B: Any) -> Any:
        return {"PROD": A * B}


class Strings(tf.Module):
    """TEXT [N, 1] STRING -> UPPER (ASCII letters upper-cased, other bytes as they came)."""

    @tf.function(input_signature=[tf.TensorSpec([None, 1], tf.string)])
    def f(self, TEXT: Any) -> Any:
        return {"UPPER": tf.strings.upper(TEXT)}


_PRODUCT_CONFIG = """platform: "tensorflow_savedmodel"
max_batch_size: 8
input [ { name: "A" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "B" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "PROD" data_type: TYPE_FP32 dims: [ 4 ] } ]
dynamic_batching { max_queue_delay_microseconds: 20000 }
instance_group [ { count: 1 kind: KIND_CPU } ]
parameters { key: "TF_SIGNATURE_DEF" value { string_value: "product" } }
parameters { key: "TF_NUM_INTRA_THREADS" value { string_value: "1" } }
parameters { key: "TF_NUM_INTER_THREADS" value { string_value: "1" } }
"""


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("tensorflow") / "models"

    def version(name: str, config: str | None = None) -> Path:
        (repo / name / "1").mkdir(parents=True)
        if config is not None:
            (repo / name / "config.pbtxt").write_text(config)
        return repo / name / "1" / "model.savedmodel"

    add_sub, strings = AddSub(), Strings()
    signatures = {"serving_default": add_sub.add_sub, "product": add_sub.product}
    tf.saved_model.save(add_sub, str(version("tf_add_sub")), signatures=signatures)
    tf.saved_model.save(add_sub, str(version("tf_product", _PRODUCT_CONFIG)), signatures=signatures)
    tf.saved_model.save(strings, str(version("tf_strings")), signatures={"serving_default": strings.f})
    broken = version("tf_broken", 'platform: "tensorflow_savedmodel"\n')
    broken.mkdir()
    (broken / "saved_model.pb").write_bytes(b"not a SavedModel protobuf" * 8)
    return repo


@pytest.fixture(scope="module")
def tf_server(repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[InferdProcess]:
    with serving(repository, tmp_path_factory.mktemp("log") / "inferd-tensorflow.log") as proc:
        yield proc


@pytest.fixture(scope="module")
def http(tf_server: InferdProcess) -> Iterator[httpclient.InferenceServerClient]:
    with http_client(tf_server, concurrency=8) as c:
        yield c


@pytest.fixture(scope="module")
def grpc(tf_server: InferdProcess) -> Iterator[grpcclient.InferenceServerClient]:
    with grpc_client(tf_server) as c:
        yield c


def _http_input(name: str, arr: np.ndarray[Any, Any], datatype: str = "FP32") -> Any:
    t = httpclient.InferInput(name, list(arr.shape), datatype)
    t.set_data_from_numpy(arr, binary_data=True)
    return t


def _grpc_input(name: str, arr: np.ndarray[Any, Any], datatype: str = "FP32") -> Any:
    t = grpcclient.InferInput(name, list(arr.shape), datatype)
    t.set_data_from_numpy(arr)
    return t


def test_models_are_ready_and_the_broken_one_says_why(http: httpclient.InferenceServerClient) -> None:
    for name in ("tf_add_sub", "tf_product", "tf_strings"):
        assert http.is_model_ready(name), name
    assert not http.is_model_ready("tf_broken")
    broken = {e["name"]: e for e in http.get_model_repository_index()}["tf_broken"]
    assert broken["state"] == "UNAVAILABLE"
    assert "is not a loadable SavedModel" in broken["reason"]
    assert "tf_broken/1/model.savedmodel" in broken["reason"]


def test_config_is_completed_from_the_signature(
    http: httpclient.InferenceServerClient, grpc: grpcclient.InferenceServerClient
) -> None:
    cfg = http.get_model_config("tf_add_sub")
    assert cfg["backend"] == "tensorflow" and cfg["platform"] == "tensorflow_savedmodel"
    assert cfg["default_model_filename"] == "model.savedmodel"
    assert cfg["max_batch_size"] == 4 and "dynamic_batching" in cfg
    assert [(i["name"], i["data_type"], i["dims"]) for i in cfg["input"]] == [
        ("A", "TYPE_FP32", [4]),
        ("B", "TYPE_FP32", [4]),
    ]
    meta = grpc.get_model_metadata("tf_strings", as_json=True)
    assert meta["platform"] == "tensorflow_savedmodel"
    assert [(i["name"], i["datatype"], i["shape"]) for i in meta["inputs"]] == [
        ("TEXT", "BYTES", ["-1", "1"])
    ]


def test_add_sub_over_http_and_grpc(
    http: httpclient.InferenceServerClient, grpc: grpcclient.InferenceServerClient
) -> None:
    rng = np.random.default_rng(0)
    a, b = rng.random((2, 4), dtype=np.float32), rng.random((2, 4), dtype=np.float32)
    r = http.infer("tf_add_sub", [_http_input("A", a), _http_input("B", b)])
    np.testing.assert_allclose(r.as_numpy("SUM"), a + b, rtol=1e-6)
    np.testing.assert_allclose(r.as_numpy("DIFF"), a - b, rtol=1e-6)
    g = grpc.infer(
        "tf_add_sub",
        [_grpc_input("A", a), _grpc_input("B", b)],
        outputs=[grpcclient.InferRequestedOutput("DIFF")],
    )
    np.testing.assert_allclose(g.as_numpy("DIFF"), a - b, rtol=1e-6)
    assert g.as_numpy("SUM") is None


def test_strings_over_http_and_grpc(
    http: httpclient.InferenceServerClient, grpc: grpcclient.InferenceServerClient
) -> None:
    text = np.array([[b"hello"], ["gr\u00fc\u00df".encode()], [b""]], dtype=np.object_)
    r = http.infer("tf_strings", [_http_input("TEXT", text, "BYTES")])
    assert r.as_numpy("UPPER").tolist() == [[b"HELLO"], [b"GR\xc3\xbc\xc3\x9f"], [b""]]
    g = grpc.infer("tf_strings", [_grpc_input("TEXT", text[:1], "BYTES")])
    assert g.as_numpy("UPPER").tolist() == [[b"HELLO"]]


def test_another_signature_with_dynamic_batching(
    tf_server: InferdProcess, http: httpclient.InferenceServerClient
) -> None:
    rng = np.random.default_rng(1)
    pairs = [(rng.random((1, 4), dtype=np.float32), rng.random((1, 4), dtype=np.float32)) for _ in range(8)]
    pending = [http.async_infer("tf_product", [_http_input("A", a), _http_input("B", b)]) for a, b in pairs]
    for p, (a, b) in zip(pending, pairs, strict=True):
        np.testing.assert_allclose(p.get_result().as_numpy("PROD"), a * b, rtol=1e-6)
    stats = http.get_inference_statistics("tf_product")["model_stats"][0]
    assert int(stats["inference_count"]) == 8
    assert int(stats["execution_count"]) <= 8


def test_malformed_and_wrong_requests_are_client_errors_and_the_server_keeps_serving(
    tf_server: InferdProcess, http: httpclient.InferenceServerClient, grpc: grpcclient.InferenceServerClient
) -> None:
    bad = tf_server.infer("tf_add_sub", b'{"inputs": [{"name": "A", "shape": [1, 4]')  # truncated JSON
    assert bad.status == 500, bad.body  # the reference answers an unparsable body 500
    assert "failed to parse the request JSON buffer" in bad.error
    short = tf_server.infer(  # 3 values for a [1, 4] tensor
        "tf_add_sub",
        {
            "inputs": [
                {"name": "A", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3]},
                {"name": "B", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]},
            ]
        },
    )
    assert short.status == 500 and "Unable to parse 'data'" in short.error, short.body
    wrong = tf_server.infer(
        "tf_add_sub",
        {
            "inputs": [
                {"name": "A", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]},
                {"name": "B", "shape": [1, 4], "datatype": "INT32", "data": [1, 2, 3, 4]},
            ]
        },
    )
    assert wrong.status == 400, wrong.body
    assert "inference input 'B' data-type is 'INT32', but model 'tf_add_sub' expects 'FP32'" in wrong.error
    a = np.ones((1, 4), np.float32)
    with pytest.raises(InferenceServerException, match="unexpected shape for input 'A'") as e:
        http.infer("tf_add_sub", [_http_input("A", np.ones((1, 5), np.float32)), _http_input("B", a)])
    assert e.value.status() == "400"
    with pytest.raises(InferenceServerException, match="expected 2 inputs but got 1") as g:
        grpc.infer("tf_add_sub", [_grpc_input("A", a)])
    assert g.value.status() == "StatusCode.INVALID_ARGUMENT"
    with pytest.raises(
        InferenceServerException, match="data-type is 'INT32', but model 'tf_add_sub' expects"
    ):
        grpc.infer("tf_add_sub", [_grpc_input("A", a), _grpc_input("B", np.ones((1, 4), np.int32), "INT32")])
    with pytest.raises(InferenceServerException, match="tf_broken"):
        http.infer("tf_broken", [_http_input("A", a)])
    ok = tf_server.infer(
        "tf_add_sub",
        {
            "inputs": [
                {"name": "A", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]},
                {"name": "B", "shape": [1, 4], "datatype": "FP32", "data": [1, 1, 1, 1]},
            ]
        },
    )
    assert ok.status == 200, ok.body
    outputs = {o["name"]: o["data"] for o in ok.json()["outputs"]}
    assert outputs == {"SUM": [2.0, 3.0, 4.0, 5.0], "DIFF": [0.0, 1.0, 2.0, 3.0]}
    r = grpc.infer("tf_add_sub", [_grpc_input("A", a), _grpc_input("B", a)])
    np.testing.assert_array_equal(r.as_numpy("SUM"), 2 * a)
