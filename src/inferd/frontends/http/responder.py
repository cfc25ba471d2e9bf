"""What a handler gets of an HTTP/1.1 request (``HttpRequest``) and how it answers it (``Responder``,
in order on its connection: ``protocol.HttpConnection`` writes what it is handed, seen from here as
a ``Connection``: protocol.py imports this module, not the other way).

``Responder`` is what handlers are typed with, a Protocol; ``HttpResponder`` the connection's own
implementation. The split lets this module be compiled with the hot path (hotpath.py): a compiled
class is checked at every typed boundary of the group, and the handlers also take stand-ins that
wrap it (``request_log.LoggedResponder``, ``trace.TracedResponder``, rayserve's answer), which a
Protocol-typed parameter lets through unchecked."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

_REASONS = {
    100: "Continue",
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    413: "Payload Too Large",
    414: "URI Too Long",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    501: "Not Implemented",
    503: "Service Unavailable",
}
#: every answer tells browsers not to guess its type (the reference sends no such header)
_NOSNIFF = "X-Content-Type-Options: nosniff\r\n"
STATUS_LINES = {code: f"HTTP/1.1 {code} {reason}\r\n{_NOSNIFF}".encode() for code, reason in _REASONS.items()}


def status_line(status: int) -> bytes:
    """The status line of ``status`` and the header every answer carries."""
    return STATUS_LINES.get(status) or f"HTTP/1.1 {status} Unknown\r\n{_NOSNIFF}".encode()


#: headers an answer adds: (name, value) pairs, or their lines encoded already (each ``\r\nName: value``)
ExtraHeaders = list[tuple[str, str]] | bytes | None


class HttpRequest:
    """A parsed request: method, path, query, lower-cased headers and the whole body.

    A plain class, not a dataclass: mypyc leaves a dataclass's generated ``__init__`` interpreted,
    and every request builds one of these."""

    __slots__ = ("body", "headers", "method", "path", "query")

    def __init__(self, method: str, path: str, query: str, headers: dict[str, str], body: bytes) -> None:
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.body = body

    def __repr__(self) -> str:
        return f"HttpRequest(method={self.method!r}, path={self.path!r}, query={self.query!r})"


class Responder(Protocol):
    """How a handler answers its request (``HttpResponder``, or a stand-in that wraps one).

    Either one whole response (``send``) or a chunked one (``start_chunked``, ``write_chunk``,
    ``end_chunked``). ``on_close`` is called when the client goes away before the response ended.
    """

    on_close: Callable[[], None] | None

    def send(
        self,
        status: int,
        body: bytes | list[bytes | memoryview],
        content_type: str = "application/json",
        extra_headers: ExtraHeaders = None,
    ) -> None: ...

    def start_chunked(
        self, status: int, content_type: str, extra_headers: list[tuple[str, str]] | None = None
    ) -> None: ...

    def write_chunk(self, data: bytes) -> None: ...

    def end_chunked(self) -> None: ...

    @property
    def closed(self) -> bool: ...

    @property
    def must_wait(self) -> bool: ...

    async def drain(self) -> None: ...


class Connection(Protocol):
    """What an ``HttpResponder`` writes through (``protocol.HttpConnection``)."""

    #: the client went away
    lost: bool

    def respond(
        self,
        responder: HttpResponder,
        status: int,
        body: bytes | list[bytes | memoryview],
        content_type: str,
        extra_headers: ExtraHeaders,
    ) -> None: ...

    def chunk(self, responder: HttpResponder, data: bytes, end: bool) -> None: ...

    def must_wait(self, responder: HttpResponder) -> bool: ...

    async def wait_for_change(self) -> None: ...


class HttpResponder:
    """Writes the response of one request, in order, on its connection (loop thread only): a
    ``Responder``. A chunked response that starts while earlier requests of the connection are
    still unanswered is held back until their answers went out. ``on_close`` is called when the
    client goes away before this response ended.
    """

    __slots__ = ("_chunks", "_conn", "_done", "_ended", "_framed", "keep_alive", "on_close")

    def __init__(self, conn: Connection, keep_alive: bool, framed: bool = True) -> None:
        self._conn = conn
        self._done = False
        self.keep_alive = keep_alive
        self._framed = framed  # chunked framing; an HTTP/1.0 client gets the bytes until close
        #: bytes of a started chunked response not written yet (None: not a chunked response)
        self._chunks: list[bytes] | None = None
        self._ended = False
        self.on_close: Callable[[], None] | None = None

    def send(
        self,
        status: int,
        body: bytes | list[bytes | memoryview],
        content_type: str = "application/json",
        extra_headers: ExtraHeaders = None,
    ) -> None:
        if self._done:
            return
        self._done = True
        self._conn.respond(self, status, body, content_type, extra_headers)

    # -- chunked responses -----------------------------------------------------------------
    def start_chunked(
        self, status: int, content_type: str, extra_headers: list[tuple[str, str]] | None = None
    ) -> None:
        """Send the status line and headers of a response whose body follows in chunks."""
        if self._done:
            return
        self._done = True
        self._chunks = []
        if not self._framed:
            self.keep_alive = False
        lines = [status_line(status), f"Content-Type: {content_type}\r\n".encode()]
        if self._framed:
            lines.append(b"Transfer-Encoding: chunked\r\n")
        for k, v in extra_headers or ():
            lines.append(f"{k}: {v}\r\n".encode())
        if not self.keep_alive:
            lines.append(b"Connection: close\r\n")
        lines.append(b"\r\n")
        self._conn.chunk(self, b"".join(lines), False)

    def write_chunk(self, data: bytes) -> None:
        """One chunk of the body (empty data writes nothing: an empty chunk ends the body)."""
        if self._chunks is None or self._ended or not data:
            return
        if self._framed:
            data = b"%x\r\n%b\r\n" % (len(data), data)
        self._conn.chunk(self, data, False)

    def end_chunked(self) -> None:
        """End the chunked body (the connection then answers the requests behind this one)."""
        if self._chunks is None or self._ended:
            return
        self._ended = True
        self._conn.chunk(self, b"0\r\n\r\n" if self._framed else b"", True)

    @property
    def closed(self) -> bool:
        """The client went away: nothing written reaches it any more."""
        return self._conn.lost

    @property
    def must_wait(self) -> bool:
        """Producing more now would only queue bytes in memory (the client reads slower, or the
        responses ahead of this one are not out yet): ``await drain()`` first."""
        return self._conn.must_wait(self)

    async def drain(self) -> None:
        """Wait until this response may write again, or the client went away."""
        while self._conn.must_wait(self) and not self._conn.lost:
            await self._conn.wait_for_change()
