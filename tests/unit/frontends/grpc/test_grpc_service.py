"""InferenceServicer over a fake core: the transports' four entry points and the one error mapping."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import numpy as np
import pytest
from tritonclient.grpc import service_pb2 as pb

from inferd.core.response import InferResponse
from inferd.errors import ErrorCode, InternalError, error_for_code
from inferd.frontends.grpc.codec import PARSE_ERROR
from inferd.frontends.grpc.service import InferenceServicer, RpcError, rpc_error
from inferd.server_config import GrpcConfig


def infer_request(
    model: str = "identity_fp32", values: tuple[float, ...] = (1.0, 2.0)
) -> pb.ModelInferRequest:
    msg = pb.ModelInferRequest(model_name=model, id="r1")
    msg.inputs.add(name="INPUT0", datatype="FP32", shape=[len(values)])
    msg.raw_input_contents.append(np.array(values, np.float32).tobytes())
    return msg


class Context:
    def __init__(self, metadata: tuple[tuple[str, str], ...] = ()) -> None:
        self.metadata = metadata
        self.written: list[bytes] = []

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self.metadata

    async def write(self, message: bytes) -> None:
        self.written.append(message)


def model_infer(servicer: InferenceServicer, payload: bytes) -> tuple[bytes | None, RpcError | None]:
    async def main() -> tuple[bytes | None, RpcError | None]:
        try:
            return await servicer.model_infer_async(payload, ()), None
        except RpcError as e:
            return None, e

    return asyncio.run(main())


@pytest.mark.parametrize("code", list(ErrorCode))
def test_every_error_code_maps_to_its_grpc_status(code: ErrorCode) -> None:
    e = rpc_error(error_for_code(code, "why"))
    assert e.code is grpc.StatusCode[code.grpc_status_name] and e.message == "why"
    assert e.number == e.code.value[0]


def test_a_bug_is_internal_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    e = rpc_error(KeyError("k"))
    assert e.code is grpc.StatusCode.INTERNAL and e.message == "internal error: KeyError: 'k'"
    assert "gRPC call failed" in caplog.text


def test_model_infer_answers_the_encoded_response(core: Any) -> None:
    servicer = InferenceServicer(core, GrpcConfig())
    body, error = model_infer(servicer, infer_request().SerializeToString())
    assert error is None and body is not None
    resp = pb.ModelInferResponse.FromString(body)
    assert resp.id == "r1" and resp.outputs[0].name == "OUTPUT0"
    assert np.frombuffer(resp.raw_output_contents[0], np.float32).tolist() == [1.0, 2.0]
    assert core.calls == [
        ("identity_fp32", "", "ModelInfer RPC doesn't support models with decoupled transaction policy")
    ]


@pytest.mark.parametrize(
    ("payload", "status", "text"),
    [
        (b"\xff", grpc.StatusCode.INTERNAL, PARSE_ERROR),
        (infer_request("nope").SerializeToString(), grpc.StatusCode.NOT_FOUND, "Request for unknown model"),
        (infer_request("repeat").SerializeToString(), grpc.StatusCode.UNIMPLEMENTED, "decoupled transaction"),
        (
            pb.ModelInferRequest(model_name="identity_fp32", model_version="x").SerializeToString(),
            grpc.StatusCode.INVALID_ARGUMENT,
            "failed to get model version",
        ),
    ],
)
def test_model_infer_refusals(core: Any, payload: bytes, status: grpc.StatusCode, text: str) -> None:
    _, error = model_infer(InferenceServicer(core, GrpcConfig()), payload)
    assert error is not None and error.code is status and text in error.message


def test_model_infer_error_of_the_model(core: Any) -> None:
    core.answer = lambda r: InferResponse(r.model_name, "1", r.id, error=InternalError("exploded"))
    _, error = model_infer(InferenceServicer(core, GrpcConfig()), infer_request().SerializeToString())
    assert error is not None and (error.code, error.message) == (grpc.StatusCode.INTERNAL, "exploded")


def test_forwarded_headers_reach_the_request(core: Any) -> None:
    servicer = InferenceServicer(core, GrpcConfig(header_forward_pattern="^x-"))

    async def main() -> None:
        await servicer.model_infer_async(infer_request().SerializeToString(), (("x-team", "a"), ("y", "b")))

    asyncio.run(main())
    assert core.requests[0].parameters == {"x-team": "a"}


def test_a_cancelled_call_cancels_its_request(core: Any) -> None:
    core.hold = True
    servicer = InferenceServicer(core, GrpcConfig())

    async def main() -> None:
        task = asyncio.get_running_loop().create_task(
            servicer.model_infer_async(infer_request().SerializeToString(), ())
        )
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert core.streams[0].cancelled

    asyncio.run(main())


def test_call_unary_parses_dispatches_and_maps(core: Any) -> None:
    servicer = InferenceServicer(core, GrpcConfig())

    async def main() -> None:
        live = await servicer.call_unary("ServerLive", b"", Context())
        assert pb.ServerLiveResponse.FromString(live).live
        meta = await servicer.call_unary(
            "ModelMetadata", pb.ModelMetadataRequest(name="identity_fp32").SerializeToString(), Context()
        )
        assert pb.ModelMetadataResponse.FromString(meta).inputs[0].name == "INPUT0"
        with pytest.raises(RpcError) as info:
            await servicer.call_unary(
                "ModelMetadata", pb.ModelMetadataRequest(name="x").SerializeToString(), Context()
            )
        assert info.value.code is grpc.StatusCode.NOT_FOUND
        with pytest.raises(RpcError) as info:
            await servicer.call_unary("ServerLive", b"\xff", Context())
        assert (info.value.code, info.value.message) == (grpc.StatusCode.INTERNAL, PARSE_ERROR)
        with pytest.raises(RpcError) as info:
            await servicer.call_unary(
                "RepositoryModelLoad", pb.RepositoryModelLoadRequest().SerializeToString(), Context()
            )
        assert info.value.code is grpc.StatusCode.UNAVAILABLE

    asyncio.run(main())


def test_health_check(core: Any) -> None:
    servicer = InferenceServicer(core, GrpcConfig())
    assert servicer.health_check(b"") == b"\x08\x01"
    core.is_ready = False
    assert servicer.health_check(b"") == b"\x08\x02"
    with pytest.raises(RpcError):
        servicer.health_check(b"\xff")


def test_stream_infer_answers_each_request_and_errors_do_not_end_it(core: Any) -> None:
    servicer = InferenceServicer(core, GrpcConfig())
    ctx = Context()

    async def messages() -> AsyncIterator[bytes]:
        yield infer_request(values=(3.0,)).SerializeToString()
        yield infer_request("nope").SerializeToString()
        yield infer_request(values=(4.0,)).SerializeToString()

    assert asyncio.run(servicer.stream_infer(messages(), ctx)) is None
    answers = [pb.ModelStreamInferResponse.FromString(m) for m in ctx.written]
    assert [a.error_message for a in answers].count("Request for unknown model: 'nope' is not found") == 1
    values = [
        np.frombuffer(a.infer_response.raw_output_contents[0], np.float32)[0]
        for a in answers
        if not a.error_message
    ]
    assert sorted(values) == [3.0, 4.0]
    assert [c[2] for c in core.calls] == [None, None, None]  # a stream takes decoupled models
