"""GRPCInferenceService on ``grpc.aio``, on the server's event loop: decode -> core Server -> encode.

``InferenceServicer`` has every method of tritonclient's generated
``GRPCInferenceServiceServicer`` (tests check the list) with the generated signatures:
``(request message, context)``. It is mounted through its own method table instead of
``add_GRPCInferenceServiceServicer_to_server``: every method receives the request as bytes and
parses it itself, so a payload that is no protobuf gets the reference's ``INTERNAL`` "Unable to
parse request" instead of grpcio's own answer, and ModelInfer / ModelStreamInfer answer with bytes
the codec encodes directly. One error mapping: ``InferdError.code`` -> ``grpc.StatusCode``.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
import grpc.aio
from google.protobuf import json_format
from google.protobuf.message import DecodeError

from inferd.core.model import Model
from inferd.core.request import InferRequest
from inferd.core.response import InferResponse, ResponseStream
from inferd.core.server import Server
from inferd.errors import ErrorCode, InferdError, InternalError, UnsupportedError
from inferd.frontends.grpc._pb import pb
from inferd.frontends.grpc.codec import (
    FINAL_FALSE,
    FINAL_TRUE,
    ResponseEncoder,
    decode_infer_request,
    forwarded_headers,
    output_targets,
    parse_version,
    stream_error,
    stream_response,
    well_formed,
)
from inferd.options import ServerOptions
from inferd.shm.system import CudaSharedMemoryManager, SharedMemoryManager

log = logging.getLogger("inferd.grpc")

SERVICE = "inference.GRPCInferenceService"
HEALTH_SERVICE = "grpc.health.v1.Health"
#: Triton's limit both ways
MAX_MESSAGE_BYTES = 2**31 - 1
_PARSE_ERROR = "Unable to parse request"
_DECOUPLED = "ModelInfer RPC doesn't support models with decoupled transaction policy"
_STATUS: dict[ErrorCode, grpc.StatusCode] = {c: grpc.StatusCode[c.grpc_status_name] for c in ErrorCode}
_COMPRESSION_LEVELS = {"none": 0, "low": 1, "medium": 2, "high": 3}
#: SERVING / NOT_SERVING HealthCheckResponse
_HEALTH = {True: b"\x08\x01", False: b"\x08\x02"}


class _Abort(Exception):
    """Answer the RPC with this status (raised below the handlers, turned into abort once)."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code = code
        self.details = details


def _status(e: InferdError) -> _Abort:
    return _Abort(_STATUS[e.code], e.message)


class InferenceServicer:
    """Every RPC of GRPCInferenceService over one core Server."""

    def __init__(
        self,
        server: Server,
        options: ServerOptions | None = None,
        shm: SharedMemoryManager | None = None,
        cuda_shm: CudaSharedMemoryManager | None = None,
    ) -> None:
        self.server = server
        self.options = options or server.options
        self.shm = shm if shm is not None else SharedMemoryManager()
        self.cuda_shm = cuda_shm if cuda_shm is not None else CudaSharedMemoryManager()
        self.encoder = ResponseEncoder()
        pattern = self.options.grpc_header_forward_pattern
        self._forward = re.compile(pattern, re.IGNORECASE) if pattern else None

    # -- health and metadata ---------------------------------------------------------------------
    async def ServerLive(self, request: Any, context: Any) -> Any:
        return pb.ServerLiveResponse(live=self.server.live())

    async def ServerReady(self, request: Any, context: Any) -> Any:
        return pb.ServerReadyResponse(ready=self.server.ready())

    async def ModelReady(self, request: Any, context: Any) -> Any:
        try:
            version = parse_version(request.version)
        except InferdError:
            return pb.ModelReadyResponse(ready=False)
        return pb.ModelReadyResponse(ready=self.server.model_ready(request.name, version))

    async def ServerMetadata(self, request: Any, context: Any) -> Any:
        return json_format.ParseDict(self.server.metadata(), pb.ServerMetadataResponse())

    async def ModelMetadata(self, request: Any, context: Any) -> Any:
        doc = self.server.model_metadata(request.name, parse_version(request.version))
        return json_format.ParseDict(doc, pb.ModelMetadataResponse())

    async def ModelConfig(self, request: Any, context: Any) -> Any:
        model = self.server.get_model(request.name, parse_version(request.version))
        resp = pb.ModelConfigResponse()
        resp.config.CopyFrom(model.config)
        return resp

    async def ModelStatistics(self, request: Any, context: Any) -> Any:
        doc = self.server.statistics(request.name, parse_version(request.version))
        return json_format.ParseDict(doc, pb.ModelStatisticsResponse(), ignore_unknown_fields=True)

    # -- repository ------------------------------------------------------------------------------
    async def RepositoryIndex(self, request: Any, context: Any) -> Any:
        if request.repository_name:
            raise UnsupportedError("'repository_name' specification is not supported")
        resp = pb.RepositoryIndexResponse()
        for entry in self.server.repository_index(request.ready):
            resp.models.add(**entry)
        return resp

    async def RepositoryModelLoad(self, request: Any, context: Any) -> Any:
        if request.repository_name:
            raise UnsupportedError("'repository_name' specification is not supported")
        self.server.load_model(request.model_name)
        return pb.RepositoryModelLoadResponse()

    async def RepositoryModelUnload(self, request: Any, context: Any) -> Any:
        if request.repository_name:
            raise UnsupportedError("'repository_name' specification is not supported")
        self.server.unload_model(request.model_name)
        return pb.RepositoryModelUnloadResponse()

    # -- shared memory ---------------------------------------------------------------------------
    async def SystemSharedMemoryStatus(self, request: Any, context: Any) -> Any:
        resp = pb.SystemSharedMemoryStatusResponse()
        for region in self.shm.status(request.name):
            resp.regions[region["name"]].CopyFrom(pb.SystemSharedMemoryStatusResponse.RegionStatus(**region))
        return resp

    async def SystemSharedMemoryRegister(self, request: Any, context: Any) -> Any:
        self.shm.register(request.name, request.key, request.offset, request.byte_size)
        return pb.SystemSharedMemoryRegisterResponse()

    async def SystemSharedMemoryUnregister(self, request: Any, context: Any) -> Any:
        self.shm.unregister(request.name)
        return pb.SystemSharedMemoryUnregisterResponse()

    async def CudaSharedMemoryStatus(self, request: Any, context: Any) -> Any:
        resp = pb.CudaSharedMemoryStatusResponse()
        for region in self.cuda_shm.status(request.name):
            resp.regions[region["name"]].CopyFrom(pb.CudaSharedMemoryStatusResponse.RegionStatus(**region))
        return resp

    async def CudaSharedMemoryRegister(self, request: Any, context: Any) -> Any:
        self.cuda_shm.register(request.name, request.raw_handle, request.device_id, request.byte_size)
        return pb.CudaSharedMemoryRegisterResponse()

    async def CudaSharedMemoryUnregister(self, request: Any, context: Any) -> Any:
        self.cuda_shm.unregister(request.name)
        return pb.CudaSharedMemoryUnregisterResponse()

    # -- trace and logging: not served (the extensions are not listed in server metadata) ---------
    async def TraceSetting(self, request: Any, context: Any) -> Any:
        raise UnsupportedError("the trace extension is not supported by this server")

    async def LogSettings(self, request: Any, context: Any) -> Any:
        raise UnsupportedError("the logging extension is not supported by this server")

    # -- inference -------------------------------------------------------------------------------
    def _decode(self, msg: Any, context: Any, unary: bool) -> tuple[InferRequest, Model, bool]:
        """The request, its model, and whether it asked for the empty final response."""
        model = self.server.get_model(msg.model_name, parse_version(msg.model_version))
        if unary and model.decoupled:
            raise UnsupportedError(_DECOUPLED)
        request, empty_final = decode_infer_request(msg, model, self.shm)
        if self._forward is not None:
            request.parameters.update(forwarded_headers(context.invocation_metadata() or (), self._forward))
        return request, model, empty_final

    async def ModelInfer(self, request: Any, context: Any) -> bytes:
        """One request, one response; the answer is the encoded ModelInferResponse."""
        req, model, _ = self._decode(request, context, True)
        server = self.server
        stream = server.submit(req, model)
        loop = asyncio.get_running_loop()
        done: asyncio.Future[InferResponse | None] = loop.create_future()

        def on_response(r: InferResponse | None, final: bool) -> None:
            if not done.done() and (r is not None or final):
                done.set_result(r)

        stream.set_callback(on_response)
        try:
            resp = await done
        except asyncio.CancelledError:
            stream.cancelled = True  # the client went away: the model may check is_cancelled()
            raise
        if resp is None:
            raise InternalError("model produced no response")
        if resp.error is not None:
            raise resp.error
        server.postprocess(req, resp, model)
        return self.encoder.encode(resp, b"", output_targets(req) if req.outputs is not None else None)

    async def ModelStreamInfer(self, request_iterator: AsyncIterator[bytes], context: Any) -> None:
        """Bidirectional: every request's responses as they come; errors never end the stream."""
        out: asyncio.Queue[bytes | None] = asyncio.Queue()
        pending: set[ResponseStream] = set()
        reading = True

        def finish_if_idle() -> None:
            if not reading and not pending:
                out.put_nowait(None)

        async def read() -> None:
            nonlocal reading
            try:
                async for data in request_iterator:
                    try:
                        msg = pb.ModelInferRequest.FromString(data)
                    except DecodeError:
                        break  # as the reference: the stream ends (OK) after what it answered
                    self._stream_one(msg, context, out, pending, finish_if_idle)
            finally:
                reading = False
                finish_if_idle()

        reader = asyncio.get_running_loop().create_task(read())
        try:
            while True:
                item = await out.get()
                if item is None:
                    break
                await context.write(item)
            await reader
        finally:
            reader.cancel()
            for s in pending:
                s.cancelled = True

    def _stream_one(
        self,
        msg: Any,
        context: Any,
        out: asyncio.Queue[bytes | None],
        pending: set[ResponseStream],
        finish_if_idle: Callable[[], None],
    ) -> None:
        try:
            req, model, empty_final = self._decode(msg, context, False)
            stream = self.server.submit(req, model)
        except InferdError as e:
            out.put_nowait(stream_error(e.message, msg.id))
            return
        pending.add(stream)
        encode = self.encoder.encode
        targets = output_targets(req)
        decoupled = model.decoupled
        server = self.server

        def on_response(r: InferResponse | None, final: bool) -> None:
            if r is not None:
                flag = FINAL_TRUE if final or not decoupled else FINAL_FALSE
                if r.error is not None:
                    out.put_nowait(stream_error(r.error.message, req.id, r.model_name, flag))
                else:
                    try:
                        server.postprocess(req, r, model)
                        out.put_nowait(stream_response(encode(r, flag, targets)))
                    except InferdError as e:
                        out.put_nowait(stream_error(e.message, req.id, r.model_name, flag))
            elif final and decoupled and empty_final:
                out.put_nowait(stream_response(encode(InferResponse(req.model_name, "", req.id), FINAL_TRUE)))
            if final:
                pending.discard(stream)
                finish_if_idle()

        stream.set_callback(on_response)


# -- mounting ------------------------------------------------------------------------------------------
def _unary_handler(method: Callable[[Any, Any], Awaitable[Any]], request_cls: Any) -> grpc.RpcMethodHandler:
    async def handle(data: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
        try:
            try:
                request = request_cls.FromString(data)
            except DecodeError:
                raise _Abort(grpc.StatusCode.INTERNAL, _PARSE_ERROR) from None
            try:
                resp = await method(request, context)
            except InferdError as e:
                raise _status(e) from e
            return resp if isinstance(resp, bytes) else resp.SerializeToString()  # type: ignore[no-any-return]
        except _Abort as a:
            await context.abort(a.code, a.details)
        except (asyncio.CancelledError, grpc.aio.AbortError):
            raise
        except Exception as e:  # last resort: log, answer INTERNAL, keep serving
            log.exception("gRPC %s failed", getattr(method, "__name__", "?"))
            await context.abort(grpc.StatusCode.INTERNAL, f"internal error: {type(e).__name__}: {e}")
        raise AssertionError("unreachable: abort raises")

    return grpc.unary_unary_rpc_method_handler(handle)


def _stream_handler(method: Callable[[Any, Any], Awaitable[None]]) -> grpc.RpcMethodHandler:
    async def handle(
        request_iterator: AsyncIterator[bytes], context: grpc.aio.ServicerContext[Any, Any]
    ) -> None:
        try:
            await method(request_iterator, context)
        except (asyncio.CancelledError, grpc.aio.AbortError):
            raise
        except Exception as e:
            log.exception("gRPC ModelStreamInfer failed")
            await context.abort(grpc.StatusCode.INTERNAL, f"internal error: {type(e).__name__}: {e}")

    return grpc.stream_stream_rpc_method_handler(handle)


#: RPC name -> its request message (every unary RPC of the service)
UNARY_RPCS = (
    "ServerLive",
    "ServerReady",
    "ModelReady",
    "ServerMetadata",
    "ModelMetadata",
    "ModelInfer",
    "ModelConfig",
    "ModelStatistics",
    "RepositoryIndex",
    "RepositoryModelLoad",
    "RepositoryModelUnload",
    "SystemSharedMemoryStatus",
    "SystemSharedMemoryRegister",
    "SystemSharedMemoryUnregister",
    "CudaSharedMemoryStatus",
    "CudaSharedMemoryRegister",
    "CudaSharedMemoryUnregister",
    "TraceSetting",
    "LogSettings",
)


def method_handlers(servicer: InferenceServicer) -> dict[str, grpc.RpcMethodHandler]:
    """GRPCInferenceService's method table over ``servicer`` (requests and answers as bytes)."""
    handlers = {
        name: _unary_handler(getattr(servicer, name), getattr(pb, f"{name}Request")) for name in UNARY_RPCS
    }
    handlers["ModelStreamInfer"] = _stream_handler(servicer.ModelStreamInfer)
    return handlers


def health_handlers(server: Server) -> dict[str, grpc.RpcMethodHandler]:
    """``grpc.health.v1.Health/Check``: SERVING iff the server is ready (any service name)."""

    async def check(data: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
        if not well_formed(data):
            await context.abort(grpc.StatusCode.INTERNAL, _PARSE_ERROR)
        return _HEALTH[server.ready()]

    return {"Check": grpc.unary_unary_rpc_method_handler(check)}


def server_options(options: ServerOptions) -> list[tuple[str, Any]]:
    """grpcio channel arguments from tritonserver's gRPC flags."""
    opts: list[tuple[str, Any]] = [
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        ("grpc.so_reuseport", 1 if options.reuse_grpc_port else 0),
        ("grpc.keepalive_time_ms", options.grpc_keepalive_time),
        ("grpc.keepalive_timeout_ms", options.grpc_keepalive_timeout),
        ("grpc.keepalive_permit_without_calls", int(options.grpc_keepalive_permit_without_calls)),
        ("grpc.http2.max_pings_without_data", options.grpc_http2_max_pings_without_data),
        (
            "grpc.http2.min_ping_interval_without_data_ms",
            options.grpc_http2_min_recv_ping_interval_without_data,
        ),
        ("grpc.http2.max_ping_strikes", options.grpc_http2_max_ping_strikes),
    ]
    if options.grpc_max_connection_age is not None:
        opts.append(("grpc.max_connection_age_ms", options.grpc_max_connection_age))
    if options.grpc_max_connection_age_grace is not None:
        opts.append(("grpc.max_connection_age_grace_ms", options.grpc_max_connection_age_grace))
    level = _COMPRESSION_LEVELS[options.grpc_infer_response_compression_level]
    if level:
        opts.append(("grpc.default_compression_level", level))
    return opts


def _credentials(options: ServerOptions) -> grpc.ServerCredentials | None:
    if not options.grpc_use_ssl:
        return None

    def read(path: str | None) -> bytes | None:
        if not path:
            return None
        with open(path, "rb") as f:
            return f.read()

    key, cert = read(options.grpc_server_key), read(options.grpc_server_cert)
    if key is None or cert is None:
        raise InternalError("--grpc-use-ssl needs --grpc-server-cert and --grpc-server-key")
    return grpc.ssl_server_credentials(
        [(key, cert)],
        root_certificates=read(options.grpc_root_cert),
        require_client_auth=options.grpc_use_ssl_mutual,
    )


class GrpcServer:
    """The gRPC endpoint of one core Server, on the running event loop."""

    def __init__(
        self,
        server: Server,
        address: str,
        port: int,
        options: ServerOptions | None = None,
        shm: SharedMemoryManager | None = None,
        cuda_shm: CudaSharedMemoryManager | None = None,
    ) -> None:
        self.options = options or server.options
        self.servicer = InferenceServicer(server, self.options, shm, cuda_shm)
        self.address = address
        self.port = port
        self._server: grpc.aio.Server | None = None

    async def start(self) -> None:
        """Bind and serve; ``port`` 0 picks a free one (``self.port`` tells which). OSError when the
        address cannot be bound."""
        s = grpc.aio.server(options=server_options(self.options))
        s.add_generic_rpc_handlers(
            (
                grpc.method_handlers_generic_handler(SERVICE, method_handlers(self.servicer)),
                grpc.method_handlers_generic_handler(HEALTH_SERVICE, health_handlers(self.servicer.server)),
            )
        )
        target = f"{self.address}:{self.port}"
        creds = _credentials(self.options)
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
