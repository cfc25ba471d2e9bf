"""HTTP/2 server connections as an ``asyncio.Protocol``: frames in, frames out, on the loop thread.

The transport half of the lean gRPC server (``h2server.py`` is the gRPC half, ``h2wire.py`` the
wire pieces). ``H2Connection`` parses frames in ``data_received`` (the client preface, SETTINGS,
HEADERS + CONTINUATION with HPACK decoding, DATA with padding, WINDOW_UPDATE, PING, RST_STREAM,
GOAWAY), keeps both directions' flow-control windows, and queues what it writes so that one loop
iteration's frames on a connection go out in one system call. A subclass opens streams and
receives their data through four hooks. The class is compiled by mypyc (``hotpath.MODULES``).

``H2Limits`` bound what one client can make the connection hold: concurrent streams (advertised in
SETTINGS, the ones over refused with REFUSED_STREAM), the size of a header block, compressed and
decoded (ENHANCE_YOUR_CALM past it), a preface that does not come, and a peer that stops answering
the keepalive PINGs the server sends. How a connection ends (``sweep``'s timeouts, connection
errors, the graceful GOAWAY and close) is ``h2life.H2Lifetime``, a mixin of ``H2Connection``.

Flow control both ways. Out: DATA never passes the client's windows, and while the transport holds
more than its high-water mark (a client that does not read) no DATA is written and nothing is read
(``frontends/flow.py``). What waits for a window, in the streams' queues, and what the transport
holds past its mark count in the process's ``UnsentBudget``; over it, a connection opening a stream
with anything unsent pauses too (``holding`` tells a subclass whether it holds any), and a stream's
queue is given back the moment the stream is reset or the connection lost. In: a stream may send
``STREAM_WINDOW`` bytes ahead of what the server acknowledged; a subclass that stops taking a
stream's data holds its acknowledgements (``hold_acks``) and gives them with ``ack`` once it took them.
"""

from __future__ import annotations

import abc
import asyncio
import logging
import struct
import time
from typing import Any, Final, Generic, TypeVar

from inferd.core.unsent import UnsentBudget
from inferd.frontends.flow import Unsent
from inferd.frontends.grpc.h2life import H2Lifetime
from inferd.frontends.grpc.h2wire import (
    ACK,
    COMPRESSION_ERROR,
    CONTINUATION,
    DATA,
    END_HEADERS,
    END_STREAM,
    FLOW_CONTROL_ERROR,
    FRAME_HEADER,
    FRAME_SIZE_ERROR,
    GOAWAY,
    HEADERS,
    MAX_WINDOW,
    NO_ERROR,
    PADDED,
    PING,
    PREFACE,
    PRIORITY_FLAG,
    PROTOCOL_ERROR,
    PUSH_PROMISE,
    RECV_MAX_FRAME,
    REFUSED_STREAM,
    RST_STREAM,
    S_ENABLE_PUSH,
    S_INITIAL_WINDOW,
    S_MAX_CONCURRENT,
    S_MAX_FRAME,
    S_MAX_HEADER_LIST,
    SETTINGS,
    WINDOW_UPDATE,
    HeaderBlocks,
    frame,
)
from inferd.frontends.grpc.h2wire import ENHANCE_YOUR_CALM as ENHANCE_YOUR_CALM  # h2server's
from inferd.frontends.grpc.h2wire import H2Limits as H2Limits  # h2server's types, here too
from inferd.frontends.grpc.h2wire import H2Stream as H2Stream

log = logging.getLogger("inferd.grpc")

#: received bytes acknowledged with WINDOW_UPDATE once this many are outstanding (the connection's)
_ACK_AFTER: Final = 1 << 30
#: the window of a stream's request data (SETTINGS_INITIAL_WINDOW_SIZE), acknowledged by quarters
STREAM_WINDOW: Final = 1 << 24
_STREAM_ACK_AFTER: Final = STREAM_WINDOW // 4


S = TypeVar("S", bound=H2Stream)


class H2Connection(H2Lifetime, Generic[S]):
    """One client connection, an ``asyncio.Protocol`` by its methods (a compiled class takes no
    interpreted base). Subclasses implement ``open_stream``, ``started``, ``stream_data``,
    ``end_of_request`` and ``cancel_stream``."""

    def __init__(
        self,
        connections: set[Any],
        max_age: tuple[float | None, float | None] = (None, None),
        limits: H2Limits = H2Limits(),
        budget: UnsentBudget | None = None,
    ) -> None:
        self._connections = connections
        self._max_age = max_age
        self._limits = limits
        self._opened_at = time.monotonic()
        self.last_io = self._opened_at
        self._transport: asyncio.Transport | None = None
        self._buf = b""  # the start of an incomplete frame (b"": none)
        self._chunks: list[bytes] = []
        self._have = 0
        self._need = 0
        self._dead = False  # a connection error was answered with GOAWAY: ignore what follows
        self._preface = False
        self._blocks = HeaderBlocks(limits.max_header_list, self.parse_headers)
        self.streams: dict[int, S] = {}
        self._last_sid = 0
        self._headers_sid = 0  # a header block continues in CONTINUATION frames
        self._headers_flags = 0
        self._headers_block: list[bytes] = []
        self._headers_size = 0
        self._send_window = 65535
        self._peer_initial_window = 65535
        self._peer_max_frame = 16384
        self._recv_unacked = 0
        self._blocked: dict[int, S] = {}
        self._window_waiters: list[asyncio.Future[None]] = []
        self.lost = False
        self._out: list[bytes] | None = None
        #: flow control: the transport holds more than its high-water mark
        self._write_paused = False
        self._budget = budget if budget is not None else UnsentBudget(0)
        self._unsent = Unsent(self._budget)
        self._queued = 0  # bytes in the streams' queues (``outq``), waiting for a send window
        self._init_lifetime()

    # -- hooks -----------------------------------------------------------------------------------
    def parse_headers(self, headers: list[tuple[str, str]]) -> Any:
        """What ``open_stream`` takes of a request's header list: kept with a cached header block, so
        that a client's repeated calls are read once (default: the list)."""
        return headers

    @abc.abstractmethod
    def open_stream(self, sid: int, headers: Any) -> S:
        """A new stream from its request headers as ``parse_headers`` gave them (registered by the
        caller); subclasses decide."""

    def started(self, st: S) -> None:
        """The stream is registered (``remote_closed`` tells whether its request already ended)."""

    def stream_data(self, st: S, data: bytes) -> None:
        """Request data of an open stream."""

    def end_of_request(self, st: S) -> None:
        """The client half-closed the stream (END_STREAM)."""

    def cancel_stream(self, st: S) -> None:
        """The client reset the stream or the connection was lost."""

    def _open_streams(self) -> int:
        return len(self.streams)

    def _reset(self, st: S) -> None:
        st.closed = True
        self._blocked.pop(st.id, None)
        self._drop_queue(st)
        self.cancel_stream(st)

    def _drop_queue(self, st: S) -> None:
        """What ``st`` still had to send goes (and out of the budget): the stream is over."""
        q = st.outq
        st.outq = None
        if q:
            self._queued -= len(q)
            self._budget.add(-len(q))

    @property
    def holding(self) -> bool:
        """Whether answers of this connection wait for its client (past the mark, or for a window)."""
        return self._queued > 0 or self._unsent.counted > 0

    # -- connection ------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        self._connections.add(self)
        limits = self._limits
        settings = struct.pack(
            ">HIHIHIHIHI",
            S_INITIAL_WINDOW,
            STREAM_WINDOW,
            S_MAX_FRAME,
            RECV_MAX_FRAME,
            S_ENABLE_PUSH,
            0,
            S_MAX_CONCURRENT,
            limits.max_concurrent_streams,
            S_MAX_HEADER_LIST,
            limits.max_header_list,
        )
        age, grace = self._max_age
        if age is not None:  # a maximum connection age: GOAWAY, then close after the grace
            loop = asyncio.get_running_loop()
            loop.call_later(age, self.goaway)
            if grace is not None:
                loop.call_later(age + grace, self.close)
        self._write(
            frame(SETTINGS, 0, 0, settings)
            + frame(WINDOW_UPDATE, 0, 0, (MAX_WINDOW - 65535).to_bytes(4, "big"))
        )

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self._unsent.drained(None)
        self._connections.discard(self)
        for st in list(self.streams.values()):
            self._reset(st)
        self.streams.clear()
        self._wake_writers()

    def pause_writing(self) -> None:
        """The client does not take what was written: no more DATA, and nothing read, meanwhile."""
        self._write_paused = True
        transport = self._transport
        if transport is not None:
            self._unsent.count(transport)
            if not transport.is_closing():
                transport.pause_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        transport = self._transport
        self._unsent.drained(transport)
        if transport is not None and not transport.is_closing() and not self._dead:
            transport.resume_reading()
        for st in list(self._blocked.values()):
            self._flush(st)
        self._wake_writers()

    # -- frames in -------------------------------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        self.last_io = time.monotonic()
        try:
            self._received(data)
        except Exception:  # a bug or a frame we misjudged: this connection ends, the server serves on
            log.exception("HTTP/2 connection failed")
            self._error(0x2, "internal error")  # INTERNAL_ERROR

    def _received(self, data: bytes) -> None:
        if self._dead:
            return
        if self._buf:  # bytes of an incomplete frame wait until the whole frame is here
            chunks = self._chunks
            chunks.append(data)
            self._have += len(data)
            if self._have < self._need:
                return
            data = b"".join(chunks)
            chunks.clear()
            self._buf = b""
        pos = 0
        if not self._preface:
            if len(data) < 24:
                if not PREFACE.startswith(data):
                    self._error(PROTOCOL_ERROR, "bad preface")
                    return
                self._keep(data, 24)
                return
            if data[:24] != PREFACE:
                self._error(PROTOCOL_ERROR, "bad preface")
                return
            self._preface = True
            pos = 24
        size = len(data)
        unpack = FRAME_HEADER.unpack_from
        while size - pos >= 9:
            hi, lo, ftype, flags, sid = unpack(data, pos)
            length = (hi << 16) | lo
            if length > RECV_MAX_FRAME:
                self._error(FRAME_SIZE_ERROR, "frame too large")
                return
            end = pos + 9 + length
            if end > size:
                self._keep(data[pos:], end - pos)
                pos = size
                break
            payload = data[pos + 9 : end]
            pos = end
            sid &= 0x7FFFFFFF
            if self._headers_sid and ftype != CONTINUATION:
                self._error(PROTOCOL_ERROR, "expected CONTINUATION")
                return
            if ftype == DATA:
                self._on_data(flags, sid, payload)
            elif ftype == HEADERS:
                self._on_headers(flags, sid, payload)
            elif ftype == CONTINUATION:
                self._on_continuation(flags, sid, payload)
            elif ftype == WINDOW_UPDATE:
                self._on_window_update(sid, payload)
            elif ftype == SETTINGS:
                self._on_settings(flags, sid, payload)
            elif ftype == PING:
                if len(payload) != 8:
                    self._error(FRAME_SIZE_ERROR, "PING payload")
                    return
                if not flags & ACK:
                    self._write(frame(PING, ACK, 0, payload))
                else:
                    self._ping_acked(payload)
            elif ftype == RST_STREAM:
                st = self.streams.pop(sid, None)
                if st is not None:
                    self._reset(st)
            elif ftype == GOAWAY:
                pass  # the client opens no more streams; the ones open finish
            elif ftype == PUSH_PROMISE:
                self._error(PROTOCOL_ERROR, "PUSH_PROMISE from a client")
                return
            # PRIORITY and unknown frame types are ignored
            if self._dead or self.lost:
                return
        if pos < size:
            self._keep(data[pos:], 9)
        if self._recv_unacked >= _ACK_AFTER:
            self._write(frame(WINDOW_UPDATE, 0, 0, self._recv_unacked.to_bytes(4, "big")))
            self._recv_unacked = 0

    def _keep(self, rest: bytes, need: int) -> None:
        """Hold ``rest`` (the start of a frame) until ``need`` bytes are here."""
        self._buf = rest
        self._chunks = [rest]
        self._have = len(rest)
        self._need = need

    def _on_data(self, flags: int, sid: int, payload: bytes) -> None:
        size = len(payload)  # what flow control counts: padding included
        self._recv_unacked += size
        if flags & PADDED:
            if not payload or payload[0] >= len(payload):
                self._error(PROTOCOL_ERROR, "bad padding")
                return
            payload = payload[1 : len(payload) - payload[0]]
        st = self.streams.get(sid)
        if st is None or st.remote_closed:
            if sid > self._last_sid or sid == 0:
                self._error(PROTOCOL_ERROR, "DATA on an idle stream")
            return  # a stream we reset or answered already
        st.recv_unacked += size
        if st.recv_unacked >= _STREAM_ACK_AFTER and not st.hold_acks:
            self.ack(st)
        self.stream_data(st, payload)
        if flags & END_STREAM and not st.remote_closed:
            st.remote_closed = True
            self.end_of_request(st)

    def ack(self, st: S) -> None:
        """Give the client back the window of the stream data received (a WINDOW_UPDATE)."""
        if st.recv_unacked and not st.remote_closed:
            self._write(frame(WINDOW_UPDATE, 0, st.id, st.recv_unacked.to_bytes(4, "big")))
        st.recv_unacked = 0

    def _on_headers(self, flags: int, sid: int, payload: bytes) -> None:
        if sid == 0:
            self._error(PROTOCOL_ERROR, "HEADERS on stream 0")
            return
        start, end = 0, len(payload)
        if flags & PADDED:
            if not payload:
                self._error(PROTOCOL_ERROR, "bad padding")
                return
            start, end = 1, end - payload[0]
        if flags & PRIORITY_FLAG:
            start += 5
        if start > end:
            self._error(PROTOCOL_ERROR, "bad padding")
            return
        block = payload[start:end]
        if len(block) > self._limits.max_header_list:
            self._error(ENHANCE_YOUR_CALM, "header block too large")
            return
        if flags & END_HEADERS:
            self._header_block(flags, sid, block)
        else:
            self._headers_sid, self._headers_flags = sid, flags
            self._headers_block, self._headers_size = [block], len(block)

    def _on_continuation(self, flags: int, sid: int, payload: bytes) -> None:
        if sid != self._headers_sid:
            self._error(PROTOCOL_ERROR, "unexpected CONTINUATION")
            return
        self._headers_size += len(payload)
        if self._headers_size > self._limits.max_header_list:  # never buffered past the limit
            self._error(ENHANCE_YOUR_CALM, "header block too large")
            return
        self._headers_block.append(payload)
        if flags & END_HEADERS:
            block, hflags = b"".join(self._headers_block), self._headers_flags
            self._headers_sid, self._headers_block, self._headers_size = 0, [], 0
            self._header_block(hflags, sid, block)

    def _header_block(self, flags: int, sid: int, block: bytes) -> None:
        headers = self._blocks.decode(block)  # (None: not HPACK)
        if headers is None:
            self._error(COMPRESSION_ERROR, "header block")
            return
        st = self.streams.get(sid)
        if st is not None or sid <= self._last_sid:  # trailers of a request (gRPC clients send none)
            if st is not None and flags & END_STREAM and not st.remote_closed:
                st.remote_closed = True
                self.end_of_request(st)
            return
        if sid % 2 == 0:
            self._error(PROTOCOL_ERROR, "even stream id")
            return
        self._last_sid = sid
        if self.going_away or len(self.streams) >= self._limits.max_concurrent_streams:
            self._write(frame(RST_STREAM, 0, sid, REFUSED_STREAM.to_bytes(4, "big")))
            return
        if self._budget.over and self._transport is not None:  # the process's bound: pause if owing
            self._unsent.tighten(self._transport)
        st = self.open_stream(sid, headers)
        self.streams[sid] = st
        if flags & END_STREAM:
            st.remote_closed = True
        self.started(st)
        if flags & END_STREAM and not st.closed:
            self.end_of_request(st)

    def _on_window_update(self, sid: int, payload: bytes) -> None:
        if len(payload) != 4:
            self._error(FRAME_SIZE_ERROR, "WINDOW_UPDATE payload")
            return
        inc = int.from_bytes(payload, "big") & 0x7FFFFFFF
        if sid == 0:
            self._send_window += inc
            if self._send_window > MAX_WINDOW:
                self._error(FLOW_CONTROL_ERROR, "window overflow")
                return
            if self._blocked:
                for st in list(self._blocked.values()):
                    self._flush(st)
        else:
            stream = self.streams.get(sid)
            if stream is not None:
                stream.send_window += inc
                self._flush(stream)
        if self._window_waiters:  # (a stream's writer waits for window: ModelStreamInfer)
            self._wake_writers()

    def _on_settings(self, flags: int, sid: int, payload: bytes) -> None:
        if flags & ACK:
            return
        if sid != 0 or len(payload) % 6:
            self._error(PROTOCOL_ERROR if sid else FRAME_SIZE_ERROR, "SETTINGS")
            return
        for i in range(0, len(payload), 6):
            key, value = struct.unpack_from(">HI", payload, i)
            if key == S_INITIAL_WINDOW:
                if value > MAX_WINDOW:
                    self._error(FLOW_CONTROL_ERROR, "initial window")
                    return
                delta = value - self._peer_initial_window
                self._peer_initial_window = value
                for st in self.streams.values():
                    st.send_window += delta
            elif key == S_MAX_FRAME:
                if not 16384 <= value <= 2**24 - 1:
                    self._error(PROTOCOL_ERROR, "max frame size")
                    return
                self._peer_max_frame = value
        self._write(frame(SETTINGS, ACK, 0))
        for st in list(self._blocked.values()):
            self._flush(st)
        self._wake_writers()

    # -- frames out ------------------------------------------------------------------------------
    def _write(self, data: bytes) -> None:
        """Queue ``data``; everything queued in one loop iteration goes out in one system call
        (a batch's responses on one connection, acks written while parsing)."""
        if self._transport is None or self.lost:
            return
        out = self._out
        if out is None:
            self._out = [data]
            asyncio.get_running_loop().call_soon(self._flush_out)
        else:
            out.append(data)

    def _flush_out(self) -> None:
        out, self._out = self._out, None
        transport = self._transport
        if out and transport is not None and not self.lost:
            transport.write(out[0] if len(out) == 1 else b"".join(out))
            if self._write_paused:
                self._unsent.count(transport)

    def send_headers(self, st: S, block: bytes) -> None:
        """A header block that does not end the stream."""
        st.headers_sent = True
        self._write(frame(HEADERS, END_HEADERS, st.id, block))

    def send_data(self, st: S, data: bytes) -> None:
        """Stream data, sent as the windows allow (the rest waits for WINDOW_UPDATE)."""
        if st.closed:
            return
        if st.outq is None:
            st.outq = bytearray(data)
        else:
            st.outq += data
        self._flush(st, len(data))

    def end_stream(self, st: S, trailer: bytes) -> None:
        """End the stream with the header block ``trailer`` once its queued data went out."""
        st.trailer = trailer
        self._flush(st)

    def _flush(self, st: S, added: int = 0) -> None:
        """Send what the windows let out of ``st``'s queue (``added``: bytes just queued, not counted yet)."""
        if st.closed:
            return
        out = []
        q = st.outq
        sent = 0
        while q and not self._write_paused:
            n = min(len(q), self._send_window, st.send_window, self._peer_max_frame)
            if n <= 0:
                break
            out.append(frame(DATA, 0, st.id, bytes(q[:n])))
            del q[:n]
            sent += n
            self._send_window -= n
            st.send_window -= n
        if added != sent:  # what waits in the queue changed: the budget follows
            self._queued += added - sent
            self._budget.add(added - sent)
        done = not q and st.trailer is not None
        if done:
            assert st.trailer is not None
            out.append(frame(HEADERS, END_HEADERS | END_STREAM, st.id, st.trailer))
        if out:
            self._write(b"".join(out))
        if done:
            self._closed(st)
        elif q:
            self._blocked[st.id] = st
        else:
            self._blocked.pop(st.id, None)

    def _closed(self, st: S) -> None:
        """We sent END_STREAM: the call is over (a client still sending is answered RST_STREAM)."""
        st.closed = True
        self._blocked.pop(st.id, None)
        if self.streams.pop(st.id, None) is not None and not st.remote_closed:
            self._write(frame(RST_STREAM, 0, st.id, NO_ERROR.to_bytes(4, "big")))
        if self.going_away and not self.streams:
            self._finish()

    async def wait_window(self) -> None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._window_waiters.append(fut)
        await fut

    def _wake_writers(self) -> None:
        waiters, self._window_waiters = self._window_waiters, []
        for f in waiters:
            if not f.done():
                f.set_result(None)
