"""HttpConnection without sockets: keep-alive, pipelining in order, chunked answers held back,
100-continue, HTTP/1.0, malformed requests, a bug in the app, a client that goes away."""

from __future__ import annotations

import asyncio

from http_wire import Client, parse_answers, request

from inferd.frontends.http.protocol import HttpRequest, Responder


class Recorder:
    """An app that keeps the responders, so a test answers when it likes."""

    def __init__(self) -> None:
        self.seen: list[tuple[HttpRequest, Responder]] = []

    def __call__(self, req: HttpRequest, resp: Responder) -> None:
        self.seen.append((req, resp))


def test_request_fields_and_one_answer() -> None:
    async def main() -> None:
        app = Recorder()
        c = Client(app)
        c.send(request("POST", "/v2/x?a=1", b"body", {"X-Thing": "v"}))
        [(req, resp)] = app.seen
        assert (req.method, req.path, req.query, req.body) == ("POST", "/v2/x", "a=1", b"body")
        assert req.headers["x-thing"] == "v"
        resp.send(200, b"ok", "text/plain", [("X-Extra", "1")])
        [a] = await c.answers()
        assert (a.status, a.body, a.headers["x-extra"], a.headers["content-type"]) == (
            200,
            b"ok",
            "1",
            "text/plain",
        )
        assert not c.transport.closed  # keep-alive

    asyncio.run(main())


def test_pipelined_answers_go_out_in_request_order() -> None:
    async def main() -> None:
        app = Recorder()
        c = Client(app)
        c.send(request("GET", "/1") + request("GET", "/2") + request("GET", "/3"))
        (_, r1), (_, r2), (_, r3) = app.seen
        r3.send(200, b"3")
        r2.start_chunked(200, "text/plain")
        r2.write_chunk(b"two")
        assert await c.answers() == []  # both wait for the first
        r1.send(200, b"1")
        r2.end_chunked()
        assert [a.body for a in await c.answers()] == [b"1", b"two", b"3"]

    asyncio.run(main())


def test_expect_continue_http10_and_malformed_requests() -> None:
    async def main() -> None:
        app = Recorder()
        c = Client(app)
        c.send(request("POST", "/x", b"abc", {"Expect": "100-continue"}))
        assert bytes(c.transport.data).startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
        app.seen[0][1].send(200, b"")
        old = Client(app)
        old.send(b"GET /y HTTP/1.0\r\n\r\n")
        app.seen[1][1].send(200, b"bye")
        assert old.transport.closed  # HTTP/1.0 without keep-alive: closed after the answer
        bad = Client(app)
        bad.send(b"NOT HTTP AT ALL\r\n\r\n")
        [a] = parse_answers(bytes(bad.transport.data))
        assert a.status == 400 and bad.transport.closed

    asyncio.run(main())


def test_a_bug_in_the_app_is_a_500_and_the_connection_serves_on() -> None:
    def broken(req: HttpRequest, resp: Responder) -> None:
        if req.path == "/boom":
            raise RuntimeError("bug")
        resp.send(200, b"fine")

    async def main() -> None:
        c = Client(broken)
        c.send(request("GET", "/boom") + request("GET", "/ok"))
        assert [(a.status, a.body) for a in await c.answers()] == [
            (500, b'{"error":"internal server error"}'),
            (200, b"fine"),
        ]

    asyncio.run(main())


def test_a_lost_connection_calls_on_close_of_unanswered_requests_only() -> None:
    async def main() -> None:
        app = Recorder()
        c = Client(app)
        c.send(request("GET", "/1") + request("GET", "/2"))
        (_, r1), (_, r2) = app.seen
        closed: list[str] = []
        r1.on_close = lambda: closed.append("1")
        r2.on_close = lambda: closed.append("2")
        r1.send(200, b"done")
        c.conn.connection_lost(None)
        assert closed == ["2"] and r2.closed

    asyncio.run(main())


def test_reading_pauses_behind_a_long_pipeline() -> None:
    async def main() -> None:
        app = Recorder()
        c = Client(app)
        c.send(b"".join(request("GET", f"/{i}") for i in range(80)))
        assert c.transport.paused
        for _, resp in app.seen:
            resp.send(200, b"")
        assert not c.transport.paused
        assert len(await c.answers()) == 80

    asyncio.run(main())
