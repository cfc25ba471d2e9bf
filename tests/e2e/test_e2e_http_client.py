"""inferd driven by tritonclient.http: the sync client and tritonclient.http.aio."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import ml_dtypes
import numpy as np
import pytest
import tritonclient.http as httpclient
import tritonclient.http.aio as aiohttpclient
from conftest import REFERENCE_MODEL_NAMES, InferdProcess
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def client(server: InferdProcess) -> Iterator[httpclient.InferenceServerClient]:
    c = httpclient.InferenceServerClient(server.url, concurrency=4)
    yield c
    c.close()


def _input(name: str, arr: np.ndarray[Any, Any], binary: bool = True, datatype: str | None = None) -> Any:
    t = httpclient.InferInput(name, list(arr.shape), datatype or np_to_triton_dtype(arr.dtype))
    t.set_data_from_numpy(arr, binary_data=binary)
    return t


def _add_sub_inputs(binary: bool = True) -> tuple[list[Any], np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    a = np.arange(32, dtype=np.float32).reshape(2, 16)
    b = np.full((2, 16), 0.5, dtype=np.float32)
    return [_input("INPUT0", a, binary), _input("INPUT1", b, binary)], a, b


# -- health and metadata ---------------------------------------------------------------------
def test_live_ready_and_metadata(client: httpclient.InferenceServerClient) -> None:
    assert client.is_server_live()
    assert not client.is_server_ready()  # strict readiness: init_fails did not load
    meta = client.get_server_metadata()
    assert meta["name"] == "triton" and meta["version"] == "2.51.0"
    for m in REFERENCE_MODEL_NAMES:
        assert client.is_model_ready(m)
    assert not client.is_model_ready("init_fails")
    assert not client.is_model_ready("nope")
    assert client.is_model_ready("versions_all", "1") and client.is_model_ready("versions_all", "2")
    assert not client.is_model_ready("versions_specific", "2")


def test_model_metadata_and_config(client: httpclient.InferenceServerClient) -> None:
    meta = client.get_model_metadata("add_sub")
    assert meta["platform"] == "python" and meta["versions"] == ["1"]
    assert [i["shape"] for i in meta["inputs"]] == [[-1, 16], [-1, 16]]
    cfg = client.get_model_config("classifier")
    assert cfg["output"][0]["label_filename"] == "labels.txt"
    assert client.get_model_metadata("versions_all")["versions"] == ["1", "2"]
    assert client.get_model_metadata("versions_all", "1")["versions"] == ["1"]  # the version asked only
    with pytest.raises(InferenceServerException, match="Request for unknown model: 'nope' is not found"):
        client.get_model_metadata("nope")
    with pytest.raises(InferenceServerException, match="version 9 is not found"):
        client.get_model_config("add_sub", "9")


# -- inference -------------------------------------------------------------------------------
@pytest.mark.parametrize("binary", [True, False])
def test_add_sub(client: httpclient.InferenceServerClient, binary: bool) -> None:
    inputs, a, b = _add_sub_inputs(binary)
    outputs = [httpclient.InferRequestedOutput(n, binary_data=binary) for n in ("OUTPUT0", "OUTPUT1")]
    res = client.infer("add_sub", inputs, outputs=outputs, request_id="r-1")
    assert res.get_response()["id"] == "r-1"
    assert res.get_response()["model_version"] == "1"
    np.testing.assert_array_equal(res.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(res.as_numpy("OUTPUT1"), a - b)


def test_mixed_binary_input_and_json_output(client: httpclient.InferenceServerClient) -> None:
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    inputs = [_input("INPUT0", a, True), _input("INPUT1", a, False)]
    outputs = [
        httpclient.InferRequestedOutput("OUTPUT0", binary_data=False),
        httpclient.InferRequestedOutput("OUTPUT1", binary_data=True),
    ]
    res = client.infer("add_sub", inputs, outputs=outputs)
    doc = res.get_response()
    assert "data" in doc["outputs"][0] and "parameters" in doc["outputs"][1]
    np.testing.assert_array_equal(res.as_numpy("OUTPUT0"), a * 2)
    np.testing.assert_array_equal(res.as_numpy("OUTPUT1"), np.zeros_like(a))


def test_default_outputs_are_binary(client: httpclient.InferenceServerClient) -> None:
    inputs, a, b = _add_sub_inputs()
    res = client.infer("add_sub", inputs)  # no outputs listed: the client asks binary_data_output
    assert all("parameters" in o for o in res.get_response()["outputs"])
    np.testing.assert_array_equal(res.as_numpy("OUTPUT0"), a + b)


def test_version_paths(client: httpclient.InferenceServerClient) -> None:
    x = np.array([7], dtype=np.int32)
    assert client.infer("versions_all", [_input("INPUT0", x)]).as_numpy("OUTPUT0").tolist() == [2]
    assert client.infer("versions_all", [_input("INPUT0", x)], model_version="1").as_numpy(
        "OUTPUT0"
    ).tolist() == [1]
    res = client.infer("versions_all", [_input("INPUT0", x)], model_version="2")
    assert res.get_response()["model_version"] == "2"
    assert client.infer("versions_specific", [_input("INPUT0", x)]).as_numpy("OUTPUT0").tolist() == [1]
    with pytest.raises(InferenceServerException, match="'versions_specific' version 2 is not found"):
        client.infer("versions_specific", [_input("INPUT0", x)], model_version="2")


@pytest.mark.parametrize("binary", [True, False])
def test_bytes(client: httpclient.InferenceServerClient, binary: bool) -> None:
    s = np.array([b"hello", b"", "\u00fcnic\u00f8de".encode(), b"x" * 300], dtype=np.object_)
    res = client.infer(
        "identity_bytes",
        [_input("INPUT0", s, binary, "BYTES")],
        outputs=[httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary)],
    )
    got = [v.encode() if isinstance(v, str) else v for v in res.as_numpy("OUTPUT0")]
    assert got == list(s)


@pytest.mark.parametrize("binary", [True, False])
def test_bool_int64_uint8_fp64(client: httpclient.InferenceServerClient, binary: bool) -> None:
    arrays = {
        "BOOL": np.array([True, False, True]),
        "INT64": np.array([1, -(2**40), 2**62], dtype=np.int64),
        "UINT8": np.array([0, 7, 255], dtype=np.uint8),
        "FP64": np.array([0.1, -2.5, 1e300]),
    }
    inputs = [_input(f"IN_{k}", v, binary) for k, v in arrays.items()]
    outputs = [httpclient.InferRequestedOutput(f"OUT_{k}", binary_data=binary) for k in arrays]
    res = client.infer("identity_types", inputs, outputs=outputs)
    for k, v in arrays.items():
        got = res.as_numpy(f"OUT_{k}")
        assert got.dtype == v.dtype and got.tolist() == v.tolist()


def test_fp16_only_binary(client: httpclient.InferenceServerClient) -> None:
    x = np.array([1.5, -2.0, 65504.0], dtype=np.float16)
    res = client.infer(
        "identity_types",
        [_input("IN_FP16", x)],
        outputs=[httpclient.InferRequestedOutput("OUT_FP16", binary_data=True)],
    )
    assert res.as_numpy("OUT_FP16").dtype == np.float16
    np.testing.assert_array_equal(res.as_numpy("OUT_FP16"), x)
    with pytest.raises(InferenceServerException, match="sending FP16 data via JSON is not supported"):
        client.infer(
            "identity_types",
            [_input("IN_FP16", x)],
            outputs=[httpclient.InferRequestedOutput("OUT_FP16", binary_data=False)],
        )


def test_bf16_binary_round_trip(client: httpclient.InferenceServerClient) -> None:
    """BF16 (ml_dtypes.bfloat16 in the client) goes binary; the Python model returns it via DLPack."""
    x = np.array([1.5, -2.0, 3.140625], dtype=ml_dtypes.bfloat16)
    res = client.infer(
        "identity_types",
        [_input("IN_BF16", x)],
        outputs=[httpclient.InferRequestedOutput("OUT_BF16", binary_data=True)],
    )
    assert res.get_output("OUT_BF16")["datatype"] == "BF16"
    got = res.as_numpy("OUT_BF16")
    assert got.dtype == ml_dtypes.bfloat16 and got.tobytes() == x.tobytes()


def test_classification(client: httpclient.InferenceServerClient) -> None:
    x = np.array([[1.0, 3.0, 2.0, 0.5], [4.0, 1.0, 1.0, 2.0]], dtype=np.float32)
    res = client.infer(
        "classifier",
        [_input("INPUT0", x)],
        outputs=[httpclient.InferRequestedOutput("OUTPUT0", binary_data=True, class_count=2)],
    )
    assert res.as_numpy("OUTPUT0").tolist() == [
        [b"3.000000:1:banana", b"2.000000:2:cherry"],
        [b"4.000000:0:apple", b"2.000000:3:date"],
    ]
    # no labels: value and index only; a non-batching model gives shape [N]
    y = np.array([0.25, 0.75, 0.5], dtype=np.float32)
    res = client.infer(
        "identity_fp32",
        [_input("INPUT0", y)],
        outputs=[httpclient.InferRequestedOutput("OUTPUT0", binary_data=False, class_count=5)],
    )
    assert res.as_numpy("OUTPUT0").tolist() == ["0.750000:1", "0.500000:2", "0.250000:0"]


def test_request_parameters_and_id(client: httpclient.InferenceServerClient) -> None:
    x = np.array([1], dtype=np.int32)
    res = client.infer(
        "echo_request",
        [_input("INPUT0", x)],
        request_id="req-9",
        parameters={"foo": "bar", "n": 3, "f": 1.5, "b": True},
        outputs=[httpclient.InferRequestedOutput(n) for n in ("PARAMETERS", "REQUEST_ID", "OUTPUT_NAMES")],
    )
    assert res.get_response()["id"] == "req-9"
    assert json.loads(res.as_numpy("PARAMETERS")[0]) == {"foo": "bar", "n": 3, "f": 1.5, "b": True}
    assert res.as_numpy("REQUEST_ID")[0] == b"req-9"
    assert res.as_numpy("OUTPUT_NAMES")[0] == b"OUTPUT_NAMES,PARAMETERS,REQUEST_ID"


def test_errors_come_back_as_exceptions(client: httpclient.InferenceServerClient) -> None:
    a = np.zeros((1, 16), dtype=np.float32)
    with pytest.raises(InferenceServerException) as e:
        client.infer("add_sub", [_input("INPUT0", a)])
    assert e.value.status() == "400"
    assert "missing required input(s) ['INPUT1']" in e.value.message()
    with pytest.raises(InferenceServerException) as e:
        client.infer("nope", [_input("INPUT0", a)])
    assert e.value.status() == "404"
    with pytest.raises(InferenceServerException) as e:
        client.infer("error_unavailable", [_input("INPUT0", np.zeros(2, np.float32))])
    assert (e.value.status(), e.value.message()) == ("503", "unavailable: model says no")
    with pytest.raises(InferenceServerException) as e:
        client.infer("decoupled", [_input("INPUT0", np.array([1], np.int32))])
    assert e.value.status() == "501"


def test_statistics_and_repository(client: httpclient.InferenceServerClient) -> None:
    before = client.get_inference_statistics("mul_fp32")["model_stats"][0]
    a = np.ones((3, 16), dtype=np.float32)
    client.infer("mul_fp32", [_input("INPUT0", a), _input("INPUT1", a)])
    after = client.get_inference_statistics("mul_fp32", "1")["model_stats"][0]
    assert after["inference_count"] == before["inference_count"] + 3
    assert after["execution_count"] == before["execution_count"] + 1
    assert after["inference_stats"]["success"]["count"] == before["inference_stats"]["success"]["count"] + 1
    index = client.get_model_repository_index()
    assert {"name": "add_sub", "version": "1", "state": "READY"} in index
    with pytest.raises(InferenceServerException, match="explicit model load / unload is not allowed"):
        client.load_model("add_sub")
    with pytest.raises(InferenceServerException, match="explicit model load / unload is not allowed"):
        client.unload_model("add_sub")


def test_async_infer_runs_requests_concurrently(client: httpclient.InferenceServerClient) -> None:
    """parallel_sleep has two instances: two 400 ms requests finish in well under 800 ms."""
    x = np.array([400], dtype=np.int32)
    futures = [client.async_infer("parallel_sleep", [_input("SLEEP_MS", x)]) for _ in range(2)]
    results = [f.get_result(timeout=10) for f in futures]
    names = sorted(r.as_numpy("INSTANCE")[0] for r in results)
    assert names == [b"parallel_sleep_0_0", b"parallel_sleep_0_1"]
    (s0, e0), (s1, e1) = (r.as_numpy("START_END").tolist() for r in results)
    assert max(s0, s1) < min(e0, e1), "the two executes did not overlap"


# -- tritonclient.http.aio -------------------------------------------------------------------
def test_aio_client(server: InferdProcess) -> None:
    async def main() -> None:
        c = aiohttpclient.InferenceServerClient(server.url)
        try:
            assert await c.is_server_live()
            assert await c.is_model_ready("add_sub")
            assert (await c.get_model_metadata("identity_fp32"))["inputs"][0]["shape"] == [-1]
            a = np.arange(16, dtype=np.float32).reshape(1, 16)
            inputs = [aiohttpclient.InferInput(n, [1, 16], "FP32") for n in ("INPUT0", "INPUT1")]
            for t in inputs:
                t.set_data_from_numpy(a)
            results = await asyncio.gather(*(c.infer("add_sub", inputs) for _ in range(8)))
            for r in results:
                np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a * 2)
            j = aiohttpclient.InferInput("INPUT0", [2], "FP32")
            j.set_data_from_numpy(np.array([1, 2], np.float32), binary_data=False)
            r = await c.infer(
                "identity_fp32",
                [j],
                outputs=[aiohttpclient.InferRequestedOutput("OUTPUT0", binary_data=False)],
            )
            assert r.as_numpy("OUTPUT0").tolist() == [1.0, 2.0]
            stats = await c.get_inference_statistics("add_sub")
            assert stats["model_stats"][0]["inference_count"] >= 8
            assert any(e["name"] == "init_fails" for e in await c.get_model_repository_index())
            with pytest.raises(InferenceServerException, match="is not found"):
                await c.infer("nope", inputs)
        finally:
            await c.close()

    asyncio.run(main())
