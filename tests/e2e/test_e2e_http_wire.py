"""What clients cannot send: raw sockets, http.client and curl against inferd.

Compressed and chunked bodies, raw binary requests, pipelining, 100-continue, HEAD, garbage and
malformed requests; after each misbehaving request a good one must still succeed.
"""

from __future__ import annotations

import gzip
import http.client
import json
import socket
import struct
import subprocess
import time
import zlib
from pathlib import Path

import numpy as np
import pytest
from conftest import InferdProcess

pytestmark = pytest.mark.timeout(60)

GOOD = {"inputs": [{"name": "INPUT0", "shape": [2], "datatype": "FP32", "data": [1, 2]}]}
GOOD_BODY = json.dumps(GOOD).encode()
GOOD_ANSWER = (
    b'{"model_name":"identity_fp32","model_version":"1","outputs":'
    b'[{"name":"OUTPUT0","datatype":"FP32","shape":[2],"data":[1.0,2.0]}]}'
)


def _infer_request(body: bytes = GOOD_BODY, extra: bytes = b"", close: bool = False) -> bytes:
    return (
        b"POST /v2/models/identity_fp32/infer HTTP/1.1\r\nHost: x\r\n"
        + f"Content-Length: {len(body)}\r\n".encode()
        + extra
        + (b"Connection: close\r\n" if close else b"")
        + b"\r\n"
        + body
    )


def _read_responses(
    sock: socket.socket, count: int, timeout: float = 10.0
) -> list[tuple[int, dict[str, str], bytes]]:
    """Read ``count`` responses (Content-Length framed) from ``sock``."""
    sock.settimeout(timeout)
    buf = b""
    out: list[tuple[int, dict[str, str], bytes]] = []
    while len(out) < count:
        while b"\r\n\r\n" not in buf:
            chunk = sock.recv(65536)
            if not chunk:
                raise AssertionError(f"connection closed after {len(out)} responses; pending {buf!r}")
            buf += chunk
        head, _, buf = buf.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        length = int(headers.get("content-length", "0"))
        while len(buf) < length:
            chunk = sock.recv(65536)
            if not chunk:
                raise AssertionError("connection closed inside a body")
            buf += chunk
        out.append((status, headers, buf[:length]))
        buf = buf[length:]
    return out


def _connect(server: InferdProcess) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=10)


# -- compressed bodies -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("encoding", "compress"),
    [("gzip", gzip.compress), ("deflate", zlib.compress), ("identity", bytes)],
)
def test_compressed_request_body(server: InferdProcess, encoding: str, compress: object) -> None:
    body = compress(GOOD_BODY)  # type: ignore[operator]
    r = server.infer("identity_fp32", body, {"Content-Encoding": encoding})
    assert (r.status, r.body) == (200, GOOD_ANSWER)


def test_compressed_binary_request(server: InferdProcess) -> None:
    head = (
        b'{"inputs":[{"name":"INPUT0","shape":[3],"datatype":"FP32","parameters":{"binary_data_size":12}}]}'
    )
    body = head + np.array([1, 2, 3], np.float32).tobytes()
    r = server.infer(
        "identity_fp32",
        gzip.compress(body),
        {"Content-Encoding": "gzip", "Inference-Header-Content-Length": str(len(head))},
    )
    assert r.status == 200, r.body
    assert r.json()["outputs"][0]["data"] == [1.0, 2.0, 3.0]


@pytest.mark.parametrize(("accept", "decompress"), [("gzip", gzip.decompress), ("deflate", zlib.decompress)])
def test_compressed_response(server: InferdProcess, accept: str, decompress: object) -> None:
    r = server.infer("identity_fp32", GOOD, {"Accept-Encoding": accept})
    assert r.status == 200
    assert (r.content_type, r.headers["content-encoding"]) == ("application/json", accept)
    assert decompress(r.body) == GOOD_ANSWER  # type: ignore[operator]


def test_compressed_binary_response(server: InferdProcess) -> None:
    doc = dict(GOOD, parameters={"binary_data_output": True})
    r = server.infer("identity_fp32", doc, {"Accept-Encoding": "gzip"})
    assert (r.status, r.content_type, r.headers["content-encoding"]) == (
        200,
        "application/octet-stream",
        "gzip",
    )
    plain = gzip.decompress(r.body)
    hlen = int(r.headers["inference-header-content-length"])  # of the uncompressed body
    assert json.loads(plain[:hlen])["outputs"][0]["parameters"] == {"binary_data_size": 8}
    assert plain[hlen:] == np.array([1, 2], np.float32).tobytes()


def test_unsupported_and_broken_compression(server: InferdProcess) -> None:
    r = server.infer("identity_fp32", GOOD_BODY, {"Content-Encoding": "br"})
    assert (r.status, r.content_type, r.body) == (
        501,
        "text/plain",
        b'{"error":"Unsupported compression type"}',
    )
    server.assert_serving()
    r = server.infer("identity_fp32", b"\x1f\x8bnot really gzip", {"Content-Encoding": "gzip"})
    assert r.status in (200, 400), r.body  # the reference reads a broken body as empty; inferd says 400
    server.assert_serving()


def test_curl_compressed(server: InferdProcess) -> None:
    out = subprocess.run(
        [
            *("curl", "-s", "--compressed", "-X", "POST", "--data-binary", GOOD_BODY.decode()),
            *("-w", "\n%{http_code}", f"{server.base_url}/v2/models/identity_fp32/infer"),
        ],
        capture_output=True,
        timeout=30,
        check=True,
    ).stdout
    assert out == GOOD_ANSWER + b"\n200"


# -- chunked bodies, pipelining, keep-alive --------------------------------------------------
def test_chunked_request_body(server: InferdProcess) -> None:
    chunks = b"".join(
        b"%x\r\n%s\r\n" % (len(GOOD_BODY[i : i + 7]), GOOD_BODY[i : i + 7])
        for i in range(0, len(GOOD_BODY), 7)
    )
    with _connect(server) as s:
        s.sendall(
            b"POST /v2/models/identity_fp32/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
            + chunks
            + b"0\r\n\r\n"
        )
        ((status, _, body),) = _read_responses(s, 1)
    assert (status, body) == (200, GOOD_ANSWER)


def test_chunked_request_sent_slowly(server: InferdProcess) -> None:
    """Chunks that arrive in separate packets, the header split as well."""
    with _connect(server) as s:
        s.sendall(b"POST /v2/models/identity_fp32/infer HTTP/1.1\r\nHost: x\r\nTransfer-")
        time.sleep(0.02)
        s.sendall(b"Encoding: chunked\r\n\r\n")
        for i in range(0, len(GOOD_BODY), 20):
            part = GOOD_BODY[i : i + 20]
            s.sendall(b"%x\r\n%s\r\n" % (len(part), part))
            time.sleep(0.005)
        s.sendall(b"0\r\n\r\n")
        ((status, _, body),) = _read_responses(s, 1)
    assert (status, body) == (200, GOOD_ANSWER)


def test_http_client_chunked(server: InferdProcess) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        conn.request(
            "POST",
            "/v2/models/identity_fp32/infer",
            body=iter([GOOD_BODY[:10], GOOD_BODY[10:]]),
            encode_chunked=True,
            headers={"Transfer-Encoding": "chunked"},
        )
        r = conn.getresponse()
        assert (r.status, r.read()) == (200, GOOD_ANSWER)
    finally:
        conn.close()


def test_pipelined_requests_answer_in_order(server: InferdProcess) -> None:
    """Several requests in one write; answers come back in request order on the same connection."""
    slow = json.dumps(
        {"inputs": [{"name": "SLEEP_MS", "shape": [1], "datatype": "INT32", "data": [150]}]}
    ).encode()
    pipeline = (
        b"POST /v2/models/parallel_sleep/infer HTTP/1.1\r\nHost: x\r\n"
        + f"Content-Length: {len(slow)}\r\n\r\n".encode()
        + slow
        + b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n"
        + b"GET /v2/models/nope HTTP/1.1\r\nHost: x\r\n\r\n"
        + _infer_request()
        + b"GET /v2/nothing HTTP/1.1\r\nHost: x\r\n\r\n"
        + _infer_request(close=True)
    )
    with _connect(server) as s:
        s.sendall(pipeline)
        answers = _read_responses(s, 6)
        s.settimeout(5)
        assert s.recv(1) == b""  # Connection: close honoured after the last answer
    assert [a[0] for a in answers] == [200, 200, 404, 200, 404, 200]
    assert b"INSTANCE" in answers[0][2]
    assert answers[2][2] == b'{"error":"Request for unknown model: \'nope\' is not found"}'
    assert answers[3][2] == GOOD_ANSWER and answers[5][2] == GOOD_ANSWER
    assert answers[5][1].get("connection") == "close"


def test_keep_alive_many_requests_one_connection(server: InferdProcess) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        for i in range(50):
            doc = {"id": str(i), **GOOD}
            conn.request("POST", "/v2/models/identity_fp32/infer", body=json.dumps(doc))
            r = conn.getresponse()
            assert r.status == 200 and json.loads(r.read())["id"] == str(i)
    finally:
        conn.close()


def test_request_split_across_packets(server: InferdProcess) -> None:
    req = _infer_request()
    with _connect(server) as s:
        for i in range(0, len(req), 13):
            s.sendall(req[i : i + 13])
            time.sleep(0.001)
        ((status, _, body),) = _read_responses(s, 1)
    assert (status, body) == (200, GOOD_ANSWER)


# -- 100-continue (curl) ---------------------------------------------------------------------
def test_curl_expect_100_continue(server: InferdProcess, tmp_path: Path) -> None:
    body = json.dumps(
        {"inputs": [{"name": "INPUT0", "shape": [400], "datatype": "FP32", "data": [0.5] * 400}]}
    )
    assert len(body) > 1024
    path = tmp_path / "body.json"
    path.write_text(body)
    r = subprocess.run(
        [
            *("curl", "-sv", "-H", "Expect: 100-continue", "--data-binary", f"@{path}"),
            *("-w", "\n%{http_code}", f"{server.base_url}/v2/models/identity_fp32/infer"),
        ],
        capture_output=True,
        timeout=30,
        check=True,
    )
    assert "< HTTP/1.1 100 Continue" in r.stderr.decode()
    text, _, code = r.stdout.decode().rpartition("\n")
    assert code == "200"
    assert json.loads(text)["outputs"][0]["data"] == [0.5] * 400


def test_curl_large_raw_binary_body(server: InferdProcess, tmp_path: Path) -> None:
    """A body over 1 MiB (curl then sends Expect: 100-continue by itself) as a raw binary request."""
    x = np.arange(300_000, dtype=np.float32)
    path = tmp_path / "raw.bin"
    path.write_bytes(x.tobytes())
    out = tmp_path / "out.bin"
    r = subprocess.run(
        [
            *("curl", "-sv", "-H", "Inference-Header-Content-Length: 0", "--data-binary", f"@{path}"),
            *("-o", str(out), "-D", str(tmp_path / "headers.txt")),
            f"{server.base_url}/v2/models/identity_fp32/infer",
        ],
        capture_output=True,
        timeout=30,
        check=True,
    )
    assert "< HTTP/1.1 100 Continue" in r.stderr.decode()
    headers = (tmp_path / "headers.txt").read_text().lower()
    assert "200 ok" in headers and "content-type: application/octet-stream" in headers
    data = out.read_bytes()
    hlen = int(headers.split("inference-header-content-length:")[1].split()[0])
    head = json.loads(data[:hlen])
    assert head["outputs"][0]["shape"] == [300_000]
    assert data[hlen:] == x.tobytes()


# -- raw binary requests (Inference-Header-Content-Length: 0) ---------------------------------
def test_raw_binary_request(server: InferdProcess) -> None:
    x = np.array([1.5, -2.0, 3.25], np.float32)
    r = server.infer("identity_fp32", x.tobytes(), {"Inference-Header-Content-Length": "0"})
    assert (r.status, r.content_type) == (200, "application/octet-stream")
    hlen = int(r.headers["inference-header-content-length"])
    assert json.loads(r.body[:hlen]) == {
        "model_name": "identity_fp32",
        "model_version": "1",
        "outputs": [
            {"name": "OUTPUT0", "datatype": "FP32", "shape": [3], "parameters": {"binary_data_size": 12}}
        ],
    }
    assert r.body[hlen:] == x.tobytes()


def test_raw_binary_request_to_a_batching_model(server: InferdProcess) -> None:
    x = np.array([1, 3, 2, 0], np.float32)
    r = server.infer("classifier", x.tobytes(), {"Inference-Header-Content-Length": "0"})
    assert r.status == 200
    hlen = int(r.headers["inference-header-content-length"])
    assert json.loads(r.body[:hlen])["outputs"][0]["shape"] == [1, 4]
    assert r.body[hlen:] == x.tobytes()


def test_raw_binary_request_errors(server: InferdProcess) -> None:
    r = server.infer("add_sub", np.zeros(16, np.float32).tobytes(), {"Inference-Header-Content-Length": "0"})
    assert (r.status, r.error) == (
        400,
        "[request id: <id_unknown>] Raw request must only have 1 input (found 1) to be deduced but got 2 inputs "
        "in 'add_sub' model configuration",
    )
    r = server.infer("identity_fp32", b"\x00" * 5, {"Inference-Header-Content-Length": "0"})
    assert (r.status, r.error) == (
        400,
        "[request id: <id_unknown>] input byte size mismatch for input 'raw_input' for model 'identity_fp32'. "
        "Expected 4, got 5",
    )
    server.assert_serving()


# -- binary JSON+tail requests built by hand ---------------------------------------------------
def test_binary_request_two_inputs_and_bytes(server: InferdProcess) -> None:
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    head = json.dumps(
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
                    "shape": [1, 16],
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": 64},
                },
            ],
            "outputs": [{"name": "OUTPUT1", "parameters": {"binary_data": True}}, {"name": "OUTPUT0"}],
        }
    ).encode()
    r = server.infer(
        "add_sub", head + a.tobytes() + a.tobytes(), {"Inference-Header-Content-Length": str(len(head))}
    )
    assert (r.status, r.content_type) == (200, "application/octet-stream")
    hlen = int(r.headers["inference-header-content-length"])
    doc = json.loads(r.body[:hlen])
    assert [o["name"] for o in doc["outputs"]] == ["OUTPUT0", "OUTPUT1"]
    assert doc["outputs"][0]["data"] == (a * 2).reshape(-1).tolist()
    assert r.body[hlen:] == np.zeros(16, np.float32).tobytes()
    strings = [b"a", b"", b"\xff\x00bin"]
    raw = b"".join(struct.pack("<I", len(x)) + x for x in strings)
    head = json.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT0",
                    "shape": [3],
                    "datatype": "BYTES",
                    "parameters": {"binary_data_size": len(raw)},
                }
            ],
            "parameters": {"binary_data_output": True},
        }
    ).encode()
    r = server.infer("identity_bytes", head + raw, {"Inference-Header-Content-Length": str(len(head))})
    hlen = int(r.headers["inference-header-content-length"])
    assert r.body[hlen:] == raw


# -- malformed requests, then a good one ------------------------------------------------------
@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"{",
        b"not json",
        b"[]",
        b"null",
        b'{"inputs":[{}]}',
        b"\x00\x01\x02",
        b'{"inputs":' * 2000,
        b"{}" * 5,
    ],
)
def test_malformed_json_keeps_serving(server: InferdProcess, body: bytes) -> None:
    r = server.infer("identity_fp32", body)
    assert r.status in (200, 400, 500), r.body
    assert r.status == 200 or set(r.json()) == {"error"}
    server.assert_serving()


@pytest.mark.parametrize("value", ["abc", "-1", "99999", "", "1e3", "4294967296", "99999999999999999999999"])
def test_bad_header_lengths_keep_serving(server: InferdProcess, value: str) -> None:
    r = server.infer("identity_fp32", GOOD_BODY, {"Inference-Header-Content-Length": value})
    assert r.status in (400, 500) and "error" in r.json()
    server.assert_serving()


def test_header_length_is_read_like_atoi(server: InferdProcess) -> None:
    r = server.infer(
        "identity_fp32", GOOD_BODY, {"Inference-Header-Content-Length": str(len(GOOD_BODY)) + "xyz"}
    )
    assert (r.status, r.body) == (200, GOOD_ANSWER)


@pytest.mark.parametrize(
    "raw",
    [
        b"GARBAGE\r\n\r\n",
        b"GET / HTTP/9.9\r\n\r\n",
        b"POST /v2/models/identity_fp32/infer HTTP/1.1\r\nContent-Length: -5\r\n\r\n",
        b"POST /v2/models/identity_fp32/infer HTTP/1.1\r\nContent-Length: 10\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"GET /v2 HTTP/1.1\r\nBad Header Line\r\n\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",  # a TLS hello
    ],
)
def test_malformed_http_keeps_serving(server: InferdProcess, raw: bytes) -> None:
    with _connect(server) as s:
        s.sendall(raw)
        s.settimeout(5)
        try:
            data = s.recv(65536)
        except (ConnectionResetError, TimeoutError):
            data = b""
    assert data == b"" or data.startswith(b"HTTP/1.1 4")
    server.assert_serving()


def test_client_disconnects_mid_request(server: InferdProcess) -> None:
    with _connect(server) as s:
        s.sendall(b'POST /v2/models/identity_fp32/infer HTTP/1.1\r\nContent-Length: 1000\r\n\r\n{"inp')
    with _connect(server) as s:  # and while its answer is being computed
        slow = json.dumps(
            {"inputs": [{"name": "SLEEP_MS", "shape": [1], "datatype": "INT32", "data": [100]}]}
        )
        s.sendall(
            f"POST /v2/models/parallel_sleep/infer HTTP/1.1\r\nContent-Length: {len(slow)}\r\n\r\n{slow}".encode()
        )
    time.sleep(0.2)
    server.assert_serving()


# -- router answers ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("method", "path", "status", "content_type"),
    [
        ("POST", "/", 404, "text/plain"),  # GET / is the status page (test_e2e_status_page)
        ("GET", "/v2/models", 404, "text/plain"),
        ("GET", "/v2/models/", 404, "text/plain"),
        ("GET", "/v2/models/add_sub/versions/abc", 404, "text/plain"),
        ("POST", "/v2/unknown", 404, "text/plain"),
        ("GET", "/v2/models/add_sub/infer", 405, "text/plain"),
        ("PUT", "/v2/health/live", 405, "text/plain"),
        ("DELETE", "/v2/models/add_sub/ready", 405, "text/plain"),
        ("POST", "/v2", 405, "application/json"),
        ("POST", "/v2/models/add_sub", 405, "application/json"),
        ("POST", "/v2/models/add_sub/config", 405, "application/json"),
        ("GET", "/v2/repository/index", 405, "application/json"),
    ],
)
def test_router_404_405(
    server: InferdProcess, method: str, path: str, status: int, content_type: str
) -> None:
    r = server.request(method, path, b"" if method != "GET" else None)
    body = {404: b'{"error":"Not Found"}', 405: b'{"error":"Method Not Allowed"}'}[status]
    assert (r.status, r.content_type, r.body) == (status, content_type, body)


def test_head_is_not_allowed(server: InferdProcess) -> None:
    r = subprocess.run(
        ["curl", "-s", "-I", "-o", "/dev/null", "-w", "%{http_code}", f"{server.base_url}/v2/health/live"],
        capture_output=True,
        timeout=30,
        check=True,
    )
    assert r.stdout == b"405"
    server.assert_serving()


def test_query_strings_are_ignored(server: InferdProcess) -> None:
    assert server.request("GET", "/v2/health/live?verbose=1").status == 200
    r = server.request("POST", "/v2/models/identity_fp32/infer?x=y", GOOD)
    assert (r.status, r.body) == (200, GOOD_ANSWER)


def test_http_1_0_request(server: InferdProcess) -> None:
    with _connect(server) as s:
        s.sendall(b"GET /v2/health/live HTTP/1.0\r\n\r\n")
        ((status, _, body),) = _read_responses(s, 1)
        s.settimeout(5)
        assert s.recv(1) == b""  # HTTP/1.0 without keep-alive: closed after the answer
    assert (status, body) == (200, b"")
