"""TensorFlow SavedModels served by `inferd serve`, driven by tritonclient HTTP and gRPC.

A tmp repository holds a string model and a config that serves another signature of a SavedModel
(TF_SIGNATURE_DEF) with dynamic batching and thread parameters. What TensorFlow does as every native
backend does (an add_sub SavedModel with and without config.pbtxt, metadata, a corrupt
saved_model.pb, malformed and wrong requests) is tested in test_e2e_native_backends.py.
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

from native_backends import grpc_input, http_input, version_folder

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
        return version_folder(repo, name, config) / "model.savedmodel"

    add_sub, strings = AddSub(), Strings()
    signatures = {"serving_default": add_sub.add_sub, "product": add_sub.product}
    tf.saved_model.save(add_sub, str(version("tf_product", _PRODUCT_CONFIG)), signatures=signatures)
    tf.saved_model.save(strings, str(version("tf_strings")), signatures={"serving_default": strings.f})
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


def test_strings_over_http_and_grpc(
    http: httpclient.InferenceServerClient, grpc: grpcclient.InferenceServerClient
) -> None:
    meta = grpc.get_model_metadata("tf_strings", as_json=True)  # completed from the signature
    assert meta["platform"] == "tensorflow_savedmodel"
    assert [(i["name"], i["datatype"], i["shape"]) for i in meta["inputs"]] == [
        ("TEXT", "BYTES", ["-1", "1"])
    ]
    text = np.array([[b"hello"], ["gr\u00fc\u00df".encode()], [b""]], dtype=np.object_)
    r = http.infer("tf_strings", [http_input("TEXT", text, "BYTES")])
    assert r.as_numpy("UPPER").tolist() == [[b"HELLO"], [b"GR\xc3\xbc\xc3\x9f"], [b""]]
    g = grpc.infer("tf_strings", [grpc_input("TEXT", text[:1], "BYTES")])
    assert g.as_numpy("UPPER").tolist() == [[b"HELLO"]]


def test_another_signature_with_dynamic_batching(
    tf_server: InferdProcess, http: httpclient.InferenceServerClient
) -> None:
    rng = np.random.default_rng(1)
    pairs = [(rng.random((1, 4), dtype=np.float32), rng.random((1, 4), dtype=np.float32)) for _ in range(8)]
    pending = [http.async_infer("tf_product", [http_input("A", a), http_input("B", b)]) for a, b in pairs]
    for p, (a, b) in zip(pending, pairs, strict=True):
        np.testing.assert_allclose(p.get_result().as_numpy("PROD"), a * b, rtol=1e-6)
    stats = http.get_inference_statistics("tf_product")["model_stats"][0]
    assert int(stats["inference_count"]) == 8
    assert int(stats["execution_count"]) <= 8
