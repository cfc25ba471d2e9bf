"""One Serve replica: inferd's core in process, Triton's HTTP and gRPC APIs over Serve's proxies.

The replica runs an ``inferd.Server`` (api.py: the core on a loop thread of its own, no port) and
hands each request to the same transport-free front ends ``inferd serve`` mounts (``HttpApp``,
``InferenceServicer``, built by ``Runtime``): Serve's HTTP proxy calls ``__call__`` with the
request, its gRPC proxy calls the method named as the RPC with the request message (Triton's
GRPCInferenceService is registered with the proxy as a user servicer). Answers cross back to
Serve's loop by ``call_soon_threadsafe``. Statistics and ``GET /metrics`` are the whole
application's: the replica collects every replica's through the ``StatsCollector`` actor and
answers their sum (``aggregate.py``), encoded by the same front ends.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import logging
import uuid
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any, cast

from inferd.api import Server
from inferd.core.response import ResponseStream
from inferd.engine.facade import Core
from inferd.engine.server import ServerCore
from inferd.frontends.grpc.service import UNARY_RPCS, InferenceServicer, RpcError
from inferd.frontends.http.protocol import HttpRequest
from inferd.metrics.aggregate import HIGHEST_FAMILIES, merge_metrics, merge_statistics
from inferd.metrics.collector import render
from inferd.options import ServerOptions
from inferd.rayserve import collector as _collector

log = logging.getLogger("inferd.rayserve")

#: the merged statistics a request reads (set around one HTTP or gRPC statistics call)
_MERGED: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("inferd_merged", default=None)
_METRICS_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: how a replica's health check failure begins (deploy.py prints the reason Serve recorded)
NOT_READY = "inferd replica not ready"
#: why a replica whose repository lists nothing is not ready
NO_MODELS = "its model repository lists no models (empty, or read while it was being uploaded)"


class _Raw:
    """An encoded message: what Serve's replica asks of a gRPC answer is ``SerializeToString()``."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data

    def SerializeToString(self) -> bytes:
        return self.data


class _ApplicationCore:
    """The replica's core, except that statistics are the application's when a request carries
    the merged document (``_MERGED``); everything else is the replica's own core."""

    def __init__(self, core: Core) -> None:
        self._core = core

    def __getattr__(self, name: str) -> Any:
        return getattr(self._core, name)

    def statistics(self, name: str = "", version: str = "") -> dict[str, Any]:
        merged = _MERGED.get()
        if merged is None:
            return self._core.statistics(name, version)
        local = self._core.statistics(name, version)  # the replica's own errors, texts and filter
        found = {(s["name"], s["version"]): s for s in merged["model_stats"]}
        return {"model_stats": [found.get((s["name"], s["version"]), s) for s in local["model_stats"]]}

    async def gather_statistics(self, name: str = "", version: str = "") -> dict[str, Any]:
        return self.statistics(name, version)


class _Answer:
    """A ``Responder`` whose answer goes to Serve's loop: one whole response or a chunked one (not a
    subclass of the connection's ``HttpResponder``: a compiled class takes no interpreted one)."""

    __slots__ = ("_cancelled", "_done", "_ended", "_queue", "_serve_loop", "keep_alive", "on_close")

    def __init__(self, serve_loop: asyncio.AbstractEventLoop) -> None:
        self._serve_loop = serve_loop
        self._queue: asyncio.Queue[tuple[Any, ...]] = asyncio.Queue()
        self._done = False
        self._ended = False
        self._cancelled = False
        self.keep_alive = True
        self.on_close: Callable[[], None] | None = None

    def _put(self, item: tuple[Any, ...]) -> None:
        self._serve_loop.call_soon_threadsafe(self._queue.put_nowait, item)

    def send(
        self,
        status: int,
        body: bytes | list[bytes | memoryview],
        content_type: str = "application/json",
        extra_headers: list[tuple[str, str]] | bytes | None = None,
    ) -> None:
        if self._done:
            return
        self._done = True
        data = body if isinstance(body, bytes) else b"".join(body)
        self._put(("whole", status, data, content_type, _header_pairs(extra_headers)))

    def start_chunked(
        self, status: int, content_type: str, extra_headers: list[tuple[str, str]] | bytes | None = None
    ) -> None:
        if self._done:
            return
        self._done = True
        self._put(("start", status, b"", content_type, _header_pairs(extra_headers)))

    def write_chunk(self, data: bytes) -> None:
        if not self._ended and data:
            self._put(("chunk", bytes(data)))

    def end_chunked(self) -> None:
        if not self._ended:
            self._ended = True
            self._put(("end",))

    @property
    def closed(self) -> bool:
        return self._cancelled

    @property
    def must_wait(self) -> bool:
        return False

    async def drain(self) -> None:
        return None

    def client_gone(self) -> None:
        """Serve dropped the request (its client went away): tell the app (inferd loop)."""
        self._cancelled = True
        if self.on_close is not None and not self._ended:
            self.on_close()

    async def next(self) -> tuple[Any, ...]:
        return await self._queue.get()


def _header_pairs(extra: list[tuple[str, str]] | bytes | None) -> list[tuple[str, str]]:
    """An answer's extra headers as (name, value) pairs: the front end may hand them over encoded
    already (each ``\r\nName: value``)."""
    if not extra:
        return []
    if not isinstance(extra, bytes):
        return list(extra)
    lines = (line.partition(":") for line in extra.decode("latin-1").split("\r\n") if line)
    return [(name.strip(), value.strip()) for name, _, value in lines]


class _Context:
    """What InferenceServicer asks of a call's context: its metadata, and ``write`` for streams."""

    def __init__(self, metadata: Iterable[tuple[str, str | bytes]], write: Callable[[bytes], None]) -> None:
        self._metadata = list(metadata)
        self._write = write

    def invocation_metadata(self) -> list[tuple[str, str | bytes]]:
        return self._metadata

    async def write(self, message: bytes) -> None:
        self._write(message)


def _metadata(grpc_context: Any) -> list[tuple[str, str | bytes]]:
    if grpc_context is None:
        return []
    return list(grpc_context.invocation_metadata())


def _fail(grpc_context: Any, error: RpcError) -> _Raw:
    if grpc_context is not None:
        grpc_context.set_code(error.code)
        grpc_context.set_details(error.message)
    return _Raw(b"")


class InferdReplica:
    """The Serve deployment's class: one inferd server per replica (decorated by ``deploy.py``)."""

    def __init__(self, options: ServerOptions, app_name: str) -> None:
        fields = {
            f.name: getattr(options, f.name)
            for f in dataclasses.fields(ServerOptions)
            if f.name not in ("model_repository", "allow_http", "allow_grpc", "allow_metrics")
        }
        for port_field in ("http_port", "grpc_port", "metrics_port", "http_address", "grpc_address"):
            fields.pop(port_field, None)
        self.server = Server(list(options.model_repository), **fields).start()
        self.replica_id = uuid.uuid4().hex
        runtime = self.server.runtime
        core = cast(Core, _ApplicationCore(runtime.core))
        self.http = runtime.http_app(core)
        self.servicer: InferenceServicer = runtime.grpc_servicer(core)
        self.app_name = app_name
        self._collector: Any = None
        self._poller: asyncio.Task[None] | None = None

    # -- the application's statistics ----------------------------------------------------------
    def _stats_actor(self) -> Any:
        if self._collector is None:
            import ray

            actor = ray.remote(num_cpus=0)(_collector.StatsCollector)
            self._collector = actor.options(
                name=_collector.NAME.format(app=self.app_name),
                namespace=_collector.NAMESPACE,
                lifetime="detached",
                get_if_exists=True,
            ).remote()
        return self._collector

    def _ensure_polling(self) -> None:
        if self._poller is None or self._poller.done():
            self._poller = asyncio.get_running_loop().create_task(self._poll())

    async def _poll(self) -> None:
        """The long poll on the collector: read this replica's core when a collection asks."""
        seen = 0
        actor = self._stats_actor()
        while True:
            try:
                due = await actor.wait.remote(self.replica_id, seen)
                for generation, query in due:
                    answer = await self._on_loop(self._read, query)
                    await actor.report.remote(self.replica_id, generation, answer)
                    seen = max(seen, generation)
            except asyncio.CancelledError:
                raise
            except Exception:  # the collector restarting: poll again (get_if_exists makes a new one)
                log.warning("statistics collector unreachable; retrying", exc_info=True)
                self._collector = None
                await asyncio.sleep(1.0)
                actor = self._stats_actor()

    def _read(self, query: str) -> Any:
        core = self.server.runtime.core
        return core.statistics() if query == "statistics" else render(core).decode()

    async def _collect(self, query: str) -> list[Any]:
        self._ensure_polling()
        answers: list[Any] = await self._stats_actor().collect.remote(query)
        if not answers:  # this replica has not registered yet: its own figures
            answers = [await self._on_loop(self._read, query)]
        return answers

    async def _on_loop(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` on the inferd loop (the core is the loop's)."""

        async def call() -> Any:
            return fn(*args)

        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(call(), self.server.loop))

    # -- Serve's hooks -------------------------------------------------------------------------
    async def check_health(self) -> None:
        """Serve's health check is the server's readiness: a replica whose models did not load
        fails it. At a replica's start that fails the start, with this reason: a first deploy
        fails (deploy.py says why), and a replica started again later (its node died, it was
        killed) while its repository cannot be read is replaced by another, again and again,
        until one loads. A running replica that stops being ready is replaced the same way."""
        problem = await self._on_loop(unready, self.server.runtime.core)
        if problem is not None:
            raise RuntimeError(problem)

    def __del__(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
        if self._collector is not None:
            self._collector.leave.remote(self.replica_id)
        self.server.stop()

    # -- HTTP (Serve's HTTP proxy) -------------------------------------------------------------
    async def __call__(self, request: Any) -> Any:
        from starlette.responses import Response, StreamingResponse

        self._ensure_polling()
        body = await request.body()
        path = request.url.path
        req = HttpRequest(request.method, path, request.url.query, dict(request.headers.items()), body)
        context = contextvars.copy_context()
        if request.method == "GET":
            if path == "/metrics":
                text = merge_metrics(await self._collect("metrics"), highest=HIGHEST_FAMILIES)
                return Response(text.encode(), 200, media_type=_METRICS_TYPE)
            if path.startswith("/v2/models/") and path.endswith("/stats"):
                context.run(_MERGED.set, merge_statistics(await self._collect("statistics")))
        answer = _Answer(asyncio.get_running_loop())
        self.server.loop.call_soon_threadsafe(self.http, req, answer, context=context)
        try:
            first = await answer.next()
        except asyncio.CancelledError:
            self.server.loop.call_soon_threadsafe(answer.client_gone)
            raise
        kind, status, data, content_type, headers = first
        if kind == "whole":
            response = Response(data, status, dict(headers), media_type=content_type)
            response.headers["content-type"] = content_type
            return response

        async def chunks() -> AsyncIterator[bytes]:
            try:
                while True:
                    item = await answer.next()
                    if item[0] == "end":
                        return
                    yield item[1]
            finally:
                self.server.loop.call_soon_threadsafe(answer.client_gone)

        return StreamingResponse(chunks(), status, dict(headers), media_type=content_type)

    # -- gRPC (Serve's gRPC proxy, GRPCInferenceService as a user servicer) --------------------
    async def _unary(self, rpc: str, request: Any, grpc_context: Any) -> _Raw:
        self._ensure_polling()
        merged = None
        if rpc == "ModelStatistics":
            merged = merge_statistics(await self._collect("statistics"))
        ctx = _Context(_metadata(grpc_context), lambda _m: None)

        async def call() -> bytes:
            _MERGED.set(merged)  # before call_unary's first step reads it (nothing awaits between)
            return await self.servicer.call_unary(rpc, _encoded(request), ctx)

        try:
            data = await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(call(), self.server.loop))
        except RpcError as e:
            return _fail(grpc_context, e)
        return _Raw(data)

    async def ModelInfer(self, request: Any, grpc_context: Any = None) -> _Raw:
        serve_loop = asyncio.get_running_loop()
        done: asyncio.Future[bytes] = serve_loop.create_future()
        payload = _encoded(request)
        metadata = _metadata(grpc_context)
        streams: list[ResponseStream | None] = []

        def settle(fn: Callable[[Any], None], value: Any) -> None:
            def now() -> None:
                if not done.done():
                    fn(value)

            serve_loop.call_soon_threadsafe(now)

        def start() -> None:
            streams.append(
                self.servicer.model_infer(
                    payload,
                    metadata,
                    lambda body: settle(done.set_result, body),
                    lambda error: settle(done.set_exception, error),
                )
            )

        self.server.loop.call_soon_threadsafe(start)
        try:
            return _Raw(await done)
        except RpcError as e:
            return _fail(grpc_context, e)
        except asyncio.CancelledError:
            self.server.loop.call_soon_threadsafe(_cancel, streams)
            raise

    async def ModelStreamInfer(self, request_stream: Any, grpc_context: Any = None) -> AsyncIterator[_Raw]:
        serve_loop = asyncio.get_running_loop()
        inferd_loop = self.server.loop
        incoming: asyncio.Queue[bytes | None] = asyncio.Queue()  # used on the inferd loop only
        outgoing: asyncio.Queue[tuple[bytes | None, RpcError | None]] = asyncio.Queue()

        async def messages() -> AsyncIterator[bytes]:
            while (message := await incoming.get()) is not None:
                yield message

        async def pump() -> None:
            try:
                async for message in request_stream:
                    inferd_loop.call_soon_threadsafe(incoming.put_nowait, _encoded(message))
            finally:
                inferd_loop.call_soon_threadsafe(incoming.put_nowait, None)

        def write(message: bytes) -> None:
            serve_loop.call_soon_threadsafe(outgoing.put_nowait, (bytes(message), None))

        ctx = _Context(_metadata(grpc_context), write)

        async def run() -> None:
            error = await self.servicer.stream_infer(messages(), ctx)
            serve_loop.call_soon_threadsafe(outgoing.put_nowait, (None, error))

        feeding = serve_loop.create_task(pump())
        running = asyncio.run_coroutine_threadsafe(run(), inferd_loop)
        try:
            while True:
                data, error = await outgoing.get()
                if data is None:
                    if error is not None:
                        _fail(grpc_context, error)
                    return
                yield _Raw(data)
        finally:
            feeding.cancel()
            running.cancel()


def unready(core: ServerCore) -> str | None:
    """Why a replica's server is not ready to serve (None: it is): its core is not live, it is not
    ready (a model that failed to load, under --strict-readiness), nothing loaded and something
    failed (a repository that cannot be read, every model broken) whatever the readiness flag, or
    its repository lists no model at all: an empty store, or one read in the middle of an upload
    (S3 coming back), which would make a healthy replica that answers every request 400."""
    if not core.live():
        return f"{NOT_READY}: its core is not live"
    failures = core.load_failures()
    if core.ready() and not (failures and not core.repository_index(ready_only=True)):
        return None if core.repository_index() else f"{NOT_READY}: {NO_MODELS}"
    reasons = "; ".join(
        f"'{name}'{f' version {version}' if version else ''}: {reason}" for name, version, reason in failures
    )
    return f"{NOT_READY}: {reasons or 'the server is not ready'}"


def _encoded(message: Any) -> bytes:
    """A request as the proxy hands it over: its bytes (``grpc_service.py``), or a message."""
    return message if isinstance(message, bytes) else bytes(message.SerializeToString())


def _cancel(streams: list[ResponseStream | None]) -> None:
    for stream in streams:
        if stream is not None:
            stream.cancel("the client went away")


def _unary_method(rpc: str) -> Callable[..., Any]:
    async def method(self: InferdReplica, request: Any, grpc_context: Any = None) -> _Raw:
        return await self._unary(rpc, request, grpc_context)

    method.__name__ = rpc
    method.__qualname__ = f"InferdReplica.{rpc}"
    method.__doc__ = f"GRPCInferenceService/{rpc}"
    return method


for _rpc in UNARY_RPCS:
    if _rpc != "ModelInfer":
        setattr(InferdReplica, _rpc, _unary_method(_rpc))

__all__ = ["NOT_READY", "NO_MODELS", "InferdReplica", "unready"]
