"""Access control on a real server, with real clients: the reference's restricted APIs (HTTP and
gRPC), and API keys from the environment (tritonclient sending ``Authorization: Bearer``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from http.client import HTTPConnection
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException


def _inputs(module: Any) -> list[Any]:
    return [module.InferInput("INPUT0", [2], "FP32").set_data_from_numpy(np.array([1, 2], np.float32))]


def _metrics_port_get(server: Any, path: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    conn = HTTPConnection("127.0.0.1", server.metrics_port, timeout=30)
    try:
        conn.request("GET", path, headers=headers or {})
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def test_restricted_apis_answer_as_the_reference(start_server: Callable[..., Any]) -> None:
    server = start_server(
        "--http-restricted-api=inference:infer-key=s3cret",
        "--http-restricted-api=statistics:stats-key=st4ts",
        "--grpc-restricted-protocol=inference,health:grpc-key=0th3r",
    )
    # the status page names every model, its state and its failures (with paths): on every port it is
    # served from, it is the statistics category's (issue 25: the metrics port answered 200 to anyone)
    for path in ("/", "/v2/status"):
        on_http = server.request("GET", path)
        for status, body in ((on_http.status, on_http.body), _metrics_port_get(server, path)):
            assert status == 403, (path, status)
            assert b"expecting header 'stats-key'" in body and b"identity_fp32" not in body
    status, body = _metrics_port_get(server, "/v2/status", {"stats-key": "st4ts"})
    assert status == 200 and b"identity_fp32" in body
    assert _metrics_port_get(server, "/metrics")[0] == 200  # metrics stay open, as the reference's
    r = server.infer(
        "identity_fp32", {"inputs": [{"name": "INPUT0", "shape": [1], "datatype": "FP32", "data": [1]}]}
    )
    assert (r.status, r.content_type) == (403, "text/plain")
    assert r.json() == {"error": "This API is restricted, expecting header 'infer-key'"}
    http = httpclient.InferenceServerClient(server.url)
    try:
        assert http.is_server_live()  # health is not restricted on HTTP
        out = http.infer("identity_fp32", _inputs(httpclient), headers={"infer-key": "s3cret"})
        assert out.as_numpy("OUTPUT0").tolist() == [1, 2]
    finally:
        http.close()
    g = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    try:
        with pytest.raises(InferenceServerException) as info:
            g.is_server_live()
        assert info.value.status() == "StatusCode.UNAVAILABLE"
        assert (
            "This protocol is restricted, expecting header 'triton-grpc-protocol-grpc-key'"
            in info.value.message()
        )
        headers = {"triton-grpc-protocol-grpc-key": "0th3r"}
        assert g.is_server_live(headers=headers)
        out = g.infer("identity_fp32", _inputs(grpcclient), headers=headers)
        assert out.as_numpy("OUTPUT0").tolist() == [1, 2]
        assert g.get_model_metadata("identity_fp32").name == "identity_fp32"  # metadata is open
    finally:
        g.close()
    ok = {"inputs": [{"name": "INPUT0", "shape": [1], "datatype": "FP32", "data": [1]}]}
    assert server.infer("identity_fp32", ok, {"infer-key": "s3cret"}).status == 200
    # a repeated restriction header counts by its first value, as the reference's (HTTP and gRPC)
    for values, status in ((["s3cret", "s3cret"], 200), (["s3cret", "x"], 200), (["x", "s3cret"], 403)):
        conn = HTTPConnection("127.0.0.1", server.port, timeout=30)
        try:
            conn.putrequest("POST", "/v2/models/identity_fp32/infer")
            body = json.dumps(ok).encode()
            conn.putheader("Content-Length", str(len(body)))
            for v in values:
                conn.putheader("infer-key", v)
            conn.endheaders(body)
            assert conn.getresponse().status == status, values
        finally:
            conn.close()
    g = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    try:
        key = "triton-grpc-protocol-grpc-key"
        assert g.is_server_live(headers={key: "0th3r"})
        channel = grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}")
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        assert stub.ServerLive(service_pb2.ServerLiveRequest(), metadata=[(key, "0th3r"), (key, "x")]).live
        with pytest.raises(grpc.RpcError) as refused:
            stub.ServerLive(service_pb2.ServerLiveRequest(), metadata=[(key, "x"), (key, "0th3r")])
        assert refused.value.code() is grpc.StatusCode.UNAVAILABLE
        channel.close()
    finally:
        g.close()


def test_api_keys_from_the_environment(
    start_server: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INFERD_API_KEYS", "k-infer: inference, metadata; k-admin: all")
    server = start_server()
    bare = server.request("GET", "/v2/models/identity_fp32")
    assert bare.status == 401 and "API key" in bare.error
    assert _metrics_port_get(server, "/v2/status")[0] == 401
    assert _metrics_port_get(server, "/", {"Authorization": "Bearer k-infer"})[0] == 403
    assert _metrics_port_get(server, "/v2/status", {"Authorization": "Bearer k-admin"})[0] == 200
    assert server.request("GET", "/v2/health/live").status == 200  # health stays open for probes
    http = httpclient.InferenceServerClient(server.url)
    try:
        out = http.infer("identity_fp32", _inputs(httpclient), headers={"Authorization": "Bearer k-infer"})
        assert out.as_numpy("OUTPUT0").tolist() == [1, 2]
        with pytest.raises(InferenceServerException) as info:
            http.get_inference_statistics(headers={"Authorization": "Bearer k-infer"})
        assert info.value.status() == "403"
        assert http.get_inference_statistics(headers={"Authorization": "Bearer k-admin"})["model_stats"]
        with pytest.raises(InferenceServerException) as info:
            http.infer("identity_fp32", _inputs(httpclient), headers={"Authorization": "Bearer wrong"})
        assert info.value.status() == "401"
    finally:
        http.close()
    g = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    try:
        with pytest.raises(InferenceServerException) as info:
            g.infer("identity_fp32", _inputs(grpcclient))
        assert info.value.status() == "StatusCode.UNAUTHENTICATED"
        out = g.infer("identity_fp32", _inputs(grpcclient), headers={"authorization": "Bearer k-infer"})
        assert out.as_numpy("OUTPUT0").tolist() == [1, 2]
        with pytest.raises(InferenceServerException) as info:
            g.get_model_repository_index(headers={"authorization": "Bearer k-infer"})
        assert info.value.status() == "StatusCode.PERMISSION_DENIED"
    finally:
        g.close()


def test_a_bad_restriction_stops_the_server_with_the_references_message(
    start_server: Callable[..., Any],
) -> None:
    with pytest.raises(RuntimeError, match="unknown restricted api 'everything'"):
        start_server("--http-restricted-api=everything:k=v")
