"""HttpConnection's flow control without sockets (frontends/flow.py): a client that takes nothing
stops being read and its requests are held, the pipeline cap, the process's budget (what counts in
it, who waits and what is refused over it, what a lost connection gives back); and two wire
details: absolute-form request targets and the nosniff header on every answer."""

from __future__ import annotations

import asyncio

import orjson
from http_wire import parse_answers, request

from inferd.core.unsent import UnsentBudget
from inferd.frontends.flow import HIGH_WATER
from inferd.frontends.http.protocol import HttpConnection, HttpLimits, HttpRequest, Responder, origin_form


class Recorder:
    """An app that keeps the responders: a test answers when it likes."""

    def __init__(self) -> None:
        self.seen: list[tuple[HttpRequest, Responder]] = []

    def __call__(self, req: HttpRequest, resp: Responder) -> None:
        self.seen.append((req, resp))


class FlowTransport:
    """A transport whose client takes nothing until ``drain``: uvloop's write flow control by hand."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.closed = False
        self.reading = True
        self.paused = False
        self.high = HIGH_WATER
        self.protocol: HttpConnection | None = None

    def write(self, data: bytes) -> None:
        self.data += data
        self._check()

    def writelines(self, parts: list[bytes]) -> None:
        for p in parts:
            self.data += p
        self._check()

    def _check(self) -> None:
        if not self.paused and len(self.data) > self.high and self.protocol is not None:
            self.paused = True
            self.protocol.pause_writing()

    def get_write_buffer_size(self) -> int:
        return len(self.data)

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self.high = HIGH_WATER if high is None else high
        self._check()

    def drain(self) -> bytes:
        """The client reads everything written so far."""
        out = bytes(self.data)
        self.data.clear()
        if self.paused and self.protocol is not None:
            self.paused = False
            self.protocol.resume_writing()
        return out

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True


def _connect(app: object, budget: UnsentBudget | None = None) -> tuple[HttpConnection, FlowTransport]:
    conn = HttpConnection(app, set(), HttpLimits(), budget)  # type: ignore[arg-type]
    t = FlowTransport()
    t.protocol = conn
    conn.connection_made(t)  # type: ignore[arg-type]
    return conn, t


def test_a_client_that_takes_nothing_stops_being_read() -> None:
    seen: list[str] = []

    def app(req: HttpRequest, resp: Responder) -> None:
        seen.append(req.path)
        resp.send(200, b"x" * 20_000, "text/plain")

    conn, t = _connect(app)
    conn.data_received(b"".join(request("GET", f"/{i}") for i in range(10)))
    assert seen == ["/0", "/1", "/2", "/3"]  # the 4th answer passed the mark: the rest are held
    assert t.paused and not t.reading
    answers = parse_answers(t.drain())  # the client reads: the held requests are answered
    assert not t.reading  # and pause it again
    while not t.reading:
        answers += parse_answers(t.drain())
    answers += parse_answers(t.drain())
    assert seen == [f"/{i}" for i in range(10)]
    assert [a.status for a in answers] == [200] * 10


def test_requests_past_the_pipeline_cap_are_held_until_answers_go_out() -> None:
    app = Recorder()
    conn, t = _connect(app)
    conn.data_received(b"".join(request("GET", f"/{i}") for i in range(70)))
    assert len(app.seen) == 64 and not t.reading  # 64 under way; 6 read and held
    app.seen[0][1].send(200, b"0")
    assert len(app.seen) == 65  # one answered: one held request may start
    for i, (_, resp) in enumerate(app.seen[1:], 1):
        resp.send(200, str(i).encode())
    for i in range(65, 70):
        app.seen[i][1].send(200, str(i).encode())
    assert [req.path for req, _ in app.seen] == [f"/{i}" for i in range(70)]
    assert [a.body for a in parse_answers(t.drain())] == [str(i).encode() for i in range(70)]
    assert t.reading


def test_over_the_budget_a_connection_owing_answers_pauses_until_drained() -> None:
    budget = UnsentBudget(100)
    app = Recorder()
    owing, t = _connect(app, budget)
    clean, t2 = _connect(app, budget)
    owing.data_received(request("GET", "/a"))
    app.seen[0][1].send(200, b"first")  # written, not taken by the client
    budget.add(1000)  # others hold more than the budget
    owing.data_received(request("GET", "/b"))
    assert len(app.seen) == 1 and not t.reading and t.high == 0  # held: its mark tightened to nothing
    clean.data_received(request("GET", "/c"))  # nothing unsent there: served
    assert [req.path for req, _ in app.seen] == ["/a", "/c"] and t2.reading
    budget.add(-1000)
    t.drain()
    assert t.high == HIGH_WATER and t.reading  # its mark back, reading again
    assert [req.path for req, _ in app.seen] == ["/a", "/c", "/b"]
    assert budget.used == 0


def test_answers_waiting_behind_an_earlier_one_count_until_written() -> None:
    budget = UnsentBudget(0)
    app = Recorder()
    conn, t = _connect(app, budget)
    conn.data_received(request("GET", "/slow") + request("GET", "/a") + request("GET", "/b"))
    app.seen[2][1].send(200, b"b" * 3000)
    app.seen[1][1].send(200, b"a" * 2000)
    assert budget.used == 5000  # held behind /slow
    app.seen[0][1].send(200, b"slow")
    assert budget.used == 0
    assert [a.body[:1] for a in parse_answers(t.drain())] == [b"s", b"a", b"b"]


def test_a_lost_connection_gives_back_what_it_held() -> None:
    budget = UnsentBudget(0)
    app = Recorder()
    conn, t = _connect(app, budget)
    conn.data_received(request("GET", "/slow") + request("GET", "/a") + request("GET", "/b"))
    app.seen[1][1].send(200, b"a" * 2000)
    app.seen[0][1].send(200, b"x" * (2 * HIGH_WATER))  # written, past the mark: counted
    assert t.paused and budget.used > 2 * HIGH_WATER
    conn.connection_lost(None)
    assert budget.used == 0


def test_over_the_budget_an_answer_for_a_connection_that_holds_answers_is_refused() -> None:
    budget = UnsentBudget(100_000)
    app = Recorder()
    conn, t = _connect(app, budget)
    clean, t2 = _connect(app, budget)
    conn.data_received(request("GET", "/a") + request("GET", "/b") + request("GET", "/c"))
    clean.data_received(request("GET", "/d"))
    app.seen[0][1].send(200, b"a" * (2 * HIGH_WATER))  # its client reads nothing: over the budget
    assert t.paused and budget.over
    app.seen[1][1].send(200, b"b" * 5000)  # it holds answers: this one is not kept
    app.seen[2][1].send(200, b"{}")  # small answers go as they are
    app.seen[3][1].send(200, b"d" * 5000)  # a connection that holds nothing is served
    answers = parse_answers(t.drain())
    assert [a.status for a in answers] == [200, 503, 200]
    error = orjson.loads(answers[1].body)["error"]
    assert "--max-unsent-bytes (100,000)" in error and "this answer was not kept" in error
    assert answers[2].body == b"{}"
    assert parse_answers(t2.drain())[0].body == b"d" * 5000
    assert budget.used == 0 and budget.refused == 1 and not budget.over


def test_past_twice_the_budget_a_large_answer_is_refused_on_any_connection() -> None:
    budget = UnsentBudget(1000)
    app = Recorder()
    clean, t = _connect(app, budget)
    clean.data_received(request("GET", "/a") + request("GET", "/b"))
    budget.add(2001)  # others hold more than twice the budget
    app.seen[0][1].send(200, b"a" * 5000)
    app.seen[1][1].send(200, b"[]")
    answers = parse_answers(t.drain())
    assert [a.status for a in answers] == [503, 200]
    assert "more than twice --max-unsent-bytes (1,000)" in orjson.loads(answers[0].body)["error"]


def test_over_the_budget_answers_waiting_behind_an_earlier_one_hold_the_next_requests() -> None:
    budget = UnsentBudget(1000)
    app = Recorder()
    conn, t = _connect(app, budget)
    conn.data_received(request("GET", "/slow") + request("GET", "/a"))
    app.seen[1][1].send(200, b"a" * 2000)  # behind /slow: held, over the budget
    assert budget.over
    conn.data_received(request("GET", "/b"))
    assert len(app.seen) == 2 and not t.reading  # it holds answers: the next request waits
    app.seen[0][1].send(200, b"slow")
    assert len(app.seen) == 3 and t.reading  # they went out: served again
    app.seen[2][1].send(200, b"b")
    assert [a.status for a in parse_answers(t.drain())] == [200, 200, 200]


def test_absolute_form_targets() -> None:
    assert origin_form("http://127.0.0.1:8000/v2/models/m/infer") == "/v2/models/m/infer"
    assert origin_form("HTTPS://other-host/v2/health/ready?x=1") == "/v2/health/ready?x=1"
    assert origin_form("http://host?a=b") == "?a=b"
    assert origin_form("http://host") == ""  # no path: 404, as the reference answers it
    assert origin_form("*") == "*"
    assert origin_form("v2/health/ready") == "v2/health/ready"
    assert origin_form("1x://host/p") == "1x://host/p"

    app = Recorder()
    conn, _ = _connect(app)
    conn.data_received(request("POST", "http://localhost:1/v2/models/m/infer?q=1", b"{}"))
    [(req, _)] = app.seen
    assert (req.path, req.query) == ("/v2/models/m/infer", "q=1")


def test_every_answer_says_nosniff() -> None:
    async def main() -> None:
        app = Recorder()
        conn, t = _connect(app)
        conn.data_received(request("GET", "/a") + request("GET", "/b"))
        app.seen[0][1].send(200, b"{}")
        app.seen[1][1].start_chunked(200, "text/event-stream")
        app.seen[1][1].write_chunk(b"data: 1\n\n")
        app.seen[1][1].end_chunked()
        conn.data_received(b"NOT HTTP\r\n\r\n")
        answers = parse_answers(t.drain())
        assert [a.status for a in answers] == [200, 200, 400]
        assert all(a.headers["x-content-type-options"] == "nosniff" for a in answers)
        full = HttpConnection(app, {object()}, HttpLimits(max_connections=1))  # type: ignore[arg-type]
        t503 = FlowTransport()
        full.connection_made(t503)  # type: ignore[arg-type]
        [a] = parse_answers(t503.drain())
        assert a.status == 503 and a.headers["x-content-type-options"] == "nosniff"

    asyncio.run(main())


def test_an_answer_after_the_connection_was_lost_is_not_counted() -> None:
    budget = UnsentBudget(0)
    app = Recorder()
    conn, _ = _connect(app, budget)
    conn.data_received(request("GET", "/slow") + request("GET", "/a"))
    conn.connection_lost(None)
    app.seen[1][1].send(200, b"a" * 2000)  # the model answered after the client left
    assert budget.used == 0
