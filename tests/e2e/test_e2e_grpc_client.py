"""tritonclient.grpc (sync and aio) against ``inferd serve``: every RPC through the client API,
every datatype, shared memory, compression, large messages, health, the in-process API and
perf_analyzer ``-i grpc``."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import ml_dtypes
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
import tritonclient.utils.shared_memory as shm
from conftest import InferdProcess
from test_e2e_perf_analyzer import perf_analyzer, run_perf_analyzer  # noqa: F401  (the fixture, shared)
from tritonclient.utils import InferenceServerException

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def client(server: InferdProcess) -> Iterator[grpcclient.InferenceServerClient]:
    c = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    yield c
    c.close()


def _input(name: str, arr: np.ndarray[Any, Any], dt: str | None = None) -> grpcclient.InferInput:
    t = grpcclient.InferInput(name, list(arr.shape), dt or grpcclient.np_to_triton_dtype(arr.dtype))
    t.set_data_from_numpy(arr)
    return t


def _add_sub(a: np.ndarray[Any, Any], b: np.ndarray[Any, Any]) -> list[grpcclient.InferInput]:
    return [_input("INPUT0", a), _input("INPUT1", b)]


A = np.arange(16, dtype=np.float32).reshape(1, 16)
B = np.ones((1, 16), np.float32)


# -- health and metadata ---------------------------------------------------------------------------
def test_health_and_metadata(client: grpcclient.InferenceServerClient, server: InferdProcess) -> None:
    assert client.is_server_live()
    # the e2e repository holds a model that fails on purpose: not ready under strict readiness
    assert client.is_server_ready() is False
    assert client.is_model_ready("add_sub") and client.is_model_ready("add_sub", "1")
    assert client.is_model_ready("nope") is False
    meta = client.get_server_metadata(as_json=True)
    assert meta["name"] == "triton" and meta["version"] == "2.51.0"
    md = client.get_model_metadata("add_sub", as_json=True)
    assert md["inputs"][0] == {"name": "INPUT0", "datatype": "FP32", "shape": ["-1", "16"]}
    cfg = client.get_model_config("add_sub").config
    assert cfg.name == "add_sub" and cfg.max_batch_size == 64 and cfg.input[0].dims == [16]
    with pytest.raises(InferenceServerException, match="Request for unknown model: 'nope' is not found"):
        client.get_model_metadata("nope")


def test_statistics_and_repository(client: grpcclient.InferenceServerClient) -> None:
    client.infer("add_sub", _add_sub(A, B))
    stats = client.get_inference_statistics("add_sub", as_json=True)["model_stats"][0]
    assert stats["name"] == "add_sub" and int(stats["inference_stats"]["success"]["count"]) >= 1
    everything = client.get_inference_statistics(as_json=True)["model_stats"]
    assert {"add_sub", "identity_fp32"} <= {s["name"] for s in everything}
    with pytest.raises(InferenceServerException, match="requested model 'nope' is not available"):
        client.get_inference_statistics("nope")
    index = client.get_model_repository_index(as_json=True)["models"]
    assert {"name": "add_sub", "version": "1", "state": "READY"} in index
    failed = [m for m in index if m["name"] == "init_fails"]
    assert failed[0]["state"] == "UNAVAILABLE" and "init exploded on purpose" in failed[0]["reason"]
    for call in (client.load_model, client.unload_model):
        with pytest.raises(InferenceServerException) as e:
            call("add_sub")
        assert e.value.status() == "StatusCode.UNAVAILABLE"
        assert "explicit model load / unload is not allowed if polling is enabled" in e.value.message()


def test_trace_and_log_settings_are_served(client: grpcclient.InferenceServerClient) -> None:
    trace = client.get_trace_settings(as_json=True)["settings"]
    assert trace["trace_level"] == {"value": ["OFF"]} and trace["trace_mode"] == {"value": ["triton"]}
    assert client.get_log_settings(as_json=True)["settings"]["log_info"] == {"bool_param": True}


def test_grpc_health_service(server: InferdProcess) -> None:
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as ch:
        check = ch.unary_unary("/grpc.health.v1.Health/Check")
        assert check(b"", timeout=10) == b"\x08\x02"  # NOT_SERVING: not ready (init_fails)
        service = b"inference.GRPCInferenceService"
        assert check(b"\x0a" + bytes((len(service),)) + service, timeout=10) == b"\x08\x02"
        with pytest.raises(grpc.RpcError) as e:
            check(b"\xff", timeout=10)
        assert (e.value.code(), e.value.details()) == (grpc.StatusCode.INTERNAL, "Unable to parse request")
        with pytest.raises(grpc.RpcError) as e:
            list(ch.unary_stream("/grpc.health.v1.Health/Watch")(b"", timeout=10))
        assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_health_serving_when_ready(start_server: Any) -> None:
    p = start_server("--strict-readiness=false")
    with grpc.insecure_channel(f"127.0.0.1:{p.grpc_port}") as ch:
        assert ch.unary_unary("/grpc.health.v1.Health/Check")(b"", timeout=10) == b"\x08\x01"
    assert p.stop() == 0


# -- inference ---------------------------------------------------------------------------------------------
def test_infer_add_sub(client: grpcclient.InferenceServerClient) -> None:
    res = client.infer("add_sub", _add_sub(A, B), request_id="g-1")
    assert res.get_response().id == "g-1"
    np.testing.assert_array_equal(res.as_numpy("OUTPUT0"), A + B)
    np.testing.assert_array_equal(res.as_numpy("OUTPUT1"), A - B)
    one = client.infer("add_sub", _add_sub(A, B), outputs=[grpcclient.InferRequestedOutput("OUTPUT1")])
    assert one.as_numpy("OUTPUT0") is None
    np.testing.assert_array_equal(one.as_numpy("OUTPUT1"), A - B)


@pytest.mark.parametrize(
    ("name", "arr"),
    [
        ("BOOL", np.array([True, False, True])),
        ("INT64", np.array([-(2**40), 0, 7], np.int64)),
        ("UINT8", np.array([0, 255, 7], np.uint8)),
        ("FP64", np.array([0.5, -1e300, 3.0])),
        ("FP16", np.array([1.5, -2.0], np.float16)),
    ],
)
def test_every_datatype_round_trips(client: grpcclient.InferenceServerClient, name: str, arr: Any) -> None:
    res = client.infer("identity_types", [_input(f"IN_{name}", arr)])
    np.testing.assert_array_equal(res.as_numpy(f"OUT_{name}"), arr)


def test_bf16_bytes_round_trip(client: grpcclient.InferenceServerClient) -> None:
    x = np.array([1.5, -2.0], dtype=ml_dtypes.bfloat16)
    res = client.infer("identity_types", [_input("IN_BF16", x, "BF16")])
    assert res.get_response().raw_output_contents[0] == x.tobytes()


def test_bytes(client: grpcclient.InferenceServerClient) -> None:
    s = np.array([b"hello", "ünicode".encode(), b"", b"\x00\xff"], dtype=np.object_)
    res = client.infer("identity_bytes", [_input("INPUT0", s, "BYTES")])
    assert res.as_numpy("OUTPUT0").tolist() == s.tolist()


def test_classification(client: grpcclient.InferenceServerClient) -> None:
    x = np.array([[0.1, 2, 0.3, 0]], np.float32)
    res = client.infer(
        "classifier",
        [_input("INPUT0", x)],
        outputs=[grpcclient.InferRequestedOutput("OUTPUT0", class_count=2)],
    )
    assert res.as_numpy("OUTPUT0").tolist() == [[b"2.000000:1:banana", b"0.300000:2:cherry"]]


def test_request_parameters_reach_the_model(client: grpcclient.InferenceServerClient) -> None:
    res = client.infer(
        "echo_request",
        [_input("INPUT0", np.array([1], np.int32))],
        request_id="p",
        parameters={"s": "x", "i": -3, "b": True},
    )
    import json

    assert json.loads(res.as_numpy("PARAMETERS")[0]) == {"s": "x", "i": -3, "b": True}
    assert res.as_numpy("REQUEST_ID")[0] == b"p"


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_compressed_requests(client: grpcclient.InferenceServerClient, algorithm: str) -> None:
    res = client.infer("add_sub", _add_sub(A, B), compression_algorithm=algorithm)
    np.testing.assert_array_equal(res.as_numpy("OUTPUT0"), A + B)


def test_message_larger_than_grpcs_default_limit(client: grpcclient.InferenceServerClient) -> None:
    x = np.arange(3 * 2**20, dtype=np.float32)  # 12 MiB each way: past grpcio's 4 MiB default
    res = client.infer("identity_fp32", [_input("INPUT0", x)])
    np.testing.assert_array_equal(res.as_numpy("OUTPUT0"), x)


def test_errors_keep_the_reference_texts(client: grpcclient.InferenceServerClient) -> None:
    with pytest.raises(InferenceServerException) as e:
        client.infer("add_sub", [_input("INPUT0", A)], request_id="g-1")
    assert e.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert e.value.message().startswith("[request id: g-1] expected 2 inputs but got 1 inputs")
    with pytest.raises(InferenceServerException) as e:
        client.infer("decoupled", [_input("INPUT0", np.array([1], np.int32))])
    assert e.value.status() == "StatusCode.UNIMPLEMENTED"
    assert e.value.message() == "ModelInfer RPC doesn't support models with decoupled transaction policy"
    with pytest.raises(InferenceServerException) as e:
        client.infer("error_unavailable", [_input("INPUT0", np.ones(1, np.float32))])
    assert (e.value.status(), e.value.message()) == ("StatusCode.UNAVAILABLE", "unavailable: model says no")


def test_repeated_messages_are_each_their_own_request(start_server: Any) -> None:
    """Messages that differ only in tensor data and id (the request cache's hits) answer each with
    its own data and id; a known message with other tensor sizes gets the reference's error each
    time; a reloaded model's requests decode against the new model."""
    proc = start_server("--model-control-mode", "explicit", "--load-model", "add_sub")
    c = grpcclient.InferenceServerClient(f"127.0.0.1:{proc.grpc_port}")
    rng = np.random.default_rng(7)

    def check(i: int) -> None:
        a, b = rng.random((1, 16), dtype=np.float32), rng.random((1, 16), dtype=np.float32)
        rid = f"r-{i}" if i % 3 else ""
        r = c.infer("add_sub", _add_sub(a, b), request_id=rid)
        assert r.get_response().id == rid
        assert np.array_equal(r.as_numpy("OUTPUT0"), a + b) and np.array_equal(r.as_numpy("OUTPUT1"), a - b)

    for i in range(12):
        check(i)
    short = _input("INPUT1", B)
    short._raw_content = short._raw_content[:60]
    messages = []
    for _ in range(2):
        with pytest.raises(InferenceServerException) as e:
            c.infer("add_sub", [_input("INPUT0", A), short], request_id="bad")
        assert e.value.status() == "StatusCode.INVALID_ARGUMENT"
        messages.append(e.value.message())
    assert messages[0] == messages[1]
    assert messages[0].startswith("[request id: bad] input byte size mismatch for input 'INPUT1'"), messages[
        0
    ]
    c.unload_model("add_sub")
    with pytest.raises(InferenceServerException, match="'add_sub' has no available versions"):
        c.infer("add_sub", _add_sub(A, B))
    c.load_model("add_sub")
    for i in range(3):
        check(i)
    c.close()
    assert proc.stop() == 0


def test_client_timeout_does_not_hurt_the_server(client: grpcclient.InferenceServerClient) -> None:
    with pytest.raises(InferenceServerException) as e:
        client.infer("parallel_sleep", [_input("SLEEP_MS", np.array([500], np.int32))], client_timeout=0.05)
    assert e.value.status() == "StatusCode.DEADLINE_EXCEEDED"
    np.testing.assert_array_equal(client.infer("add_sub", _add_sub(A, B)).as_numpy("OUTPUT0"), A + B)


# -- shared memory -------------------------------------------------------------------------------------
def test_system_shared_memory_round_trip(client: grpcclient.InferenceServerClient) -> None:
    key = f"/inferd_grpc_e2e_{id(client)}"
    h = shm.create_shared_memory_region("g_in", key, 256)
    try:
        shm.set_shared_memory_region(h, [A, B])
        client.register_system_shared_memory("g_io", key, 256)
        status = client.get_system_shared_memory_status("g_io", as_json=True)["regions"]["g_io"]
        assert status["key"] == key and int(status["byte_size"]) == 256
        i0, i1 = (
            grpcclient.InferInput("INPUT0", [1, 16], "FP32"),
            grpcclient.InferInput("INPUT1", [1, 16], "FP32"),
        )
        i0.set_shared_memory("g_io", 64)
        i1.set_shared_memory("g_io", 64, offset=64)
        out = grpcclient.InferRequestedOutput("OUTPUT0")
        out.set_shared_memory("g_io", 64, offset=128)
        res = client.infer("add_sub", [i0, i1], outputs=[out, grpcclient.InferRequestedOutput("OUTPUT1")])
        assert res.get_response().raw_output_contents[0] == b""
        got = shm.get_contents_as_numpy(h, np.float32, [1, 16], offset=128)
        np.testing.assert_array_equal(got, A + B)
        np.testing.assert_array_equal(res.as_numpy("OUTPUT1"), A - B)
        with pytest.raises(InferenceServerException, match="already in manager"):
            client.register_system_shared_memory("g_io", key, 256)
        i0.set_shared_memory("g_io", 64, offset=250)
        with pytest.raises(InferenceServerException, match="Invalid offset \\+ byte size"):
            client.infer("add_sub", [i0, i1])
    finally:
        client.unregister_system_shared_memory("g_io")
        shm.destroy_shared_memory_region(h)
    with pytest.raises(InferenceServerException, match="Unable to find system shared memory region: 'g_io'"):
        client.get_system_shared_memory_status("g_io")
    assert client.get_cuda_shared_memory_status(as_json=True) == {}


# -- aio ---------------------------------------------------------------------------------------------------
def test_aio_client(server: InferdProcess) -> None:
    async def main() -> None:
        c = aioclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
        try:
            assert await c.is_server_live()
            assert await c.is_model_ready("add_sub")
            inputs = [
                aioclient.InferInput("INPUT0", [1, 16], "FP32"),
                aioclient.InferInput("INPUT1", [1, 16], "FP32"),
            ]
            inputs[0].set_data_from_numpy(A)
            inputs[1].set_data_from_numpy(B)
            results = await asyncio.gather(
                *(c.infer("add_sub", inputs, request_id=str(i)) for i in range(64))
            )
            for i, r in enumerate(results):
                assert r.get_response().id == str(i)
                np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), A + B)
            md = await c.get_model_metadata("identity_fp32", as_json=True)
            assert md["name"] == "identity_fp32"
            with pytest.raises(InferenceServerException, match="unknown model"):
                await c.infer("nope", inputs)
        finally:
            await c.close()

    asyncio.run(main())


# -- in-process API and the command line ----------------------------------------------------------------
def test_in_process_server_serves_grpc(model_repository: Path) -> None:
    import inferd

    with inferd.Server(model_repository=model_repository, grpc_port=0, exit_on_error=False) as s:
        assert s.grpc_port
        c = grpcclient.InferenceServerClient(f"127.0.0.1:{s.grpc_port}")
        np.testing.assert_array_equal(c.infer("add_sub", _add_sub(A, B)).as_numpy("OUTPUT0"), A + B)
        c.close()


def test_grpc_can_be_turned_off(start_server: Any) -> None:
    p = start_server("--allow-grpc=false")
    with grpc.insecure_channel(f"127.0.0.1:{p.grpc_port}") as ch, pytest.raises(grpc.RpcError):
        ch.unary_unary("/inference.GRPCInferenceService/ServerLive")(b"", timeout=2)
    assert p.stop() == 0


def test_grpc_port_taken(start_server: Any, server: InferdProcess) -> None:
    with pytest.raises(RuntimeError, match="failed to start GRPC service"):
        start_server("--grpc-port", str(server.grpc_port), "--grpc-address", "127.0.0.1")


def test_header_forwarding(start_server: Any) -> None:
    p = start_server("--grpc-header-forward-pattern", "x-fwd-.*")
    c = grpcclient.InferenceServerClient(f"127.0.0.1:{p.grpc_port}")
    res = c.infer(
        "echo_request", [_input("INPUT0", np.array([1], np.int32))], headers={"x-fwd-a": "1", "other": "2"}
    )
    import json

    assert json.loads(res.as_numpy("PARAMETERS")[0]) == {"x-fwd-a": "1"}
    # the same message again (a request-cache hit): each request forwards its own headers only
    for headers, expected in (({"x-fwd-b": "2"}, {"x-fwd-b": "2"}), ({}, {})):
        res = c.infer("echo_request", [_input("INPUT0", np.array([1], np.int32))], headers=headers)
        assert json.loads(res.as_numpy("PARAMETERS")[0]) == expected
    c.close()
    assert p.stop() == 0


# -- perf_analyzer -i grpc -----------------------------------------------------------------------------------
def test_perf_analyzer_grpc(perf_analyzer: Path, server: InferdProcess) -> None:  # noqa: F811
    run_perf_analyzer(perf_analyzer, f"127.0.0.1:{server.grpc_port}", "grpc", "-m", "add_sub")
