"""The real Triton 2.51's gRPC answers, asked of inferd: tests/fixtures/reference_observed_grpc.json.

Each case is one RPC (or one ModelStreamInfer stream) as exact protobuf bytes, and the reference's
status code, details and response, recorded with tests/fixtures/make_reference_observed_grpc.py
against the reference serving the same repository (reference models + tests/fixtures/models).
After every answer a good request must still succeed.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from conftest import REPO_ROOT, InferdProcess
from google.protobuf import json_format
from tritonclient.grpc import service_pb2 as pb

OBSERVED_FILE = REPO_ROOT / "tests" / "fixtures" / "reference_observed_grpc.json"
OBSERVED: dict[str, Any] = json.loads(OBSERVED_FILE.read_text())
CASES: list[dict[str, Any]] = OBSERVED["cases"]
SERVICE = "/inference.GRPCInferenceService/"

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def channel(server: InferdProcess) -> Iterator[grpc.Channel]:
    ch = grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}")
    yield ch
    ch.close()


def _json(msg: Any) -> Any:
    return json_format.MessageToDict(msg, preserving_proto_field_name=True)


def _response_class(rpc: str) -> Any:
    return getattr(pb, f"{rpc}Response")


def _paths(value: Any, server: InferdProcess) -> Any:
    """The reference's repository path in recorded texts -> this server's. A file of a model
    (``<repository>/m/1/model.py``) is named from the repository's root (``m/1/model.py``): inferd
    tells clients no server path (README's deliberate differences)."""
    text = json.dumps(value).replace(OBSERVED["repository"] + "/", "")
    return json.loads(text.replace(OBSERVED["repository"], str(server.repository)))


def _assert_serving(channel: grpc.Channel) -> None:
    good = pb.ModelInferRequest(model_name="identity_fp32")
    good.inputs.add(name="INPUT0", datatype="FP32", shape=[2])
    good.raw_input_contents.append(b"\x00\x00\x80?\x00\x00\x00@")
    out = pb.ModelInferResponse.FromString(
        channel.unary_unary(SERVICE + "ModelInfer")(good.SerializeToString(), timeout=30)
    )
    assert out.raw_output_contents[0] == b"\x00\x00\x80?\x00\x00\x00@"


def _unary(channel: grpc.Channel, case: dict[str, Any]) -> tuple[str, str, Any]:
    fn = channel.unary_unary(SERVICE + case["rpc"])
    try:
        body = fn(base64.b64decode(case["request_b64"]), timeout=30)
    except grpc.RpcError as e:
        return e.code().name, e.details() or "", None
    return "OK", "", _json(_response_class(case["rpc"]).FromString(body))


def _stream(channel: grpc.Channel, case: dict[str, Any]) -> tuple[str, str, list[Any]]:
    fn = channel.stream_stream(SERVICE + "ModelStreamInfer")
    out: list[Any] = []
    try:
        for body in fn(iter([base64.b64decode(r) for r in case["requests_b64"]]), timeout=30):
            out.append(_json(pb.ModelStreamInferResponse.FromString(body)))
    except grpc.RpcError as e:
        return e.code().name, e.details() or "", out
    return "OK", "", out


def _bytes_outputs(resp: dict[str, Any]) -> dict[str, list[bytes]]:
    """BYTES outputs of a ModelInferResponse (as JSON) decoded into their elements."""
    out: dict[str, list[bytes]] = {}
    for o, raw in zip(resp["outputs"], resp["raw_output_contents"], strict=True):
        data, items = base64.b64decode(raw), []
        while data:
            n = int.from_bytes(data[:4], "little")
            items.append(data[4 : 4 + n])
            data = data[4 + n :]
        out[o["name"]] = items
    return out


def test_observed_ids_are_unique() -> None:
    ids = [c["id"] for c in CASES]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_reference_observed_grpc(server: InferdProcess, channel: grpc.Channel, case: dict[str, Any]) -> None:
    if case["rpc"] == "ModelStreamInfer":
        code, details, responses = _stream(channel, case)
        assert (code, details) == (case["code"], case["details"])
        assert responses == _paths(case["responses"], server)
        _assert_serving(channel)
        return
    code, details, response = _unary(channel, case)
    assert (code, details) == (case["code"], _paths(case["details"], server))
    want = _paths(case.get("response"), server)
    cid = case["id"]
    if cid == "server_metadata":
        # inferd lists the extensions it really serves, the same over both protocols
        assert response["extensions"] == server.request("GET", "/v2").json()["extensions"]
        assert {k: v for k, v in response.items() if k != "extensions"} == {
            k: v for k, v in want.items() if k != "extensions"
        }
    elif cid.startswith("index") and want is not None:
        # the repository has gained test models since the recording: compare the recorded ones
        recorded = {m["name"] for m in want["models"]}
        assert [m for m in response["models"] if m["name"] in recorded] == want["models"]
    elif cid == "infer_ok_params":
        # the model prints the request's parameters as JSON: map order is the server's own
        got, expected = _bytes_outputs(response), _bytes_outputs(want)
        assert json.loads(got.pop("PARAMETERS")[0]) == json.loads(expected.pop("PARAMETERS")[0])
        old, new = OBSERVED["repository"].encode(), str(server.repository).encode()
        assert got == {k: [v.replace(old, new) for v in vs] for k, vs in expected.items()}
    elif cid == "infer_ok_ensemble":
        # known core difference (not gRPC's): the reference lists the ensemble's outputs in the
        # order its steps produced them (OUTPUT1 from step 1 first), inferd in config order
        pairs = sorted(zip(response["outputs"], response["raw_output_contents"], strict=True), key=str)
        want_pairs = sorted(zip(want["outputs"], want["raw_output_contents"], strict=True), key=str)
        assert pairs == want_pairs
        assert response["parameters"] == want["parameters"]
    else:
        assert response == want
    _assert_serving(channel)
