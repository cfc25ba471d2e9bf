"""HttpLimits and the app's own bounds: what one client can make the server hold, and what it answers.

Timeouts are driven through ``HttpConnection.sweep(now)`` with a chosen clock: nothing sleeps.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import struct
import time
import zlib
from typing import Any

import pytest
from http_wire import Client, parse_answers, request

from inferd.errors import InvalidArgumentError, UnsupportedError
from inferd.frontends.http.app import HttpApp
from inferd.frontends.http.infer_call import inflate
from inferd.frontends.http.protocol import HttpConnection, HttpLimits, HttpRequest, Responder
from inferd.frontends.inflate import TooLarge
from inferd.frontends.inflate import inflate as bounded_inflate

SMALL = HttpLimits(
    max_body=1000, max_url=100, max_header_bytes=300, max_headers=5, header_timeout_s=5, idle_timeout_s=60
)


class Counting:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, req: HttpRequest, resp: Responder) -> None:
        self.calls += 1
        resp.send(200, b"{}")


def answer_of(raw: bytes, limits: HttpLimits = SMALL) -> tuple[int, dict[str, Any], bool, int]:
    """(status, JSON body, connection closed, app calls) of ``raw`` sent on a fresh connection."""
    app = Counting()
    c = Client(app)
    c.conn = HttpConnection(app, set(), limits)
    c.conn.connection_made(c.transport)
    c.send(raw)
    [a] = parse_answers(bytes(c.transport.data))
    return a.status, json.loads(a.body), c.transport.closed, app.calls


def test_a_body_over_the_limit_is_refused_from_its_content_length() -> None:
    head = b"POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 5000000000\r\n\r\n"
    status, body, closed, calls = answer_of(head + b"x" * 10)
    assert (status, closed, calls) == (413, True, 0)
    assert "--http-max-input-size" in body["error"] and "5000000000 bytes" in body["error"]


def test_a_chunked_body_is_refused_once_it_passes_the_limit() -> None:
    head = b"POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    chunk = b"%x\r\n%s\r\n" % (600, b"a" * 600)
    status, _, closed, calls = answer_of(head + chunk + chunk)
    assert (status, closed, calls) == (413, True, 0)
    status, _, _, calls = answer_of(head + chunk + b"0\r\n\r\n")
    assert (status, calls) == (200, 1)


def test_url_and_header_limits() -> None:
    assert answer_of(request("GET", "/" + "a" * 200))[:1] == (414,)
    big = request("GET", "/", headers={"X-Big": "v" * 400})
    status, body, closed, _ = answer_of(big)
    assert (status, closed) == (431, True) and "300 bytes" in body["error"]
    many = request("GET", "/", headers={f"X-{i}": "1" for i in range(10)})
    status, body, _, _ = answer_of(many)
    assert status == 431 and "more than 5 header fields" in body["error"]
    assert answer_of(request("GET", "/", headers={"X-1": "1"}))[0] == 200


def test_a_header_arriving_in_pieces_is_refused_as_it_arrives() -> None:
    """httptools hands a header field over only once it is whole: the connection counts the head's
    bytes itself, so a 64 MiB header costs the server a few pieces, not 64 MiB (and its loop)."""
    app = Counting()
    c = Client(app)
    c.conn = HttpConnection(app, set(), SMALL)
    c.conn.connection_made(c.transport)
    c.send(b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: ")
    sent = 0
    while not c.transport.data:
        c.send(b"v" * 100)
        sent += 100
        assert sent < 10_000, "never refused"
    limit = SMALL.max_url + SMALL.max_header_bytes + 4 * SMALL.max_headers + 8192
    assert limit < sent <= limit + 100  # the piece that went past the limit was refused
    [a] = parse_answers(bytes(c.transport.data))
    assert a.status == 431 and c.transport.closed and app.calls == 0
    c.send(b"v" * 100 + b"\r\n\r\n")  # what still comes is never read, never answered again
    assert len(parse_answers(bytes(c.transport.data))) == 1


def test_connections_over_the_limit_get_503() -> None:
    conns: set[HttpConnection] = set()
    app = Counting()
    limits = HttpLimits(max_connections=1)
    first = Client(app)
    first.conn = HttpConnection(app, conns, limits)
    first.conn.connection_made(first.transport)
    second = Client(app)
    second.conn = HttpConnection(app, conns, limits)
    second.conn.connection_made(second.transport)
    [a] = parse_answers(bytes(second.transport.data))
    assert a.status == 503 and second.transport.closed and not first.transport.closed


def test_slow_headers_get_408_and_idle_connections_close() -> None:
    app = Counting()
    slow = Client(app)
    slow.conn = HttpConnection(app, set(), SMALL)
    slow.conn.connection_made(slow.transport)
    slow.send(b"GET / HTTP/1.1\r\nHost: x\r\n")  # the headers never end
    t0 = slow.conn.last_io
    slow.conn.sweep(t0 + 4)
    assert not slow.transport.closed
    slow.conn.sweep(t0 + 6)
    [a] = parse_answers(bytes(slow.transport.data))
    assert a.status == 408 and slow.transport.closed

    idle = Client(app)
    idle.conn = HttpConnection(app, set(), SMALL)
    idle.conn.connection_made(idle.transport)
    idle.send(request("GET", "/"))  # answered at once: the connection is idle afterwards
    idle.conn.sweep(idle.conn.last_io + 59)
    assert not idle.transport.closed
    idle.conn.sweep(idle.conn.last_io + 61)
    assert idle.transport.closed


def test_a_connection_waiting_for_its_answer_is_not_idle() -> None:
    held: list[Responder] = []
    c = Client(lambda req, resp: held.append(resp))
    c.conn = HttpConnection(c.conn._app, set(), SMALL)
    c.conn.connection_made(c.transport)
    c.send(request("GET", "/"))
    c.conn.sweep(c.conn.last_io + 3600)  # a model may take its time
    assert not c.transport.closed


def test_inflate_in_pieces() -> None:
    data = bytes(range(256)) * 20_000  # 5 MB: five pieces of output
    assert bounded_inflate(gzip.compress(data), "gzip", len(data)) == (data, True)
    with pytest.raises(TooLarge):
        bounded_inflate(gzip.compress(data), "gzip", len(data) - 1)
    assert bounded_inflate(zlib.compress(b""), "deflate", 0) == (b"", True)
    packed = gzip.compress(data)
    cut = packed[: len(packed) // 2]
    out, ended = bounded_inflate(cut, "gzip", len(data))
    assert not ended and data.startswith(out) and out


def test_inflate_is_bounded_and_says_why() -> None:
    bomb = gzip.compress(bytes(10_000_000))
    with pytest.raises(
        InvalidArgumentError, match="Decompressed data size exceeds the maximum allowed value of 1000 bytes"
    ):
        inflate(bomb, "gzip", 1000)
    assert inflate(gzip.compress(b"abc"), "gzip", 1000) == b"abc"
    assert inflate(zlib.compress(b"abc"), "deflate", 3) == b"abc"
    with pytest.raises(InvalidArgumentError, match="ends early"):
        inflate(gzip.compress(b"abcdef" * 100)[:-10], "gzip", 1000)
    with pytest.raises(InvalidArgumentError, match="failed to decompress the request body"):
        inflate(b"not gzip", "gzip", 1000)
    with pytest.raises(UnsupportedError, match="Unsupported compression type"):
        inflate(b"x", "br", 1000)


def run_app(core: Any, *raw: bytes, app: HttpApp | None = None) -> list[tuple[int, Any]]:
    async def main() -> list[tuple[int, Any]]:
        c = Client(app or HttpApp(core))
        for r in raw:
            c.send(r)
        deadline = time.monotonic() + 30
        answers = await c.answers()
        while len(answers) < len(raw):  # a large body inflates on a worker thread
            assert time.monotonic() < deadline, f"{len(answers)} of {len(raw)} answers after 30 s"
            await asyncio.sleep(0)
            answers = await c.answers()
        return [(a.status, json.loads(a.body)) for a in answers]

    return asyncio.run(main())


def test_a_compression_bomb_on_infer_is_refused_and_the_app_serves_on(core: Any) -> None:
    bomb = gzip.compress(bytes(50_000_000))  # about 50 KB, over the inline limit: inflated on a thread
    bomb += gzip.compress(bytes(100_000))  # a second member keeps it over the inline size
    app = HttpApp(core, max_input_size=1 << 20)
    ok = json.dumps({"inputs": [{"name": "INPUT0", "shape": [1], "datatype": "FP32", "data": [1]}]}).encode()
    answers = run_app(
        core,
        request("POST", "/v2/models/identity_fp32/infer", bomb + bytes(70_000), {"Content-Encoding": "gzip"}),
        request("POST", "/v2/models/identity_fp32/infer", ok),
        app=app,
    )
    assert answers[0][0] == 400 and "Decompressed data size exceeds" in answers[0][1]["error"]
    assert answers[1][0] == 200


def test_header_length_of_many_digits(core: Any) -> None:
    [(status, body)] = run_app(
        core,
        request(
            "POST",
            "/v2/models/identity_fp32/infer",
            b"{}",
            {"Inference-Header-Content-Length": "9" * 5000},
        ),
    )
    assert status == 400 and body["error"].startswith("inference header size should be in range (0, 2)")


def test_json_data_nested_too_deep(core: Any) -> None:
    data = "[" * 1000 + "1" + "]" * 1000
    body = f'{{"inputs":[{{"name":"INPUT0","shape":[1],"datatype":"FP32","data":{data}}}]}}'.encode()
    [(status, doc)] = run_app(core, request("POST", "/v2/models/identity_fp32/infer", body))
    assert (status, doc) == (400, {"error": "JSON nesting depth exceeds maximum allowed limit (100)"})


ADD_SUB = """
name: "add_sub"
backend: "python"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] }, { name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
"""


def test_a_zero_batch_dimension_with_data_is_refused_before_the_model(make_core: Any) -> None:
    fake = make_core(ADD_SUB)
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT0",
                    "shape": [1, 16],
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": 64},
                },
                {
                    "name": "INPUT1",
                    "shape": [0, 16],
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": 64},
                },
            ]
        }
    ).encode()
    body = header + struct.pack("<16f", *range(16)) * 2
    [(status, doc)] = run_app(
        fake,
        request(
            "POST", "/v2/models/add_sub/infer", body, {"Inference-Header-Content-Length": str(len(header))}
        ),
    )
    assert status == 400 and "shape [0,16]" in doc["error"] and "64 bytes were sent" in doc["error"]
    assert fake.requests == []


def test_chunked_with_a_content_length_is_read_chunked_then_closed() -> None:
    """python-requests sends both for a generator body (qa/L0_http test_content_encoding_chunked_manually)."""
    bodies: list[bytes] = []

    def app(req: HttpRequest, resp: Responder) -> None:
        bodies.append(req.body)
        resp.send(200, b"{}")

    c = Client(app)
    c.conn = HttpConnection(app, set(), SMALL)
    c.conn.connection_made(c.transport)
    c.send(
        b"POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
    )
    [a] = parse_answers(bytes(c.transport.data))
    assert (a.status, bodies) == (200, [b"abc"])
    assert c.transport.closed  # nothing framed the other way may follow on this connection
