"""GRPCInferenceService, transport-free: decode -> ``Core.submit`` -> encode, one error mapping.

``InferenceServicer`` has every method of tritonclient's generated ``GRPCInferenceServiceServicer``
(tests check the list) with the generated signatures, ``(request message, context)``; a context is
anything with ``invocation_metadata()`` and, for ModelStreamInfer, ``async write(bytes)``. The two
transports call it through four entry points and nothing else: ``call_unary`` (a unary RPC's
payload in, its answer's bytes out), ``model_infer`` (ModelInfer without a task: answers through
callbacks), ``stream_infer`` (ModelStreamInfer) and ``health_check``. Every failure leaves them as
an ``RpcError`` made by ``rpc_error``, the front end's one error mapping. ``aio.py`` mounts the
servicer on grpc.aio, ``h2server.py`` on the lean HTTP/2 server.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

import grpc
from google.protobuf import json_format
from google.protobuf.message import DecodeError

from inferd.core.request import parse_version
from inferd.core.response import InferResponse, ResponseStream
from inferd.core.unsent import UnsentBudget
from inferd.engine.facade import Core
from inferd.engine.overrides import load_parameters
from inferd.errors import ErrorCode, InferdError, InvalidArgumentError, UnsupportedError
from inferd.frontends.access import AccessPolicy, Category, Denial
from inferd.frontends.forward import compile_forward_pattern
from inferd.frontends.grpc import trace as _trace
from inferd.frontends.grpc._pb import pb
from inferd.frontends.grpc.codec import (
    FINAL_FALSE,
    FINAL_TRUE,
    PARSE_ERROR,
    ResponseEncoder,
    output_targets,
    stream_error,
    stream_response,
    well_formed,
)
from inferd.frontends.grpc.infer_call import InferCall, Metadata
from inferd.frontends.grpc.log_settings import log_settings
from inferd.frontends.grpc.request_cache import RequestCache
from inferd.frontends.grpc.stream_order import STREAM_IN_FLIGHT, InOrder, Out, Waiting
from inferd.frontends.request_log import (
    logged_health_check,
    logged_model_infer,
    logged_stream_request,
    logged_unary,
)
from inferd.logs import VERBOSE1, LogSettings, RequestLogging
from inferd.server_config import GrpcConfig
from inferd.shm.cuda import CudaSharedMemoryManager
from inferd.shm.system import SharedMemoryManager
from inferd.trace import Tracing

log = logging.getLogger("inferd.grpc")

SERVICE = "inference.GRPCInferenceService"
HEALTH_SERVICE = "grpc.health.v1.Health"
#: Triton's limit both ways
MAX_MESSAGE_BYTES = 2**31 - 1
_DECOUPLED = "ModelInfer RPC doesn't support models with decoupled transaction policy"
_STATUS: dict[ErrorCode, grpc.StatusCode] = {c: grpc.StatusCode[c.grpc_status_name] for c in ErrorCode}
#: SERVING / NOT_SERVING HealthCheckResponse
_HEALTH = {True: b"\x08\x01", False: b"\x08\x02"}


class RpcError(Exception):
    """End the call with this status (what every failure becomes before a transport sees it)."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    @property
    def number(self) -> int:
        """The status as its number on the wire (``grpc-status``)."""
        return int(self.code.value[0])


def rpc_error(e: BaseException) -> RpcError:
    """The one error mapping: an InferdError as Triton's gRPC status and its message; anything
    else (a bug of ours) logged and INTERNAL, so the server keeps serving."""
    if isinstance(e, RpcError):
        error = e
    elif isinstance(e, InferdError):
        error = RpcError(_STATUS[e.code], e.message)
    else:
        log.error("gRPC call failed", exc_info=e)
        return RpcError(grpc.StatusCode.INTERNAL, f"internal error: {type(e).__name__}: {e}")
    if log.isEnabledFor(VERBOSE1):  # verbose level 1: every failed request, with its reason
        log.log(VERBOSE1, "gRPC %s: %s", error.code.name, error.message)
    return error


class Context(Protocol):
    """What the servicer uses of a call's context (``grpc.aio.ServicerContext`` has it)."""

    def invocation_metadata(self) -> Metadata | None: ...

    async def write(self, message: bytes) -> None: ...


#: every unary RPC of the service (ModelInfer included: grpc.aio mounts it through ``model_infer``)
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


#: the API category of every RPC (the reference's)
RPC_CATEGORY: dict[str, Category] = {
    "ServerLive": Category.HEALTH,
    "ServerReady": Category.HEALTH,
    "ModelReady": Category.HEALTH,
    "ServerMetadata": Category.METADATA,
    "ModelMetadata": Category.METADATA,
    "ModelInfer": Category.INFERENCE,
    "ModelStreamInfer": Category.INFERENCE,
    "ModelConfig": Category.MODEL_CONFIG,
    "ModelStatistics": Category.STATISTICS,
    "RepositoryIndex": Category.MODEL_REPOSITORY,
    "RepositoryModelLoad": Category.MODEL_REPOSITORY,
    "RepositoryModelUnload": Category.MODEL_REPOSITORY,
    "SystemSharedMemoryStatus": Category.SHARED_MEMORY,
    "SystemSharedMemoryRegister": Category.SHARED_MEMORY,
    "SystemSharedMemoryUnregister": Category.SHARED_MEMORY,
    "CudaSharedMemoryStatus": Category.SHARED_MEMORY,
    "CudaSharedMemoryRegister": Category.SHARED_MEMORY,
    "CudaSharedMemoryUnregister": Category.SHARED_MEMORY,
    "TraceSetting": Category.TRACE,
    "LogSettings": Category.LOGGING,
}


class InferenceServicer:
    """Every RPC of GRPCInferenceService over one core."""

    def __init__(
        self,
        core: Core,
        config: GrpcConfig,
        shm: SharedMemoryManager | None = None,
        cuda_shm: CudaSharedMemoryManager | None = None,
        access: AccessPolicy | None = None,
        logs: LogSettings | None = None,
        tracing: Tracing | None = None,
        unsent: UnsentBudget | None = None,
    ) -> None:
        self.core = core
        #: the gRPC front end's part of the server's configuration (server_config.py)
        self.config = config
        #: the process's budget of answers held for clients, which a stream's waiting answers count in
        self.unsent = unsent
        self.logs = logs
        #: whether this server logs each call (its ``--log-verbose``): one attribute read per call
        self.request_log = logs.requests if logs is not None else RequestLogging()
        #: the trace extension (a server with tracing off when not given)
        self.tracing = tracing if tracing is not None else Tracing()
        self.access = access if access is not None and access.enabled else None
        self.shm = shm if shm is not None else SharedMemoryManager()
        self.cuda_shm = cuda_shm if cuda_shm is not None else CudaSharedMemoryManager()
        self.encoder = ResponseEncoder()
        self.requests = RequestCache()
        pattern = config.header_forward_pattern
        self.forward = compile_forward_pattern(pattern, "--grpc-header-forward-pattern")
        self._requests = {name: getattr(pb, f"{name}Request") for name in UNARY_RPCS}

    # -- the transports' entry points ------------------------------------------------------------
    def authorize(self, rpc: str, metadata: Metadata | None) -> None:
        """RpcError unless the call's metadata may use ``rpc`` (restrictions, API keys)."""
        access = self.access
        if access is None:
            return
        category = RPC_CATEGORY[rpc]
        headers: dict[str, str] = {}
        for k, v in metadata or ():  # a repeated key: its first value, as the reference reads it
            headers.setdefault(k.lower(), v if isinstance(v, str) else v.decode("latin-1"))
        denied = access.check(category, headers)
        if denied is None:
            return
        why, header = denied
        if why is Denial.RESTRICTED:
            raise RpcError(
                grpc.StatusCode.UNAVAILABLE, f"This protocol is restricted, expecting header '{header}'"
            )
        if why is Denial.UNAUTHENTICATED:
            raise RpcError(
                grpc.StatusCode.UNAUTHENTICATED, "this API needs an API key: 'authorization: Bearer <key>'"
            )
        raise RpcError(
            grpc.StatusCode.PERMISSION_DENIED, f"the API key does not grant the '{category.value}' APIs"
        )

    async def call_unary(self, rpc: str, payload: bytes, context: Context) -> bytes:
        """A unary RPC (not ModelInfer): the request's bytes in, the answer's bytes out; RpcError."""
        if self.request_log.on:  # --log-verbose 1: a line per call
            return await logged_unary(rpc, self._call_unary(rpc, payload, context), self.request_log.details)
        return await self._call_unary(rpc, payload, context)

    async def _call_unary(self, rpc: str, payload: bytes, context: Context) -> bytes:
        self.authorize(rpc, context.invocation_metadata())
        try:
            try:
                request = self._requests[rpc].FromString(payload)
            except DecodeError:
                raise RpcError(grpc.StatusCode.INTERNAL, PARSE_ERROR) from None
            answer = await getattr(self, rpc)(request, context)
            return answer if isinstance(answer, bytes) else answer.SerializeToString()
        except asyncio.CancelledError:
            raise
        except Exception as e:
            raise rpc_error(e) from e

    def health_check(self, payload: bytes, metadata: Metadata | None = None) -> bytes:
        """``grpc.health.v1.Health/Check``: SERVING iff the server is ready (any service name)."""
        if self.request_log.on:  # --log-verbose 1: a line per call
            return logged_health_check(self._health_check, payload, metadata, self.request_log.details)
        return self._health_check(payload, metadata)

    def _health_check(self, payload: bytes, metadata: Metadata | None) -> bytes:
        self.authorize("ServerReady", metadata)
        if not well_formed(payload):
            raise RpcError(grpc.StatusCode.INTERNAL, PARSE_ERROR)
        return _HEALTH[self.core.ready()]

    def model_infer(
        self,
        payload: bytes,
        metadata: Metadata | None,
        answer: Callable[[bytes], None],
        fail: Callable[[RpcError], None],
    ) -> ResponseStream | None:
        """ModelInfer without a task: the answer (or the failure) comes through a callback, on the
        loop; the returned stream is what to cancel when the client goes away."""
        if self.request_log.on:  # --log-verbose 1: a line once answered (all it costs while off)
            answer, fail = logged_model_infer(payload, answer, fail, self.request_log.details)
        call: InferCall | None = None
        try:
            self.authorize("ModelInfer", metadata)
            try:
                call = InferCall.read(self, payload, metadata)
            except DecodeError:
                raise RpcError(grpc.StatusCode.INTERNAL, PARSE_ERROR) from None
            if self.tracing.on:  # all that tracing costs while it is off
                call.at = time.monotonic_ns()
            stream = self.core.submit(
                call.model_name, parse_version(call.model_version), call.decode, decoupled_error=_DECOUPLED
            )
        except Exception as e:
            fail(rpc_error(e))
            if call is not None and call.trace is not None:  # sampled, then refused: never written
                call.trace.finish()
            return None
        encode = self.encoder.encode

        def on_response(r: InferResponse | None, final: bool) -> None:
            if r is None:
                if final:
                    fail(RpcError(grpc.StatusCode.INTERNAL, "model produced no response"))
                return
            if r.error is not None:
                fail(rpc_error(r.error))
                return
            try:
                body = encode(r, b"", call.targets())
            except Exception as e:
                fail(rpc_error(e))
                return
            answer(body)

        stream.set_callback(on_response if call.trace is None else _trace.traced(call.trace, on_response))
        return stream

    async def model_infer_async(self, payload: bytes, metadata: Metadata | None) -> bytes:
        """``model_infer`` awaited: the answer's bytes, or RpcError; a cancelled call cancels the request."""
        done: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()

        def answer(body: bytes) -> None:
            if not done.done():
                done.set_result(body)

        def fail(error: RpcError) -> None:
            if not done.done():
                done.set_exception(error)

        stream = self.model_infer(payload, metadata, answer, fail)
        try:
            return await done
        except asyncio.CancelledError:
            if stream is not None:
                stream.cancel("the client cancelled the call")
            raise

    async def stream_infer(self, messages: AsyncIterator[bytes], context: Context) -> RpcError | None:
        """ModelStreamInfer to its end: None when it ends OK, else the status to end it with."""
        try:
            self.authorize("ModelStreamInfer", context.invocation_metadata())
            await self.ModelStreamInfer(messages, context)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            return rpc_error(e)
        return None

    # -- health and metadata ---------------------------------------------------------------------
    async def ServerLive(self, request: pb.ServerLiveRequest, context: Any) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=self.core.live())

    async def ServerReady(self, request: pb.ServerReadyRequest, context: Any) -> pb.ServerReadyResponse:
        return pb.ServerReadyResponse(ready=self.core.ready())

    async def ModelReady(self, request: pb.ModelReadyRequest, context: Any) -> pb.ModelReadyResponse:
        try:
            version = parse_version(request.version)
        except InferdError:
            return pb.ModelReadyResponse(ready=False)
        ready = self.core.model_ready(request.name, version)
        check = self.core.ready_check(request.name, version) if ready else None
        if check is not None:  # the model's own is_ready(): bounded by engine/readiness.py
            ready = await check()
        return pb.ModelReadyResponse(ready=ready)

    async def ServerMetadata(
        self, request: pb.ServerMetadataRequest, context: Any
    ) -> pb.ServerMetadataResponse:
        return json_format.ParseDict(self.core.metadata(), pb.ServerMetadataResponse())

    async def ModelMetadata(self, request: pb.ModelMetadataRequest, context: Any) -> pb.ModelMetadataResponse:
        doc = self.core.model_metadata(request.name, parse_version(request.version))
        return json_format.ParseDict(doc, pb.ModelMetadataResponse())

    async def ModelConfig(self, request: pb.ModelConfigRequest, context: Any) -> pb.ModelConfigResponse:
        model = self.core.get_model(request.name, parse_version(request.version))
        resp = pb.ModelConfigResponse()
        resp.config.CopyFrom(model.config)
        return resp

    async def ModelStatistics(
        self, request: pb.ModelStatisticsRequest, context: Any
    ) -> pb.ModelStatisticsResponse:
        doc = await self.core.gather_statistics(request.name, parse_version(request.version))
        return json_format.ParseDict(doc, pb.ModelStatisticsResponse(), ignore_unknown_fields=True)

    # -- repository ------------------------------------------------------------------------------
    async def RepositoryIndex(
        self, request: pb.RepositoryIndexRequest, context: Any
    ) -> pb.RepositoryIndexResponse:
        if request.repository_name:
            raise UnsupportedError("'repository_name' specification is not supported")
        resp = pb.RepositoryIndexResponse()
        for entry in self.core.repository_index(request.ready):
            resp.models.add(**entry)
        return resp

    async def RepositoryModelLoad(
        self, request: pb.RepositoryModelLoadRequest, context: Any
    ) -> pb.RepositoryModelLoadResponse:
        if request.repository_name:
            raise UnsupportedError("'repository_name' specification is not supported")
        params = {k: _parameter_value(p) for k, p in request.parameters.items()}
        config, files = load_parameters(params, base64_files=False)
        await self.core.load_model(request.model_name, config, files)
        return pb.RepositoryModelLoadResponse()

    async def RepositoryModelUnload(
        self, request: pb.RepositoryModelUnloadRequest, context: Any
    ) -> pb.RepositoryModelUnloadResponse:
        if request.repository_name:
            raise UnsupportedError("'repository_name' specification is not supported")
        dependents = request.parameters.get("unload_dependents")
        if dependents is not None and dependents.WhichOneof("parameter_choice") != "bool_param":
            raise InvalidArgumentError("'unload_dependents' must be a bool_param")
        await self.core.unload_model(request.model_name, dependents is not None and dependents.bool_param)
        return pb.RepositoryModelUnloadResponse()

    # -- shared memory ---------------------------------------------------------------------------
    async def SystemSharedMemoryStatus(
        self, request: pb.SystemSharedMemoryStatusRequest, context: Any
    ) -> pb.SystemSharedMemoryStatusResponse:
        resp = pb.SystemSharedMemoryStatusResponse()
        for region in self.shm.status(request.name):
            resp.regions[region["name"]].CopyFrom(pb.SystemSharedMemoryStatusResponse.RegionStatus(**region))
        return resp

    async def SystemSharedMemoryRegister(
        self, request: pb.SystemSharedMemoryRegisterRequest, context: Any
    ) -> pb.SystemSharedMemoryRegisterResponse:
        await self.shm.register_everywhere(request.name, request.key, request.offset, request.byte_size)
        return pb.SystemSharedMemoryRegisterResponse()

    async def SystemSharedMemoryUnregister(
        self, request: pb.SystemSharedMemoryUnregisterRequest, context: Any
    ) -> pb.SystemSharedMemoryUnregisterResponse:
        await self.shm.unregister_everywhere(request.name)
        return pb.SystemSharedMemoryUnregisterResponse()

    async def CudaSharedMemoryStatus(
        self, request: pb.CudaSharedMemoryStatusRequest, context: Any
    ) -> pb.CudaSharedMemoryStatusResponse:
        resp = pb.CudaSharedMemoryStatusResponse()
        for region in self.cuda_shm.status(request.name):
            resp.regions[region["name"]].CopyFrom(pb.CudaSharedMemoryStatusResponse.RegionStatus(**region))
        return resp

    async def CudaSharedMemoryRegister(
        self, request: pb.CudaSharedMemoryRegisterRequest, context: Any
    ) -> pb.CudaSharedMemoryRegisterResponse:
        await self.cuda_shm.register_everywhere(
            request.name, request.raw_handle, request.device_id, request.byte_size
        )
        return pb.CudaSharedMemoryRegisterResponse()

    async def CudaSharedMemoryUnregister(
        self, request: pb.CudaSharedMemoryUnregisterRequest, context: Any
    ) -> pb.CudaSharedMemoryUnregisterResponse:
        await self.cuda_shm.unregister_everywhere(request.name)
        return pb.CudaSharedMemoryUnregisterResponse()

    # -- trace and logging ----------------------------------------------------------------------------
    async def TraceSetting(self, request: pb.TraceSettingRequest, context: Any) -> pb.TraceSettingResponse:
        return _trace.trace_setting(self.core, self.tracing, request)

    async def LogSettings(self, request: pb.LogSettingsRequest, context: Any) -> pb.LogSettingsResponse:
        return log_settings(self.logs, request)

    # -- inference -------------------------------------------------------------------------------
    async def ModelInfer(self, request: Any, context: Context) -> bytes:
        """ModelInfer as a coroutine (the transports use ``model_infer`` / ``model_infer_async``)."""
        return await self.model_infer_async(request.SerializeToString(), context.invocation_metadata())

    async def ModelStreamInfer(self, request_iterator: AsyncIterator[bytes], context: Context) -> None:
        """Bidirectional: a decoupled model's responses as they come, every other request's answer in
        the order the requests arrived (as the reference's stream handler writes them); errors never
        end the stream, unless the client sent the ``triton_grpc_error: true`` header: then the first
        error ends it with its status, as the reference does."""
        out: asyncio.Queue[Out] = asyncio.Queue()
        pending: set[ResponseStream] = set()
        waiting = Waiting(self.unsent)  # the stream's own answers not written yet (the budget's)
        order = InOrder(out.put_nowait, waiting)
        reading = True
        room = asyncio.Event()  # set while the reader may read on (flow control)
        room.set()

        def in_flight() -> int:  # a request waiting for its turn counts twice: a bound, not a count
            return len(pending) + len(order) + out.qsize()

        def finish_if_idle() -> None:
            if in_flight() < STREAM_IN_FLIGHT:
                room.set()
            if not reading and not pending:
                out.put_nowait(None)

        async def read() -> None:
            nonlocal reading
            try:
                async for data in request_iterator:
                    try:
                        call = InferCall.read(self, data, context.invocation_metadata())
                    except DecodeError:
                        break  # as the reference: the stream ends (OK) after what it answered
                    self._stream_one(call, context, out, order, pending, finish_if_idle)
                    if in_flight() >= STREAM_IN_FLIGHT:
                        room.clear()
                        await room.wait()
            finally:
                reading = False
                finish_if_idle()

        reader = asyncio.get_running_loop().create_task(read())
        try:
            while True:
                item = await out.get()
                if item is None:
                    break
                if isinstance(item, InferdError):
                    raise item  # triton_grpc_error: the stream ends with the error's status
                if isinstance(item, tuple):  # a decoupled model's answer: taken once written
                    await context.write(item[0])
                    item[1].release(item[2])
                else:
                    await context.write(item)
                    waiting.add(-len(item))
                if not room.is_set() and in_flight() < STREAM_IN_FLIGHT:
                    room.set()
            await reader
        finally:
            reader.cancel()
            for s in pending:
                s.cancel("the client closed the stream")
            while not out.empty():  # decoupled answers never written: taken, so their windows let go
                item = out.get_nowait()
                if isinstance(item, tuple):
                    item[1].release(item[2])
            waiting.clear()

    def _stream_one(
        self,
        call: InferCall,
        context: Context,
        out: asyncio.Queue[Out],
        order: InOrder,
        pending: set[ResponseStream],
        finish_if_idle: Callable[[], None],
    ) -> None:
        metadata = call.metadata
        if self.tracing.on:
            call.at = time.monotonic_ns()
        grpc_error = any(k == "triton_grpc_error" and v == "true" for k, v in metadata or ())
        slot = order.take()  # its place in the answers, unless its model turns out decoupled
        try:
            stream = self.core.submit(call.model_name, parse_version(call.model_version), call.decode)
        except InferdError as e:
            order.fill(slot, e if grpc_error else stream_error(e.message, call.rid))
            if call.trace is not None:
                call.trace.finish()
            return
        if call.decoupled:
            order.give_back(slot)
        pending.add(stream)
        encode = self.encoder.encode
        assert call.request is not None
        req = call.request
        targets = output_targets(req)
        decoupled = call.decoupled

        def put(item: bytes | InferdError) -> None:
            if not decoupled:
                order.fill(slot, item)
            else:  # an answer is taken from the model's stream once written (flow control)
                out.put_nowait((item, stream, stream.defer()) if isinstance(item, bytes) else item)

        def on_response(r: InferResponse | None, final: bool) -> None:
            if r is not None:
                flag = FINAL_TRUE if final or not decoupled else FINAL_FALSE
                if r.error is not None:
                    put(r.error if grpc_error else stream_error(r.error.message, req.id, r.model_name, flag))
                else:
                    try:
                        body = stream_response(encode(r, flag, targets))
                    except InferdError as e:
                        body = stream_error(e.message, req.id, r.model_name, flag)
                    why = None if decoupled else order.waiting.refusal(len(body))  # over the budget
                    put(body if why is None else stream_error(why, req.id, r.model_name, flag))
            elif final and decoupled and call.empty_final:
                body = stream_response(encode(InferResponse(req.model_name, "", req.id), FINAL_TRUE))
                order.waiting.add(len(body))
                out.put_nowait(body)
            if final:
                pending.discard(stream)
                finish_if_idle()

        callback = on_response if call.trace is None else _trace.traced(call.trace, on_response)
        if self.request_log.on:  # --log-verbose 1: a line once answered
            callback = logged_stream_request(call.model_name, call.model_version, call.rid, callback)
        stream.set_callback(callback)


def _parameter_value(p: pb.ModelRepositoryParameter) -> bool | int | str | bytes | None:
    """A ModelRepositoryParameter's value (bool, int, str or bytes)."""
    which = p.WhichOneof("parameter_choice")
    return None if which is None else getattr(p, which)
