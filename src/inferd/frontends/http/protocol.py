"""HTTP/1.1 on asyncio (uvloop) with httptools: keep-alive, pipelining, chunked bodies, 100-continue.

No web framework sits on the hot path: each connection parses with httptools and hands a
``HttpRequest`` to the app, which answers synchronously or later through ``Responder``.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httptools

log = logging.getLogger("inferd.http")

_REASONS = {
    100: "Continue",
    200: "OK",
    400: "Bad Request",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    413: "Payload Too Large",
    500: "Internal Server Error",
    501: "Not Implemented",
    503: "Service Unavailable",
}
_STATUS_LINES = {code: f"HTTP/1.1 {code} {reason}\r\n".encode() for code, reason in _REASONS.items()}
_MAX_PIPELINE = 64  # requests waiting behind the one being answered before reading pauses


@dataclass(slots=True)
class HttpRequest:
    """A parsed request: method, path, query, lower-cased headers and the whole body."""

    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes


class Responder:
    """Writes the response of one request, in order, on its connection (loop thread only)."""

    __slots__ = ("_conn", "_done", "keep_alive")

    def __init__(self, conn: HttpConnection, keep_alive: bool) -> None:
        self._conn = conn
        self._done = False
        self.keep_alive = keep_alive

    def send(
        self,
        status: int,
        body: bytes | list[bytes | memoryview],
        content_type: str = "application/json",
        extra_headers: list[tuple[str, str]] | None = None,
    ) -> None:
        if self._done:
            return
        self._done = True
        self._conn.respond(self, status, body, content_type, extra_headers)


App = Callable[[HttpRequest, Responder], Any]


class HttpConnection(asyncio.Protocol):
    """One client connection."""

    def __init__(self, app: App, connections: set[HttpConnection]) -> None:
        self._app = app
        self._connections = connections
        self._parser = httptools.HttpRequestParser(self)
        self._transport: asyncio.Transport | None = None
        self._url = b""
        self._headers: dict[str, str] = {}
        self._body: list[bytes] = []
        # answers ready before the ones ahead of them: written when their turn comes
        self._pending: dict[
            Responder, tuple[int, bytes | list[bytes | memoryview], str, list[tuple[str, str]] | None]
        ] = {}
        self._queue: collections.deque[Responder] = collections.deque()  # responses in request order
        self._paused = False
        self._closing = False
        self.active = 0

    # -- asyncio.Protocol --------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # uvloop's transports are not subclasses
        self._connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._connections.discard(self)
        self._transport = None

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._write_simple(400, b'{"error":"protocol upgrade is not supported"}')
        except httptools.HttpParserError:
            self._write_simple(400, b'{"error":"malformed HTTP request"}')

    # -- httptools callbacks -----------------------------------------------------------------
    def on_message_begin(self) -> None:
        self._url = b""
        self._headers = {}
        self._body = []

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        key = name.decode("latin-1").lower()
        v = value.decode("latin-1")
        prev = self._headers.get(key)
        self._headers[key] = v if prev is None else f"{prev},{v}"

    def on_headers_complete(self) -> None:
        if self._headers.get("expect", "").lower() == "100-continue" and self._transport is not None:
            self._transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        parser = self._parser
        url = self._url.decode("latin-1")
        path, _, query = url.partition("?")
        body = self._body[0] if len(self._body) == 1 else b"".join(self._body)
        method = parser.get_method().decode("latin-1")
        responder = Responder(self, parser.should_keep_alive())
        self._queue.append(responder)
        if len(self._queue) > _MAX_PIPELINE and self._transport is not None and not self._paused:
            self._paused = True
            self._transport.pause_reading()
        try:
            self._app(HttpRequest(method, path, query, self._headers, body), responder)
        except Exception:
            log.exception("unhandled error in HTTP handler")
            responder.send(500, b'{"error":"internal server error"}')

    # -- writing -----------------------------------------------------------------------------
    def respond(
        self,
        responder: Responder,
        status: int,
        body: bytes | list[bytes | memoryview],
        content_type: str,
        extra_headers: list[tuple[str, str]] | None,
    ) -> None:
        queue = self._queue
        if queue and queue[0] is responder:
            queue.popleft()
            self._write(status, body, content_type, extra_headers, responder.keep_alive)
            # answers that were ready behind this one go out now, in order
            pending = self._pending
            while queue and queue[0] in pending:
                r = queue.popleft()
                st, b, ct, hdrs = pending.pop(r)
                self._write(st, b, ct, hdrs, r.keep_alive)
            if self._paused and len(queue) <= _MAX_PIPELINE // 2 and self._transport is not None:
                self._paused = False
                self._transport.resume_reading()
        else:
            self._pending[responder] = (status, body, content_type, extra_headers)

    def _write(
        self,
        status: int,
        body: bytes | list[bytes | memoryview],
        content_type: str,
        extra_headers: list[tuple[str, str]] | None,
        keep_alive: bool,
    ) -> None:
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        if isinstance(body, list):
            length = sum(len(p) if isinstance(p, bytes) else p.nbytes for p in body)
        else:
            length = len(body)
        head = _STATUS_LINES.get(status) or f"HTTP/1.1 {status} Unknown\r\n".encode()
        lines = [
            head,
            b"Content-Type: ",
            content_type.encode(),
            b"\r\nContent-Length: ",
            str(length).encode(),
        ]
        if extra_headers:
            for k, v in extra_headers:
                lines.append(f"\r\n{k}: {v}".encode())
        if not keep_alive:
            lines.append(b"\r\nConnection: close")
        lines.append(b"\r\n\r\n")
        if isinstance(body, list):
            if sum(len(p) if isinstance(p, bytes) else p.nbytes for p in body) < 65536:
                transport.write(b"".join(lines) + b"".join(body))
            else:
                transport.write(b"".join(lines))
                transport.writelines(body)
        else:
            lines.append(body)
            transport.write(b"".join(lines))
        if not keep_alive:
            transport.close()

    def _write_simple(self, status: int, body: bytes) -> None:
        self._write(status, body, "application/json", None, False)

    def close(self, only_idle: bool) -> None:
        if self._transport is not None and not (only_idle and self._queue):
            self._transport.close()


class HttpServer:
    """Listens on (host, port) and serves ``app``; ``stop`` closes the listener and idle connections."""

    def __init__(self, app: App, host: str, port: int) -> None:
        self.app = app
        self.host = host
        self.port = port
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[HttpConnection] = set()

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: HttpConnection(self.app, self._connections),
            self.host,
            self.port,
            reuse_address=True,
            backlog=1024,
        )
        sock = self._server.sockets[0]
        self.port = sock.getsockname()[1]

    def stop_listening(self) -> None:
        """Refuse new connections; close the idle ones (in-flight answers still go out)."""
        if self._server is not None:
            self._server.close()
            self._server = None
        for c in list(self._connections):
            c.close(only_idle=True)

    async def stop(self) -> None:
        self.stop_listening()
        for c in list(self._connections):
            c.close(only_idle=False)
        await asyncio.sleep(0)
