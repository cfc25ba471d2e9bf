"""A lean gRPC server: GRPCInferenceService over HTTP/2 framed on the server's own (uv)loop.

grpc.aio crosses grpc's event-engine and poller threads and the asyncio loop on every call (about 45
system calls and 16 futex wake-ups per unary RPC). Here ``h2conn.H2Connection`` parses frames in
``data_received`` and writes each loop iteration's frames in one system call; this module is the
gRPC half: calls by ``:path``, length-prefixed messages (gzip/deflate accepted), answers with fixed
header blocks and trailers (``grpc-status``, percent-encoded ``grpc-message``), serving the same
``InferenceServicer`` as the grpc.aio server through its entry points: ``model_infer`` answers on
the ResponseStream callback, with no task per request; ``call_unary`` and ``stream_infer`` run as
tasks; ``health_check``. TLS is served here too (ALPN ``h2``); compressed responses stay on grpc.aio
(``make_grpc_server`` picks). Limits and timeouts: see ``h2conn.H2Limits`` and ``_Handlers``. Over
the process's ``UnsentBudget`` (``frontends/flow.py``), a connection that holds answers its client has
not read gets UNAVAILABLE for a new ModelInfer or ModelStreamInfer call (not run) and for a unary
answer larger than that (not kept); past twice the budget, every connection does for such an answer.
"""

from __future__ import annotations

import asyncio
import logging
import time
import zlib
from functools import partial
from typing import Any, Final, cast

import grpc

from inferd.core.response import ResponseStream
from inferd.core.unsent import UnsentBudget
from inferd.frontends.address import bind_host
from inferd.frontends.flow import SMALL_ANSWER
from inferd.frontends.grpc.h2conn import ENHANCE_YOUR_CALM, H2Connection, H2Limits, H2Stream
from inferd.frontends.grpc.h2wire import (
    END_HEADERS,
    END_STREAM,
    HEADERS,
    RESPONSE_HEADERS,
    TRAILERS_OK,
    frame,
    length_prefixed,
    status_block,
)
from inferd.frontends.grpc.inbox import INBOX_HIGH, inbox_messages
from inferd.frontends.grpc.service import (
    HEALTH_SERVICE,
    SERVICE,
    UNARY_RPCS,
    InferenceServicer,
    RpcError,
)
from inferd.frontends.inflate import OFF_LOOP_MIN, WBITS, TooLarge, inflate
from inferd.frontends.sweep import sweep_forever
from inferd.frontends.tls import server_context
from inferd.logs import VERBOSE1

log = logging.getLogger("inferd.grpc")

#: a stream's writer waits (ModelStreamInfer) while this much is queued behind flow control
_HIGH_WATER: Final = 1 << 20
_OK: Final = 0
_CODES = {code: code.value[0] for code in grpc.StatusCode}
_INTERNAL: Final = _CODES[grpc.StatusCode.INTERNAL]
_UNIMPLEMENTED: Final = _CODES[grpc.StatusCode.UNIMPLEMENTED]
_RESOURCE_EXHAUSTED: Final = _CODES[grpc.StatusCode.RESOURCE_EXHAUSTED]
_DEADLINE_EXCEEDED: Final = _CODES[grpc.StatusCode.DEADLINE_EXCEEDED]
_UNAVAILABLE: Final = _CODES[grpc.StatusCode.UNAVAILABLE]
#: a unary answer's HEADERS and trailers frame headers, up to the stream id
_HEADERS_FRAME: Final = frame(HEADERS, END_HEADERS, 0, RESPONSE_HEADERS)[:5]
_TRAILERS_FRAME: Final = frame(HEADERS, END_HEADERS | END_STREAM, 0, TRAILERS_OK)[:5]
#: grpc-timeout units (gRPC over HTTP/2) in seconds
_TIMEOUT_UNITS = {"H": 3600.0, "M": 60.0, "S": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}


def parse_timeout(value: str) -> float | None:
    """A ``grpc-timeout`` header in seconds (None when malformed: the call then has no deadline)."""
    unit = _TIMEOUT_UNITS.get(value[-1:])
    digits = value[:-1]
    if unit is None or not digits.isdigit() or len(digits) > 8:
        return None
    return int(digits) * unit


class _Failure(Exception):
    """Answer the call with this status."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def inflate_message(data: bytes, encoding: str, limit: int) -> bytes:
    """A compressed message (``grpc-encoding``), within ``limit`` bytes once inflated."""
    if encoding not in WBITS:
        raise _Failure(_UNIMPLEMENTED, f"Compression algorithm '{encoding}' is not supported")
    try:
        return inflate(data, encoding, limit)[0]
    except zlib.error as e:
        raise _Failure(_INTERNAL, f"Failed to decompress the message: {e}") from e
    except TooLarge:
        raise _Failure(
            _RESOURCE_EXHAUSTED, f"Received message larger than max (decompressed: over {limit} bytes)"
        ) from None


class _Context:
    """The servicer's ``Context`` on a lean call."""

    __slots__ = ("_metadata", "_stream")

    def __init__(self, stream: _Call, metadata: tuple[tuple[str, str], ...]) -> None:
        self._stream = stream
        self._metadata = metadata

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self._metadata

    async def write(self, message: bytes) -> None:
        st = self._stream
        st.conn.send_message(st, message)
        while len(st.outq or b"") > _HIGH_WATER and not st.closed:
            await st.conn.wait_window()


#: what a call's request headers say: ``:path``, grpc-encoding, grpc-timeout (seconds), the metadata
_Head = tuple[str, str, float | None, tuple[tuple[str, str], ...]]
#: request headers that are not the call's metadata
_NOT_METADATA: Final = frozenset(("content-type", "te", "grpc-timeout", "grpc-accept-encoding", "user-agent"))


class _Call(H2Stream):
    """One HTTP/2 stream: a gRPC call."""

    __slots__ = (
        "answered",
        "body",
        "encoding",
        "inbox",
        "inbox_bytes",
        "metadata",
        "path",
        "pending",
        "received",
        "response",
        "task",
        "timeout",
        "timer",
    )

    def __init__(self, conn: GrpcConnection, sid: int, head: _Head, send_window: int) -> None:
        # H2Stream's fields written out here (one call less per call)
        self.conn = conn
        self.id = sid
        self.send_window = send_window
        self.recv_unacked = 0
        self.hold_acks = False
        self.outq: bytearray | None = None
        self.trailer: bytes | None = None
        self.headers_sent = False
        self.closed = False
        self.remote_closed = False
        self.path, self.encoding, self.timeout, self.metadata = head  # timeout: grpc-timeout, seconds
        self.body: list[bytes] = []
        self.answered = False
        self.task: asyncio.Task[None] | None = None
        self.response: ResponseStream | None = None
        #: ModelStreamInfer: messages as they arrive (None: the client half-closed)
        self.inbox: asyncio.Queue[bytes | None] | None = None
        self.inbox_bytes = 0  # bytes of the messages in ``inbox``
        self.pending: bytearray | None = None  # bytes of a message not complete yet (streams)
        self.received = 0  # bytes of the request buffered (unary)
        self.timer: asyncio.TimerHandle | None = None


class _Handlers:
    """The method table: ``:path`` -> what answers it, over one servicer."""

    def __init__(self, servicer: InferenceServicer, budget: UnsentBudget | None = None) -> None:
        self.servicer = servicer
        #: ``:path`` -> the RPC's name, for every unary RPC but ModelInfer
        self.unary: dict[str, str] = {
            f"/{SERVICE}/{name}": name for name in UNARY_RPCS if name != "ModelInfer"
        }
        self.model_infer = f"/{SERVICE}/ModelInfer"
        self.stream_infer = f"/{SERVICE}/ModelStreamInfer"
        self.health_check = f"/{HEALTH_SERVICE}/Check"
        config = servicer.config
        #: whether the server logs each call (the servicer's switch)
        self.request_log = servicer.request_log
        self.max_message = config.max_message_size
        self.limits = H2Limits(
            max_concurrent_streams=config.max_concurrent_streams,
            max_header_list=config.max_header_list_size,
            preface_timeout_s=config.preface_timeout_s,
            keepalive_time_s=config.keepalive_time_ms / 1000,
            keepalive_timeout_s=config.keepalive_timeout_ms / 1000,
        )
        self.max_connections = config.max_connections
        #: the process's bound on unsent answers, shared with the other front ends (``frontends/flow.py``;
        #: None: one of this server's own, without a limit)
        self.budget = budget if budget is not None else UnsentBudget(0)
        age = config.max_connection_age_ms
        grace = config.max_connection_age_grace_ms
        #: seconds: connection age before GOAWAY, and the grace after it
        self.max_age = (
            None if age is None else age / 1000,
            None if grace is None else grace / 1000,
        )


class GrpcConnection(H2Connection[_Call]):
    """One client connection: gRPC calls over ``H2Connection``'s streams."""

    def __init__(self, handlers: _Handlers, connections: set[GrpcConnection]) -> None:
        super().__init__(connections, handlers.max_age, handlers.limits, handlers.budget)
        self._h = handlers

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        over = len(self._connections) >= self._h.max_connections
        super().connection_made(transport)
        if over:
            self._error(ENHANCE_YOUR_CALM, "the server has too many connections")

    # -- streams ---------------------------------------------------------------------------------
    def parse_headers(self, headers: list[tuple[str, str]]) -> _Head:
        """(``:path``, grpc-encoding, grpc-timeout, metadata): once per header block a client repeats."""
        path = ""
        encoding = ""
        timeout = None
        metadata = []
        for name, value in headers:
            if name[0] == ":":
                if name == ":path":
                    path = value
            elif name == "grpc-encoding":
                encoding = value
            elif name == "grpc-timeout":
                timeout = parse_timeout(value)
            elif name not in _NOT_METADATA:
                metadata.append((name, value))
        return path, encoding, timeout, tuple(metadata)

    def open_stream(self, sid: int, headers: _Head) -> _Call:
        return _Call(self, sid, headers, self._peer_initial_window)

    def started(self, st: _Call) -> None:
        h = self._h
        if self._budget.over and self.holding and (st.path == h.model_infer or st.path == h.stream_infer):
            self.finish(st, _UNAVAILABLE, self._budget.refusal("the request was not run"))
            return
        if st.timeout is not None:
            st.timer = asyncio.get_running_loop().call_later(st.timeout, self._deadline, st)
        if st.path == h.stream_infer:
            st.inbox = asyncio.Queue()
            st.pending = bytearray()
            st.task = asyncio.get_running_loop().create_task(self._run_stream(st))
        elif st.path not in h.unary and st.path != h.model_infer and st.path != h.health_check:
            if h.request_log.on:  # (the known methods' lines are the servicer's)
                log.log(VERBOSE1, "gRPC request: %s UNIMPLEMENTED", st.path)
            self.finish(st, _UNIMPLEMENTED, f"Method not found: {st.path}")

    def stream_data(self, st: _Call, data: bytes) -> None:
        if st.inbox is not None:
            self._feed(st, data)
        elif data and not st.answered:
            if not st.received and len(data) >= 5:  # the message's length prefix: refused before a byte more
                n = int.from_bytes(data[1:5], "big")
                if n > self._h.max_message:
                    self.finish(st, _RESOURCE_EXHAUSTED, self._too_large(n))
                    return
            st.received += len(data)
            if st.received > self._h.max_message + 5:  # never buffered past the limit
                st.body = []
                self.finish(st, _RESOURCE_EXHAUSTED, self._too_large(st.received - 5))
                return
            st.body.append(data)

    def cancel_stream(self, st: _Call) -> None:
        st.answered = True
        self._stop_timer(st)
        if st.response is not None:
            st.response.cancel("the client reset the stream")  # the model may check is_cancelled()
        self._cancel_task(st)

    def _deadline(self, st: _Call) -> None:
        """The call's grpc-timeout passed: DEADLINE_EXCEEDED, and the request is cancelled."""
        st.timer = None
        if st.closed:
            return
        if st.response is not None:
            st.response.cancel("the call's deadline passed")
        self._cancel_task(st)
        self.finish(st, _DEADLINE_EXCEEDED, "Deadline Exceeded")

    @staticmethod
    def _stop_timer(st: _Call) -> None:
        if st.timer is not None:
            st.timer.cancel()
            st.timer = None

    def _too_large(self, size: int) -> str:
        return f"Received message larger than max ({size} vs. {self._h.max_message})"

    # -- requests --------------------------------------------------------------------------------
    def _feed(self, st: _Call, payload: bytes) -> None:
        """ModelStreamInfer: complete messages into the stream's inbox."""
        buf = st.pending
        assert st.inbox is not None and buf is not None
        buf += payload
        while len(buf) >= 5:
            n = int.from_bytes(buf[1:5], "big")
            if n > self._h.max_message:  # refused before it is buffered
                buf.clear()
                self._cancel_task(st)
                self.finish(st, _RESOURCE_EXHAUSTED, self._too_large(n))
                return
            if len(buf) < 5 + n:
                break
            try:
                message = self._message(st, buf[0], bytes(buf[5 : 5 + n]))
            except _Failure as f:
                self._cancel_task(st)
                self.finish(st, f.code, f.message)
                return
            del buf[: 5 + n]
            st.inbox.put_nowait(message)
            st.inbox_bytes += len(message)
            if st.inbox_bytes > INBOX_HIGH:
                st.hold_acks = True  # the call does not read as fast as its client sends

    def _message(self, st: _Call, compressed: int, data: bytes) -> bytes:
        limit = self._h.max_message
        if len(data) > limit:
            raise _Failure(_RESOURCE_EXHAUSTED, self._too_large(len(data)))
        if not compressed:
            return data
        return inflate_message(data, st.encoding, limit)

    def end_of_request(self, st: _Call) -> None:
        if st.inbox is not None:
            if st.pending:
                self._cancel_task(st)
                self.finish(st, _INTERNAL, "Incomplete message")
                return
            st.inbox.put_nowait(None)
            return
        if st.answered:
            return
        data = b"".join(st.body)
        st.body = []
        try:
            if len(data) < 5 or len(data) != 5 + int.from_bytes(data[1:5], "big"):
                raise _Failure(_INTERNAL, "Unary RPC expects exactly one request message")
            if data[0] and len(data) - 5 > OFF_LOOP_MIN:  # a large compressed message: off the loop
                self._message(st, 0, data[5:])  # its size as sent
                st.task = asyncio.get_running_loop().create_task(self._inflate_then_dispatch(st, data))
                return
            payload = self._message(st, data[0], data[5:])
        except _Failure as f:
            self.finish(st, f.code, f.message)
            return
        self._dispatch(st, payload)

    async def _inflate_then_dispatch(self, st: _Call, data: bytes) -> None:
        """zlib lets go of the GIL: the loop serves others while a large message inflates."""
        try:
            payload = await asyncio.to_thread(inflate_message, data[5:], st.encoding, self._h.max_message)
        except _Failure as f:
            self.finish(st, f.code, f.message)
            return
        self._dispatch(st, payload)

    def _dispatch(self, st: _Call, payload: bytes) -> None:
        """A unary call's request message, decoded: to its RPC."""
        h = self._h
        if st.path == h.model_infer:
            st.response = h.servicer.model_infer(
                payload, st.metadata, partial(self.answer, st), partial(self._fail, st)
            )
        elif st.path == h.health_check:
            try:
                self.answer(st, h.servicer.health_check(payload, st.metadata))
            except RpcError as e:
                self._fail(st, e)
        else:
            st.task = asyncio.get_running_loop().create_task(self._run_unary(st, h.unary[st.path], payload))

    async def _run_unary(self, st: _Call, rpc: str, payload: bytes) -> None:
        try:
            self.answer(st, await self._h.servicer.call_unary(rpc, payload, _Context(st, st.metadata)))
        except RpcError as e:
            self._fail(st, e)

    async def _run_stream(self, st: _Call) -> None:
        inbox = st.inbox
        assert inbox is not None

        messages = inbox_messages(st, inbox, self.ack)
        error = await self._h.servicer.stream_infer(messages, _Context(st, st.metadata))
        if error is not None:
            self._fail(st, error)
        else:
            self.finish(st, _OK, "")

    def _cancel_task(self, st: _Call) -> None:
        if st.task is not None and not st.task.done() and st.task is not asyncio.current_task():
            st.task.cancel()

    # -- responses -------------------------------------------------------------------------------
    def answer(self, st: _Call, message: bytes) -> None:
        """A unary call's response message and OK (UNAVAILABLE over the budget when this connection
        holds answers already: the message is not kept)."""
        if st.answered:
            return
        budget = self._budget
        if budget.over and len(message) > SMALL_ANSWER and (budget.full or self.holding):
            self.finish(
                st, _UNAVAILABLE, budget.refusal("this answer was not kept", self.holding, len(message))
            )
            return
        st.answered = True
        if st.timer is not None:
            self._stop_timer(st)
        n = len(message) + 5  # its length prefix too
        if (
            not st.headers_sent
            and not self._write_paused
            and n <= self._send_window
            and n <= st.send_window
            and n <= self._peer_max_frame
            and not st.outq
        ):  # the common case: the whole answer in one write, the frames' fixed parts prepared
            self._send_window -= n
            st.send_window -= n
            st.headers_sent = True
            sid = st.id.to_bytes(4, "big")
            self._write(
                b"".join(
                    (
                        _HEADERS_FRAME,
                        sid,
                        RESPONSE_HEADERS,
                        n.to_bytes(3, "big"),
                        b"\x00\x00",  # DATA, no flags
                        sid,
                        b"\x00",  # the message, not compressed
                        (n - 5).to_bytes(4, "big"),
                        message,
                        _TRAILERS_FRAME,
                        sid,
                        TRAILERS_OK,
                    )
                )
            )
            self._closed(st)
            return
        self.send_message(st, message)
        self._end(st, TRAILERS_OK)

    def _fail(self, st: _Call, error: RpcError) -> None:
        if not st.answered:
            self.finish(st, error.number, error.message)

    def finish(self, st: _Call, code: int, message: str) -> None:
        """End the call with ``code``: trailers after what was sent, or a trailers-only answer."""
        if st.closed:
            return
        st.answered = True
        if st.timer is not None:
            self._stop_timer(st)
        if not st.headers_sent and not st.outq:
            st.headers_sent = True
            block = RESPONSE_HEADERS + status_block(code, message)
            self._write(frame(HEADERS, END_HEADERS | END_STREAM, st.id, block))
            self._closed(st)
            return
        self._end(st, status_block(code, message))

    def send_message(self, st: _Call, message: bytes) -> None:
        """One response message on a stream (queued behind flow control as needed)."""
        if st.closed:
            return
        if not st.headers_sent:
            self.send_headers(st, RESPONSE_HEADERS)
        self.send_data(st, length_prefixed(message))

    def _end(self, st: _Call, trailer: bytes) -> None:
        if not st.headers_sent:
            self.send_headers(st, RESPONSE_HEADERS)
        self.end_stream(st, trailer)


class LeanGrpcServer:
    """The gRPC endpoint on the running loop, without grpcio's threads."""

    def __init__(
        self, servicer: InferenceServicer, address: str, port: int, budget: UnsentBudget | None = None
    ) -> None:
        self.config = servicer.config
        self.servicer = servicer
        self.address = address
        self.port = port
        self._handlers = _Handlers(self.servicer, budget)
        self._connections: set[GrpcConnection] = set()
        #: (Any: uvloop's ``sockets`` is a list where typeshed says tuple, and compiled code checks it)
        self._server: Any = None
        self._deadline: float | None = None
        self._sweeper: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Bind and serve; ``port`` 0 picks a free one. OSError when the address cannot be bound,
        InvalidArgumentError when the TLS files cannot be used."""
        config = self.config
        tls = None
        if config.use_ssl:  # ALPN "h2": gRPC clients refuse a TLS peer that does not select it
            root = config.root_cert if config.use_ssl_mutual else None
            tls = server_context(config.server_cert, config.server_key, root, ("h2",))
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            # (a Protocol by its methods: a compiled class takes no interpreted base)
            lambda: cast(asyncio.Protocol, GrpcConnection(self._handlers, self._connections)),
            bind_host(self.address),
            self.port,
            reuse_port=config.reuse_port or None,
            backlog=1024,
            ssl=tls,
        )
        self.port = self._server.sockets[0].getsockname()[1]
        self._sweeper = loop.create_task(sweep_forever(self._connections))

    def stop_listening(self) -> None:
        """Refuse new connections; the open ones take new calls on until ``stop`` (a sequence's next
        request may come as a new call on its client's connection while the server drains)."""
        if self._server is not None:
            self._server.close()
            self._server = None

    async def stop(self, grace: float | None = None) -> None:
        """GOAWAY to every client; running calls get ``grace`` seconds (None: until they end), and
        the connections end as their clients close them (``H2Connection.goaway``)."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        self.stop_listening()
        for c in list(self._connections):
            c.goaway()
        if grace is not None:
            limit = time.monotonic() + grace
            self._deadline = limit if self._deadline is None else min(self._deadline, limit)
        while self._connections:  # each leaves the set when its socket closes
            if self._deadline is not None and time.monotonic() >= self._deadline:
                break
            await asyncio.sleep(0.02)
        for c in list(self._connections):
            c.close()


def make_grpc_server(servicer: InferenceServicer, budget: UnsentBudget | None = None) -> Any:
    """The gRPC endpoint ``--grpc-server`` names for ``servicer``; compressed responses always on grpc.aio
    (whose buffers are grpc's own: ``budget`` bounds the lean server's)."""
    config = servicer.config
    if config.server == "lean" and config.infer_response_compression_level == "none":
        return LeanGrpcServer(servicer, config.address, config.port, budget)
    from inferd.frontends.grpc.aio import GrpcServer

    return GrpcServer(servicer, config.address, config.port)
