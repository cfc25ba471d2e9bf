"""HTTP/1.1 on asyncio (uvloop) with httptools: keep-alive, pipelining, chunked bodies, 100-continue.

No web framework sits on the hot path: each connection parses with httptools and hands a
``HttpRequest`` to the app, which answers synchronously or later through ``Responder``.

``HttpLimits`` bound what one client can make the server hold: the body (413, checked against
Content-Length before a byte of it is read, and while a chunked body arrives), the URL (414), the
header fields (431), the connections (503 to the ones over), and time: a request whose headers
are not complete within ``header_timeout_s`` gets 408 (slowloris), and a connection that sends
nothing for ``idle_timeout_s`` while it has nothing to answer is closed. The clock is read once per
``data_received``; one sweep a second looks at every connection (no timer per request).

Flow control (``frontends/flow.py``): a connection stops reading, and holds back the requests it read
already, while its client leaves answers unread past the write buffer's high-water mark, while
``_MAX_PIPELINE`` requests are under way, or, over the process's ``UnsentBudget``, while it holds
anything unsent; it reads again once its client took them. Answers ready before the ones ahead of
them count in the budget while they wait; over it, an answer for a connection that holds any is
refused (503), and so is any over twice the budget.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Callable
from typing import Any

import httptools
import orjson

from inferd.core.unsent import UnsentBudget
from inferd.frontends.flow import SMALL_ANSWER, Unsent
from inferd.frontends.http.head import METHODS, NAMES, Reject, too_large, too_many
from inferd.frontends.http.head import HttpLimits as HttpLimits  # what the server takes, here too
from inferd.frontends.http.head import origin_form as origin_form
from inferd.frontends.http.responder import STATUS_LINES, ExtraHeaders, HttpResponder, status_line
from inferd.frontends.http.responder import HttpRequest as HttpRequest  # the handlers' types, here too
from inferd.frontends.http.responder import Responder as Responder

log = logging.getLogger("inferd.http")

_JSON = "application/json"
_MAX_PIPELINE = 64  # requests of a connection under way (read, not answered) before it holds the next
#: the lines after the status line, up to the length, by content type (filled as they are used)
_HEADS: dict[str, bytes] = {}

App = Callable[[HttpRequest, Responder], Any]
Body = bytes | list[bytes | memoryview]


def _size(body: Body) -> int:
    if isinstance(body, bytes):
        return len(body)
    return sum(len(p) if isinstance(p, bytes) else p.nbytes for p in body)


class HttpConnection(asyncio.Protocol):
    """One client connection."""

    def __init__(
        self,
        app: App,
        connections: set[HttpConnection],
        limits: HttpLimits = HttpLimits(),
        budget: UnsentBudget | None = None,
    ) -> None:
        self._app = app
        self._connections = connections
        self._limits = limits
        #: made when the first bytes come (``_new_parser``): it holds a bound method per callback, a
        #: dozen objects for the cyclic GC, which ten thousand idle connections made 30 ms collections of
        self._parser: httptools.HttpRequestParser | None = None
        self._transport: asyncio.Transport | None = None
        self._url = b""
        self._headers: dict[str, str] = {}
        self._body: list[bytes] = []
        self._body_bytes = 0
        self._piece = 0  # bytes in the piece being parsed
        self._body_digits = len(str(limits.max_body))
        #: bytes received while a request's head (request line and header fields) is read: a head
        #: over the limits is refused as it arrives, not once httptools has buffered all of it
        self._head_bytes = 0
        self._head_limit = limits.max_url + limits.max_header_bytes + 4 * limits.max_headers + 8192
        self._began = False  # a request began in the piece being parsed
        self._rejected = False
        #: monotonic time of the last bytes received, and of the start of a request still being read
        self.last_io = time.monotonic()
        self.reading_since: float | None = None
        self._headers_done = False
        # answers ready before the ones ahead of them: written when their turn comes (with their size)
        self._pending: dict[HttpResponder, tuple[int, Body, str, ExtraHeaders, int]] = {}
        self._pending_bytes = 0  # their bodies' bytes, counted in the budget
        self._queue: collections.deque[HttpResponder] = collections.deque()  # responses in request order
        #: flow control: requests read, held back (their responders are at the end of ``_queue``)
        self._backlog: collections.deque[tuple[HttpRequest, HttpResponder]] = collections.deque()
        self._releasing = False
        self._budget = budget if budget is not None else UnsentBudget(0)
        self._unsent = Unsent(self._budget)
        self._paused = False  # reading is paused (flow control)
        #: the server is stopping (``HttpServer.wind_down``): the next answer says ``Connection: close``
        #: and the connection ends after it
        self.draining = False
        self._closing = False
        self.active = 0
        #: flow control: the transport's buffer is over its high-water mark
        self._write_paused = False
        self._waiters: list[asyncio.Future[None]] = []
        self.lost = False

    # -- asyncio.Protocol --------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # uvloop's transports are not subclasses
        if len(self._connections) >= self._limits.max_connections:
            self._write(
                503, b'{"error":"the server has too many connections; try again later"}', _JSON, None, False
            )
            return
        self._connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._connections.discard(self)
        self._transport = None
        self.lost = True
        self._pending.clear()
        if self._pending_bytes:
            self._budget.add(-self._pending_bytes)
            self._pending_bytes = 0
        self._backlog.clear()
        self._unsent.drained(None)
        queue, self._queue = self._queue, collections.deque()
        for r in queue:  # answers still owed to a client that is gone: cancel what produces them
            cb = r.on_close
            if cb is not None and not r._ended:
                r.on_close = None
                try:
                    cb()
                except Exception:
                    log.exception("cancelling a request of a closed connection failed")
        self._wake()

    def pause_writing(self) -> None:
        self._write_paused = True
        if self._transport is not None:
            self._unsent.count(self._transport)
        self._pause_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        self._unsent.drained(self._transport)
        if self._backlog:
            self._release_backlog()
        self._maybe_resume_reading()
        self._wake()

    def _pause_reading(self) -> None:
        transport = self._transport
        if not self._paused and transport is not None and not transport.is_closing():
            self._paused = True
            transport.pause_reading()

    def _maybe_resume_reading(self) -> None:
        """Read again once the client took its answers and few requests are under way."""
        transport = self._transport
        if (
            self._paused
            and not self._write_paused
            and not self._backlog
            and len(self._queue) <= _MAX_PIPELINE // 2
            and not self._rejected
            and transport is not None
            and not transport.is_closing()
        ):
            self._paused = False
            transport.resume_reading()

    def _wake(self) -> None:
        if not self._waiters:
            return
        waiters, self._waiters = self._waiters, []
        for w in waiters:
            if not w.done():
                w.set_result(None)

    async def wait_for_change(self) -> None:
        """Wait until writing resumes, the responses ahead advance, or the connection is lost."""
        w = asyncio.get_running_loop().create_future()
        self._waiters.append(w)
        await w

    def must_wait(self, responder: HttpResponder) -> bool:
        return self._write_paused or not self._queue or self._queue[0] is not responder

    def data_received(self, data: bytes) -> None:
        self.last_io = time.monotonic()
        if self._rejected:  # answered and closing: what is left of the request is never read
            return
        self._began = False
        self._piece = len(data)
        parser = self._parser
        if parser is None:
            parser = self._parser = self._new_parser()
        try:
            parser.feed_data(data)
        except httptools.HttpParserCallbackError as e:
            cause = e.__context__
            if isinstance(cause, Reject):
                self.reject(cause.status, cause.message)
            else:
                log.error("HTTP parser callback failed", exc_info=cause)
                self.reject(500, "internal server error")
        except httptools.HttpParserUpgrade:
            self._write_simple(400, b'{"error":"protocol upgrade is not supported"}')
        except httptools.HttpParserError:
            self._write_simple(400, b'{"error":"malformed HTTP request"}')
        else:
            # a piece that leaves the head unfinished was head (one that began a request may hold
            # the end of the one before: not counted, so at most one piece more is ever held)
            if not self._headers_done and not self._rejected:
                if not self._began:
                    self._head_bytes += len(data)
                    if self._head_bytes > self._head_limit:
                        limit = self._limits.max_header_bytes
                        self.reject(431, f"the request's header fields are larger than {limit} bytes")
                        return
                if len(self._headers) > self._limits.max_headers:  # a head arriving in pieces
                    self.reject(431, too_many(self._limits.max_headers))

    def reject(self, status: int, message: str) -> None:
        """Answer a request over a limit and close: what is left of it is never read."""
        self._rejected = True
        self._body = []
        if self._transport is not None and not self._transport.is_closing():
            self._transport.pause_reading()
        self._write(status, orjson.dumps({"error": message}), _JSON, None, False)

    # -- httptools callbacks -----------------------------------------------------------------
    def on_message_begin(self) -> None:
        self._url = b""
        self._headers = {}
        self._body = []
        self._head_bytes = 0
        self._began = True
        self._body_bytes = 0
        self._headers_done = False
        self.reading_since = self.last_io

    def on_url(self, url: bytes) -> None:
        self._url += url
        if len(self._url) > self._limits.max_url:
            raise Reject(414, f"the request URL is longer than {self._limits.max_url} bytes")

    def on_header(self, name: bytes, value: bytes) -> None:
        # their number and size are checked once the head is complete (and, for a head arriving in
        # pieces, after each piece: the head's bytes are bounded as they come, in data_received)
        key = NAMES.get(name)
        if key is None:
            key = name.decode("latin-1").lower()
        headers = self._headers
        prev = headers.get(key)
        headers[key] = value.decode("latin-1") if prev is None else f"{prev},{value.decode('latin-1')}"

    def on_headers_complete(self) -> None:
        self._headers_done = True
        headers = self._headers
        limits = self._limits
        if len(headers) > limits.max_headers:
            raise Reject(431, too_many(limits.max_headers))
        # (a head that came whole in one piece no longer than the limit is within it)
        if (not self._began or self._piece > limits.max_header_bytes) and (
            sum(map(len, headers)) + sum(map(len, headers.values())) > limits.max_header_bytes
        ):
            raise Reject(431, f"the request's header fields are larger than {limits.max_header_bytes} bytes")
        length = headers.get("content-length")
        if (
            length is not None
            and len(length) >= self._body_digits  # (fewer digits: under the limit)
            and length.strip().isdigit()
            and int(length) > limits.max_body
        ):
            raise Reject(413, too_large(int(length), limits.max_body))
        expect = headers.get("expect")
        if expect is not None and expect.lower() == "100-continue" and self._transport is not None:
            self._transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_body(self, body: bytes) -> None:
        self._body_bytes += len(body)
        if self._body_bytes > self._limits.max_body:
            raise Reject(413, too_large(self._body_bytes, self._limits.max_body))
        self._body.append(body)

    def _new_parser(self) -> httptools.HttpRequestParser:
        parser = httptools.HttpRequestParser(self)
        # Transfer-Encoding: chunked with a Content-Length (python-requests sends both for a
        # generator body): the chunked framing wins, as RFC 9112 says and the reference does, and the
        # connection closes after the answer, so that nothing framed the other way can follow it
        parser.set_dangerous_leniencies(lenient_chunked_length=True)
        return parser

    def on_message_complete(self) -> None:
        parser = self._parser
        assert parser is not None  # (a parser callback)
        url = self._url.decode("latin-1")
        if url[:1] != "/":
            url = origin_form(url)
        path, _, query = url.partition("?")
        parts = self._body
        body = parts[0] if len(parts) == 1 else b"".join(parts)
        name = parser.get_method()
        method = METHODS.get(name) or name.decode("latin-1")
        headers = self._headers
        keep_alive = parser.should_keep_alive()
        # chunked framing unless HTTP/1.0; a request kept alive without a Connection header is 1.1
        framed = (keep_alive and "connection" not in headers) or parser.get_http_version() != "1.0"
        if keep_alive and (
            self.draining or ("transfer-encoding" in headers and "content-length" in headers)
        ):  # both framings: answered, then closed
            keep_alive = False
        responder = HttpResponder(self, keep_alive, framed)
        request = HttpRequest(method, path, query, headers, body)
        queue = self._queue
        if queue or self._write_paused or self._budget.over:  # answers owed, or near a bound
            queue.append(responder)
            self._hold(request, responder)
        else:
            queue.append(responder)
            self._dispatch(request, responder)
        # kept while the handler runs: a traced request's HTTP_RECV_START
        self.reading_since = None

    def _dispatch(self, request: HttpRequest, responder: HttpResponder) -> None:
        try:
            self._app(request, responder)
        except Exception:
            log.exception("unhandled error in HTTP handler")
            responder.send(500, b'{"error":"internal server error"}')

    def _hold(self, request: HttpRequest, responder: HttpResponder) -> None:
        """Flow control, for a request just read: handle it now if this connection may take more
        work, else keep it (and stop reading) until its client took enough of its answers."""
        transport = self._transport
        over = self._budget.over
        if over and not self._write_paused and transport is not None:
            self._unsent.tighten(transport)  # pauses writing if it holds anything
        backlog = self._backlog
        if (
            self._write_paused
            or backlog
            or len(self._queue) > _MAX_PIPELINE
            or (over and self._pending_bytes)  # answers wait behind an earlier one: held
        ):
            backlog.append((request, responder))
            self._pause_reading()
        else:
            self._dispatch(request, responder)

    def _release_backlog(self) -> None:
        """Handle the requests held back, in order, while this connection may take more work."""
        if self._releasing:
            return  # an answer given while releasing: the loop below goes on
        self._releasing = True
        backlog, queue = self._backlog, self._queue
        try:
            while backlog and not self._write_paused and not self.lost:
                if len(queue) - len(backlog) >= _MAX_PIPELINE:
                    break
                transport = self._transport
                if self._budget.over and (
                    self._pending_bytes or (transport is not None and self._unsent.tighten(transport))
                ):
                    break  # it holds answers: the rest waits until they went out
                self._dispatch(*backlog.popleft())
        finally:
            self._releasing = False

    # -- writing -----------------------------------------------------------------------------
    def respond(
        self,
        responder: HttpResponder,
        status: int,
        body: Body,
        content_type: str,
        extra_headers: ExtraHeaders,
    ) -> None:
        queue = self._queue
        budget = self._budget
        if budget.over:  # it holds answers already, or the budget is full: a large one is not kept
            holding = self._write_paused or self._pending_bytes > 0
            size = _size(body)
            if (holding or budget.full) and size > SMALL_ANSWER:
                message = budget.refusal("this answer was not kept", holding, size)
                status, body, content_type, extra_headers = 503, orjson.dumps({"error": message}), _JSON, None
        if queue and queue[0] is responder:
            queue.popleft()
            self._write(status, body, content_type, extra_headers, responder.keep_alive)
            if queue:
                self._advance()
            elif self._paused:
                self._maybe_resume_reading()
        elif not self.lost:  # (a lost connection's answers go nowhere, and out of the budget)
            size = _size(body)
            self._pending[responder] = (status, body, content_type, extra_headers, size)
            self._pending_bytes += size
            self._budget.add(size)

    def chunk(self, responder: HttpResponder, data: bytes, end: bool) -> None:
        """Part of a chunked response: written now if its turn has come, else held back."""
        queue = self._queue
        if queue and queue[0] is responder:
            transport = self._transport
            if transport is not None and not transport.is_closing() and data:
                transport.write(data)
                if self._write_paused:
                    self._unsent.count(transport)
            if end:
                queue.popleft()
                if not responder.keep_alive and transport is not None:
                    transport.close()
                self._advance()
        elif responder._chunks is not None and not self.lost:
            responder._chunks.append(data)

    def _advance(self) -> None:
        """The head of the queue answered: write what is ready behind it, in order."""
        queue = self._queue
        pending = self._pending
        transport = self._transport
        while queue:
            r = queue[0]
            if r in pending:
                queue.popleft()
                st, b, ct, hdrs, size = pending.pop(r)
                self._pending_bytes -= size
                self._budget.add(-size)
                self._write(st, b, ct, hdrs, r.keep_alive)
                continue
            held = r._chunks
            if held is None:
                break  # not answered yet
            if held and transport is not None and not transport.is_closing():
                transport.writelines(held)
                if self._write_paused:
                    self._unsent.count(transport)
            held.clear()
            if not r._ended:
                break  # a chunked response under way: the ones behind it wait for its end
            queue.popleft()
            if not r.keep_alive and transport is not None:
                transport.close()
        if self._backlog:
            self._release_backlog()
        if self._paused:
            self._maybe_resume_reading()
        self._wake()

    def _write(
        self,
        status: int,
        body: Body,
        content_type: str,
        extra_headers: ExtraHeaders,
        keep_alive: bool,
    ) -> None:
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        head = _HEADS.get(content_type)
        if head is None:
            head = b"Content-Type: %b\r\nContent-Length: " % content_type.encode()
            if len(_HEADS) < 64:  # the server's own few types
                _HEADS[content_type] = head
        if extra_headers:
            extra = (
                extra_headers
                if isinstance(extra_headers, bytes)
                else "".join([f"\r\n{k}: {v}" for k, v in extra_headers]).encode()
            )
        else:
            extra = b""
        end = b"\r\n\r\n" if keep_alive else b"\r\nConnection: close\r\n\r\n"
        line = STATUS_LINES.get(status) or status_line(status)
        if isinstance(body, bytes):
            transport.write(b"".join((line, head, b"%d" % len(body), extra, end, body)))
        else:
            length = sum(len(p) if isinstance(p, bytes) else p.nbytes for p in body)
            lines = b"".join((line, head, b"%d" % length, extra, end))
            if length < 65536:
                transport.write(lines + b"".join(body))
            else:
                transport.write(lines)
                transport.writelines(body)
        if self._write_paused:
            self._unsent.count(transport)
        if not keep_alive:
            transport.close()

    def _write_simple(self, status: int, body: bytes) -> None:
        self._write(status, body, "application/json", None, False)

    @property
    def idle(self) -> bool:
        """Nothing owed to the client and no request being read."""
        return not self._queue and self.reading_since is None

    def close(self, only_idle: bool) -> None:
        if self._transport is not None and not (only_idle and not self.idle):
            self._transport.close()

    def sweep(self, now: float) -> None:
        """Close this connection if it is past a timeout (called about once a second)."""
        limits = self._limits
        since = self.reading_since
        if since is not None:
            if not self._headers_done and limits.header_timeout_s and now - since > limits.header_timeout_s:
                self.reject(408, f"the request's headers did not arrive within {limits.header_timeout_s:g} s")
                return
            if limits.idle_timeout_s and now - self.last_io > limits.idle_timeout_s:
                self.reject(408, f"the request's body stalled for {limits.idle_timeout_s:g} s")
                return
        elif not self._queue and limits.idle_timeout_s and now - self.last_io > limits.idle_timeout_s:
            self.close(only_idle=True)  # keep-alive, idle: nothing owed, nothing coming
