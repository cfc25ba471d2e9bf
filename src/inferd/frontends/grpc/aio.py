"""GRPCInferenceService on ``grpc.aio``, on the server's event loop (``--grpc-server aio``; TLS and
compressed responses always).

The servicer is mounted through its own method table instead of
``add_GRPCInferenceServiceServicer_to_server``: every method receives the request as bytes and
answers with bytes, so a payload that is no protobuf gets the reference's ``INTERNAL`` "Unable to
parse request" instead of grpcio's own answer, and ModelInfer answers with the bytes the codec
wrote. Failures arrive as ``RpcError`` (``service.rpc_error`` mapped them) and become aborts here.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any, TypeAlias

import grpc
import grpc.aio

from inferd.errors import InternalError
from inferd.frontends.address import grpc_target
from inferd.frontends.grpc.service import (
    HEALTH_SERVICE,
    MAX_MESSAGE_BYTES,
    SERVICE,
    UNARY_RPCS,
    InferenceServicer,
    RpcError,
)
from inferd.server_config import GrpcConfig

log = logging.getLogger("inferd.grpc")

_COMPRESSION_LEVELS = {"none": 0, "low": 1, "medium": 2, "high": 3}
Context: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"


def _unary_handler(servicer: InferenceServicer, rpc: str) -> grpc.RpcMethodHandler:
    async def handle(data: bytes, context: Context) -> bytes:
        try:
            return await servicer.call_unary(rpc, data, context)
        except RpcError as e:
            await context.abort(e.code, e.message)
        raise AssertionError("unreachable: abort raises")

    return grpc.unary_unary_rpc_method_handler(handle)


def _model_infer_handler(servicer: InferenceServicer) -> grpc.RpcMethodHandler:
    async def handle(data: bytes, context: Context) -> bytes:
        try:
            return await servicer.model_infer_async(data, context.invocation_metadata())
        except RpcError as e:
            await context.abort(e.code, e.message)
        raise AssertionError("unreachable: abort raises")

    return grpc.unary_unary_rpc_method_handler(handle)


def _stream_handler(servicer: InferenceServicer) -> grpc.RpcMethodHandler:
    async def handle(request_iterator: AsyncIterator[bytes], context: Context) -> None:
        error = await servicer.stream_infer(request_iterator, context)
        if error is not None:
            await context.abort(error.code, error.message)

    return grpc.stream_stream_rpc_method_handler(handle)


def method_handlers(servicer: InferenceServicer) -> dict[str, grpc.RpcMethodHandler]:
    """GRPCInferenceService's method table over ``servicer`` (requests and answers as bytes)."""
    handlers = {name: _unary_handler(servicer, name) for name in UNARY_RPCS if name != "ModelInfer"}
    handlers["ModelInfer"] = _model_infer_handler(servicer)
    handlers["ModelStreamInfer"] = _stream_handler(servicer)
    return handlers


def health_handlers(servicer: InferenceServicer) -> dict[str, grpc.RpcMethodHandler]:
    """``grpc.health.v1.Health/Check``."""

    async def check(data: bytes, context: Context) -> bytes:
        try:
            return servicer.health_check(data, context.invocation_metadata())
        except RpcError as e:
            await context.abort(e.code, e.message)
        raise AssertionError("unreachable: abort raises")

    return {"Check": grpc.unary_unary_rpc_method_handler(check)}


def server_options(config: GrpcConfig) -> list[tuple[str, Any]]:
    """grpcio channel arguments from tritonserver's gRPC flags."""
    opts: list[tuple[str, Any]] = [
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_receive_message_length", config.max_message_size),
        ("grpc.max_concurrent_streams", config.max_concurrent_streams),
        ("grpc.max_metadata_size", config.max_header_list_size),
        ("grpc.so_reuseport", 1 if config.reuse_port else 0),
        ("grpc.keepalive_time_ms", config.keepalive_time_ms),
        ("grpc.keepalive_timeout_ms", config.keepalive_timeout_ms),
        ("grpc.keepalive_permit_without_calls", int(config.keepalive_permit_without_calls)),
        ("grpc.http2.max_pings_without_data", config.http2_max_pings_without_data),
        (
            "grpc.http2.min_ping_interval_without_data_ms",
            config.http2_min_recv_ping_interval_without_data_ms,
        ),
        ("grpc.http2.max_ping_strikes", config.http2_max_ping_strikes),
    ]
    if config.max_connection_age_ms is not None:
        opts.append(("grpc.max_connection_age_ms", config.max_connection_age_ms))
    if config.max_connection_age_grace_ms is not None:
        opts.append(("grpc.max_connection_age_grace_ms", config.max_connection_age_grace_ms))
    level = _COMPRESSION_LEVELS[config.infer_response_compression_level]
    if level:
        opts.append(("grpc.default_compression_level", level))
    return opts


def _credentials(config: GrpcConfig) -> grpc.ServerCredentials | None:
    if not config.use_ssl:
        return None

    def read(path: str | None) -> bytes | None:
        if not path:
            return None
        with open(path, "rb") as f:
            return f.read()

    key, cert = read(config.server_key), read(config.server_cert)
    if key is None or cert is None:
        raise InternalError("--grpc-use-ssl needs --grpc-server-cert and --grpc-server-key")
    return grpc.ssl_server_credentials(
        [(key, cert)],
        root_certificates=read(config.root_cert),
        require_client_auth=config.use_ssl_mutual,
    )


class GrpcServer:
    """The gRPC endpoint on grpc.aio, on the running event loop."""

    def __init__(self, servicer: InferenceServicer, address: str, port: int) -> None:
        self.config = servicer.config
        self.servicer = servicer
        self.address = address
        self.port = port
        self._server: grpc.aio.Server | None = None

    async def start(self) -> None:
        """Bind and serve; ``port`` 0 picks a free one (``self.port`` tells which). OSError when the
        address cannot be bound."""
        s = grpc.aio.server(options=server_options(self.config))
        s.add_generic_rpc_handlers(
            (
                grpc.method_handlers_generic_handler(SERVICE, method_handlers(self.servicer)),
                grpc.method_handlers_generic_handler(HEALTH_SERVICE, health_handlers(self.servicer)),
            )
        )
        target = grpc_target(self.address, self.port)
        creds = _credentials(self.config)
        try:
            bound = s.add_secure_port(target, creds) if creds is not None else s.add_insecure_port(target)
        except RuntimeError as e:
            raise OSError(f"failed to bind {target}: {e}") from e
        if bound == 0:
            raise OSError(f"failed to bind {target}")
        self.port = bound
        await s.start()
        self._server = s

    async def stop(self, grace: float | None = None) -> None:
        """Refuse new RPCs; give running ones ``grace`` seconds (None: until they end), then cancel."""
        if self._server is not None:
            await self._server.stop(grace)
