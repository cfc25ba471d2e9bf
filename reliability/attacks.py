"""The attacks of issue 10, each against the running server while a health check runs every 100 ms
and its RSS is sampled: a gzip bomb (HTTP and gRPC), a huge body (with Content-Length and chunked),
a huge URL, a huge header, too many headers, slowloris, idle connections by the thousand, a model
whose execute sleeps, a huge gRPC message, a CONTINUATION flood and too many streams; and issue 25's
cases, from their own modules: hostile model names in repository loads, a 100,000-prompt body, the
status page's access, the wire's edges (attacks_safety.py), clients that do not read (attacks_flow.py),
a crashing model, SIGTERM under way, a hung initialize and a leaking worker (attacks_lifecycle.py);
and issue 42's: what a repository load may ask for (attacks_upload.py), hostile tree-model uploads
(attacks_fil.py), answers held for clients that do not read (attacks_memory.py), crashes by
spellings the source reading misses, runaway thread models, uploaded models past their limits and in
a crash loop (attacks_contain.py).

Each attack reports what the server answered against what it should answer, the health check's
worst latency and the server's peak RSS over its idle RSS against the configured limit.
"""

from __future__ import annotations

import contextlib
import json
import select
import socket
import struct
import threading
import time
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import grpc
from hpack import Decoder
from tritonclient.grpc import service_pb2

from reliability import (
    attacks_contain,
    attacks_fil,
    attacks_flow,
    attacks_lifecycle,
    attacks_memory,
    attacks_safety,
    attacks_upload,
    fuzz_h2,
)
from reliability.common import HealthWatch, MiB, NoAnswer, RawHttp, Server, http_request, raise_fd_limit

HEALTH_GOAL_MS = 50.0


@dataclass
class AttackConfig:
    body_limit: int = 64 * MiB  # the server's --http-max-input-size
    grpc_limit: int = 64 * MiB  # the server's --grpc-max-message-size
    header_timeout_s: float = 30.0  # the server's --http-header-timeout-secs
    max_connections: int = 10000  # the server's --max-connections
    max_streams: int = 256  # the server's --grpc-max-concurrent-streams
    bomb_inflated: int = 1 << 30
    big_body: int = 500 * 1000 * 1000
    big_url: int = 64 * MiB
    big_header: int = 64 * MiB
    header_count: int = 200_000
    slowloris: int = 100
    idle_connections: int = 19_000
    idle_hold_s: float = 5.0
    slow_model_ms: int = 60_000
    slow_timeout_s: float = 2.0
    flood_bytes: int = 32 << 20
    streams: int = 20_000
    # issue 25's cases (attacks_flow.py, attacks_lifecycle.py): their modules' defaults
    flow_hold_s: float = attacks_flow.FLOW_DEFAULTS["flow_hold_s"]
    stream_hold_s: float = attacks_flow.FLOW_DEFAULTS["stream_hold_s"]
    flow_floats: int = attacks_flow.FLOW_DEFAULTS["flow_floats"]
    flow_batch: int = attacks_flow.FLOW_DEFAULTS["flow_batch"]
    stream_responses: int = attacks_flow.FLOW_DEFAULTS["stream_responses"]
    stream_response_bytes: int = attacks_flow.FLOW_DEFAULTS["stream_response_bytes"]
    crash_goal_s: float = attacks_lifecycle.LIFECYCLE_DEFAULTS["crash_goal_s"]
    exit_timeout_s: int = attacks_lifecycle.LIFECYCLE_DEFAULTS["exit_timeout_s"]
    sequence_length: int = attacks_lifecycle.LIFECYCLE_DEFAULTS["sequence_length"]
    keep_alive_clients: int = attacks_lifecycle.LIFECYCLE_DEFAULTS["keep_alive_clients"]
    leak_requests: int = attacks_lifecycle.LIFECYCLE_DEFAULTS["leak_requests"]
    memory_limit: int = attacks_lifecycle.LIFECYCLE_DEFAULTS["memory_limit"]
    # issue 42's cases (attacks_memory.py)
    unsent_limit: int = attacks_memory.MEMORY_DEFAULTS["unsent_limit"]  # the server's --max-unsent-bytes
    memory_calls: int = attacks_memory.MEMORY_DEFAULTS["memory_calls"]
    memory_answer_bytes: int = attacks_memory.MEMORY_DEFAULTS["memory_answer_bytes"]
    memory_connections: int = attacks_memory.MEMORY_DEFAULTS["memory_connections"]
    memory_pipelined: int = attacks_memory.MEMORY_DEFAULTS["memory_pipelined"]
    memory_http_answer_bytes: int = attacks_memory.MEMORY_DEFAULTS["memory_http_answer_bytes"]
    # issue 42's cases (attacks_contain.py)
    crash_loop_s: float = attacks_contain.CONTAIN_DEFAULTS["crash_loop_s"]


@dataclass
class AttackResult:
    name: str
    what: str
    expected: str
    got: str
    ok: bool  # the server answered as it should
    limit: int  # the configured limit the RSS goal is measured against
    idle_rss: int = 0
    peak_rss: int = 0
    health_max_ms: float = 0.0
    health_checks: int = 0
    health_failures: int = 0
    seconds: float = 0.0
    notes: str = ""

    @property
    def over_idle(self) -> int:
        return max(0, self.peak_rss - self.idle_rss)

    @property
    def rss_ok(self) -> bool:
        return self.over_idle < 2 * self.limit

    @property
    def health_ok(self) -> bool:
        return self.health_max_ms < HEALTH_GOAL_MS and self.health_failures == 0

    def to_json(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "over_idle": self.over_idle,
            "rss_ok": self.rss_ok,
            "health_ok": self.health_ok,
        }


# -- helpers ---------------------------------------------------------------------------------------
def _stream_request(port: int, head: bytes, body_chunks: Callable[[], Any], timeout: float = 60.0) -> str:
    """Send ``head`` then the chunks from ``body_chunks()`` on one connection while reading the
    answer on this thread; the answer's status line and body (or why none came)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    sent = [0]
    error: list[str] = []

    def writer() -> None:
        try:
            sock.sendall(head)
            sent[0] += len(head)
            for chunk in body_chunks():
                sock.sendall(chunk)
                sent[0] += len(chunk)
        except OSError as e:
            error.append(type(e).__name__)

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    data = b""
    try:
        while True:
            d = sock.recv(1 << 16)
            if not d:
                break
            data += d
            if b"\r\n\r\n" in data:
                head_part, _, rest = data.partition(b"\r\n\r\n")
                length = 0
                for line in head_part.split(b"\r\n")[1:]:
                    k, _, v = line.partition(b":")
                    if k.strip().lower() == b"content-length":
                        length = int(v.strip())
                if len(rest) >= length:
                    break
    except OSError as e:
        error.append(f"recv {type(e).__name__}")
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()
    t.join(30)
    if not data:
        return f"no answer ({', '.join(error) or 'closed'}; {sent[0]:,} bytes sent)"
    status_line = data.split(b"\r\n", 1)[0].decode("latin-1")
    body = data.partition(b"\r\n\r\n")[2][:200].decode("latin-1")
    return f"{status_line.removeprefix('HTTP/1.1 ')} {body} ({sent[0]:,} bytes sent)"


def _repeat(chunk: bytes, total: int) -> Callable[[], Any]:
    def gen() -> Any:
        left = total
        while left > 0:
            n = min(left, len(chunk))
            yield chunk if n == len(chunk) else chunk[:n]
            left -= n

    return gen


def gzip_bomb(inflated: int, cache: Path | None = None) -> bytes:
    """gzip of ``inflated`` zero bytes (1 GiB: about 1 MB), cached in ``cache``."""
    if cache is not None and cache.exists():
        return cache.read_bytes()
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    zeros = bytes(MiB)
    parts = []
    left = inflated
    while left > 0:
        n = min(left, MiB)
        parts.append(c.compress(zeros[:n]))
        left -= n
    parts.append(c.flush())
    data = b"".join(parts)
    if cache is not None:
        cache.write_bytes(data)
    return data


# -- the attacks ------------------------------------------------------------------------------------
def http_gzip_bomb(server: Server, cfg: AttackConfig, bomb: bytes) -> tuple[str, bool, str]:
    head = http_request("POST", "/v2/models/identity_fp32/infer", b"", [("Content-Encoding", "gzip"), ("Content-Type", "application/json")], length=False)  # fmt: skip
    head = head[:-2] + f"Content-Length: {len(bomb)}\r\n\r\n".encode()
    got = _stream_request(server.http_port, head, lambda: iter([bomb]))
    return got, got.startswith("400 ") and "exceeds" in got, ""


def http_big_body(server: Server, cfg: AttackConfig, chunked: bool) -> tuple[str, bool, str]:
    chunk = b"x" * MiB
    if chunked:
        head = (
            b"POST /v2/models/identity_fp32/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        framed = b"%x\r\n%s\r\n" % (len(chunk), chunk)
        n = cfg.big_body // len(chunk)
        got = _stream_request(server.http_port, head, _repeat(framed, n * len(framed)))
    else:
        head = f"POST /v2/models/identity_fp32/infer HTTP/1.1\r\nHost: x\r\nContent-Length: {cfg.big_body}\r\n\r\n".encode()
        got = _stream_request(server.http_port, head, _repeat(chunk, cfg.big_body))
    return got, got.startswith("413 "), ""


def http_big_url(server: Server, cfg: AttackConfig) -> tuple[str, bool, str]:
    def chunks() -> Any:
        yield from _repeat(b"a" * MiB, cfg.big_url)()
        yield b" HTTP/1.1\r\nHost: x\r\n\r\n"

    got = _stream_request(server.http_port, b"GET /v2/models/", chunks)
    return got, got.startswith("414 "), ""


def http_big_header(server: Server, cfg: AttackConfig) -> tuple[str, bool, str]:
    def chunks() -> Any:
        yield from _repeat(b"v" * MiB, cfg.big_header)()
        yield b"\r\n\r\n"

    got = _stream_request(server.http_port, b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\nX-Big: ", chunks)
    return got, got.startswith("431 "), ""


def http_many_headers(server: Server, cfg: AttackConfig) -> tuple[str, bool, str]:
    def chunks() -> Any:
        batch = 1000
        for start in range(0, cfg.header_count, batch):
            yield b"".join(b"X-%d: 1\r\n" % i for i in range(start, min(cfg.header_count, start + batch)))
        yield b"\r\n"

    got = _stream_request(server.http_port, b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n", chunks)
    return got, got.startswith("431 "), ""


def slowloris(server: Server, cfg: AttackConfig) -> tuple[str, bool, str]:
    """``cfg.slowloris`` connections sending one header byte a second; each should get 408 and be
    closed within the header timeout (plus the once-a-second sweep)."""
    socks = []
    opened = time.monotonic()
    for _ in range(cfg.slowloris):
        s = socket.create_connection(("127.0.0.1", server.http_port), timeout=5)
        s.sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        s.setblocking(False)
        socks.append(s)
    answers: dict[socket.socket, tuple[str, float]] = {}
    limit = cfg.header_timeout_s + 10
    while len(answers) < len(socks) and time.monotonic() - opened < limit:
        for s in socks:
            if s not in answers:
                with contextlib.suppress(OSError):
                    s.send(b"a")
        end = time.monotonic() + 1.0
        while time.monotonic() < end and len(answers) < len(socks):
            waiting = [s for s in socks if s not in answers]
            readable, _, _ = select.select(waiting, [], [], max(0.0, end - time.monotonic()))
            for s in readable:
                try:
                    data = s.recv(4096)
                except OSError:
                    data = b""
                status = data.split(b" ", 2)[1].decode() if data.startswith(b"HTTP/1.1 ") else "closed"
                answers[s] = (status, time.monotonic() - opened)
    for s in socks:
        s.close()
    statuses = Counter(a[0] for a in answers.values())
    left_open = len(socks) - len(answers)
    latest = max((a[1] for a in answers.values()), default=0.0)
    got = ", ".join(f"{n} x {st}" for st, n in statuses.items()) + (
        f", {left_open} still open" if left_open else ""
    )
    ok = statuses.get("408", 0) == len(socks) and latest <= cfg.header_timeout_s + 2.5
    return f"{got}; the last closed after {latest:.1f} s", ok, f"header timeout {cfg.header_timeout_s:g} s"


def idle_connections(server: Server, cfg: AttackConfig) -> tuple[str, bool, str]:
    """``cfg.idle_connections`` connections that send nothing; the ones over --max-connections
    should get 503 and be closed, the others held (until the idle timeout)."""
    limit = raise_fd_limit(cfg.idle_connections + 200)
    want = min(cfg.idle_connections, limit - 150)
    socks = []
    refused = Counter()
    for _ in range(want):
        try:
            s = socket.create_connection(("127.0.0.1", server.http_port), timeout=5)
            socks.append(s)
        except OSError as e:
            refused[type(e).__name__] += 1
    time.sleep(cfg.idle_hold_s)
    answers = Counter()
    for s in socks:
        s.setblocking(False)
        try:
            data = s.recv(4096)
            answers["503" if b" 503 " in data[:20] else ("closed" if not data else "other")] += 1
        except BlockingIOError:
            answers["held open"] += 1
        except OSError:
            answers["reset"] += 1
    for s in socks:
        s.close()
    over = max(0, len(socks) - cfg.max_connections + 1)  # the health check holds one connection
    got = ", ".join(f"{n:,} {k}" for k, n in answers.items())
    if refused:
        got += ", could not connect: " + ", ".join(f"{n:,} {k}" for k, n in refused.items())
    ok = abs(answers.get("503", 0) - over) <= 2 and not refused
    note = f"{len(socks):,} opened (file limit {limit:,}), --max-connections {cfg.max_connections:,}"
    return got, ok, note


def slow_model(server: Server, cfg: AttackConfig) -> tuple[str, bool, str]:
    """A model whose execute sleeps ``slow_model_ms``: a gRPC call with a deadline, an HTTP request
    without one (the server runs with ``--model-execute-timeout-secs`` ``slow_timeout_s``: the
    execute watchdog answers it 503), and another model meanwhile."""
    out: dict[str, str] = {}
    sleep = cfg.slow_model_ms

    def http_call() -> None:
        doc = {"inputs": [{"name": "SLEEP_MS", "shape": [1], "datatype": "INT32", "data": [sleep]}]}
        t0 = time.monotonic()
        c = RawHttp(server.http_port, timeout=sleep / 1000 + 30)
        try:
            a = c.exchange(http_request("POST", "/v2/models/parallel_sleep/infer", json.dumps(doc).encode()))
            out["http"] = f"HTTP {a.status} after {time.monotonic() - t0:.1f} s"
        except NoAnswer as e:
            out["http"] = f"HTTP no answer ({e.kind}) after {time.monotonic() - t0:.1f} s"
        c.close()

    t = threading.Thread(target=http_call, daemon=True)
    t.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}")
    req = service_pb2.ModelInferRequest(model_name="parallel_sleep")
    req.inputs.add(name="SLEEP_MS", datatype="INT32", shape=[1])
    req.raw_input_contents.append(struct.pack("<i", sleep))
    call = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer", request_serializer=None, response_deserializer=None)  # fmt: skip
    t0 = time.monotonic()
    try:
        call(req.SerializeToString(), timeout=cfg.slow_timeout_s)
        out["grpc"] = f"gRPC OK after {time.monotonic() - t0:.1f} s"
    except grpc.RpcError as e:
        out["grpc"] = f"gRPC {e.code().name} after {time.monotonic() - t0:.1f} s"
    channel.close()
    time.sleep(0.2)
    t1 = time.monotonic()
    other = server.post("/v2/models/identity_fp32/infer", b'{"inputs":[{"name":"INPUT0","shape":[1],"datatype":"FP32","data":[1]}]}')  # fmt: skip
    out["other"] = f"identity_fp32 {other[0]} in {(time.monotonic() - t1) * 1000:.0f} ms"
    t.join(sleep / 1000 + 40)
    grpc_ok = (
        out["grpc"].startswith("gRPC DEADLINE_EXCEEDED")
        and float(out["grpc"].split()[-2]) < cfg.slow_timeout_s + 1
    )
    http_secs = float(out.get("http", "x 999 s").split()[-2])
    http_ok = out.get("http", "").startswith("HTTP 503") and http_secs < cfg.slow_timeout_s + 2
    got = "; ".join(out[k] for k in ("grpc", "http", "other") if k in out)
    note = f"execute sleeps {sleep / 1000:g} s; gRPC deadline and execute watchdog (--model-execute-timeout-secs) {cfg.slow_timeout_s:g} s"
    return got, grpc_ok and http_ok and other[0] == 200, note


def grpc_huge_message(server: Server, cfg: AttackConfig) -> tuple[str, bool, str]:
    size = max(cfg.grpc_limit + MiB, int(cfg.grpc_limit * 1.5))
    channel = grpc.insecure_channel(
        f"127.0.0.1:{server.grpc_port}", options=[("grpc.max_send_message_length", -1)]
    )
    req = service_pb2.ModelInferRequest(model_name="identity_fp32")
    req.inputs.add(name="INPUT0", datatype="FP32", shape=[size // 4])
    req.raw_input_contents.append(bytes(size // 4 * 4))
    payload = req.SerializeToString()
    del req
    call = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer", request_serializer=None, response_deserializer=None)  # fmt: skip
    try:
        call(payload, timeout=60)
        got = "OK"
    except grpc.RpcError as e:
        got = f"{e.code().name}: {(e.details() or '')[:120]}"
    channel.close()
    return got, got.startswith("RESOURCE_EXHAUSTED"), f"a {size / MiB:,.0f} MiB ModelInfer message"


def grpc_gzip_bomb(server: Server, cfg: AttackConfig, bomb: bytes) -> tuple[str, bool, str]:
    """A ModelInfer message of ``bomb`` with the compressed flag and grpc-encoding gzip (raw HTTP/2)."""
    s = fuzz_h2.H2Socket(server.grpc_port, timeout=30)
    s.send(fuzz_h2.PREFACE + fuzz_h2.frame(fuzz_h2.SETTINGS, 0, 0))
    block = fuzz_h2.grpc_headers("/inference.GRPCInferenceService/ModelInfer", [("grpc-encoding", "gzip")])
    message = b"\x01" + len(bomb).to_bytes(4, "big") + bomb
    frames = [fuzz_h2.frame(fuzz_h2.HEADERS, fuzz_h2.END_HEADERS, 1, block)]
    for i in range(0, len(message), 16384):
        last = i + 16384 >= len(message)
        frames.append(
            fuzz_h2.frame(fuzz_h2.DATA, fuzz_h2.END_STREAM if last else 0, 1, message[i : i + 16384])
        )
    s.send(b"".join(frames))
    status = "no grpc-status"
    decoder = Decoder()
    buf = b""
    end = time.monotonic() + 60
    s.sock.settimeout(1.0)
    while time.monotonic() < end:
        try:
            d = s.sock.recv(1 << 16)
        except TimeoutError:
            continue
        except OSError:
            break
        if not d:
            break
        buf += d
        done = False
        while len(buf) >= 9 and len(buf) >= 9 + int.from_bytes(buf[:3], "big"):
            n = int.from_bytes(buf[:3], "big")
            ftype, sid, payload = buf[3], int.from_bytes(buf[5:9], "big"), buf[9 : 9 + n]
            buf = buf[9 + n :]
            if ftype == fuzz_h2.HEADERS and sid == 1:
                headers = dict(decoder.decode(payload))
                if "grpc-status" in headers:
                    status = f"grpc-status {headers['grpc-status']}: {headers.get('grpc-message', '')[:100]}"
                    done = True
            elif ftype == fuzz_h2.GOAWAY:
                status = "GOAWAY"
                done = True
        if done:
            break
    s.close()
    # 8: RESOURCE_EXHAUSTED
    return status, status.startswith("grpc-status 8"), ""


def continuation_flood(server: Server, cfg: AttackConfig) -> tuple[str, bool, str]:
    got = fuzz_h2.continuation_flood(server.grpc_port, None, total=cfg.flood_bytes)
    ok = bool(got["closed"]) and "ENHANCE_YOUR_CALM" in got["goaway"]
    return (
        f"GOAWAY {','.join(got['goaway']) or '-'}, closed: {got['closed']}, {got['sent']:,} bytes sent before",
        ok,
        "",
    )


def too_many_streams(server: Server, cfg: AttackConfig) -> tuple[str, bool, str]:
    got = fuzz_h2.too_many_streams(server.grpc_port, None, streams=cfg.streams)
    refused = got["rst"].get("REFUSED_STREAM", 0)
    ok = refused >= cfg.streams - cfg.max_streams
    return (
        f"{refused:,} of {cfg.streams:,} streams refused (REFUSED_STREAM)",
        ok,
        f"max concurrent streams {cfg.max_streams}",
    )


ATTACKS: dict[str, tuple[str, str, str]] = {
    # name: (what, expected, which limit the RSS goal uses)
    "gzip_bomb": ("1 MB of gzip that inflates to {bomb}, POST /infer", "400 (decompressed size over the limit)", "body"),
    "grpc_gzip_bomb": ("the same bomb as a compressed ModelInfer message", "RESOURCE_EXHAUSTED", "grpc"),
    "big_body_length": ("a {big_body} body with Content-Length", "413 before the body is read", "body"),
    "big_body_chunked": ("a {big_body} chunked body", "413 once past the limit", "body"),
    "big_url": ("a {big_url} URL", "414", "body"),
    "big_header": ("a {big_header} header", "431", "body"),
    "many_headers": ("{header_count} headers", "431", "body"),
    "slowloris": ("{slowloris} connections sending a header byte a second", "408 and close after the header timeout", "body"),
    "idle_connections": ("{idle_connections} idle connections", "503 and close for those over --max-connections", "body"),
    "slow_model": ("a model whose execute sleeps {slow_model_s} s", "DEADLINE_EXCEEDED at the gRPC deadline, 503 from the execute watchdog; other models serve", "body"),
    "grpc_huge_message": ("a ModelInfer message over --grpc-max-message-size", "RESOURCE_EXHAUSTED", "grpc"),
    "continuation_flood": ("HEADERS + {flood} of CONTINUATION frames", "GOAWAY ENHANCE_YOUR_CALM", "grpc"),
    "too_many_streams": ("{streams} streams opened on one connection", "REFUSED_STREAM past the limit", "grpc"),
}  # fmt: skip
#: issue 25's and issue 42's cases: name -> (what, expected, which limit, function), each module's own
ISSUE25_CASES = {
    **attacks_safety.CASES,
    **attacks_flow.CASES,
    **attacks_lifecycle.CASES,
    **attacks_upload.CASES,
    **attacks_fil.CASES,
    **attacks_memory.CASES,
    **attacks_contain.CASES,
}
ATTACKS.update({name: (what, expected, which) for name, (what, expected, which, _f) in ISSUE25_CASES.items()})


def _size(n: int) -> str:
    if n >= 1 << 30 and n % (1 << 30) == 0:
        return f"{n >> 30} GiB"
    if n % MiB == 0:
        return f"{n // MiB} MiB"
    if n % 1_000_000 == 0:
        return f"{n // 1_000_000} MB"
    return f"{n:,} bytes"


def run(
    server: Server, cfg: AttackConfig, names: list[str], workdir: Path, progress: bool = False
) -> list[AttackResult]:
    bomb = b""
    if {"gzip_bomb", "grpc_gzip_bomb"} & set(names):
        bomb = gzip_bomb(cfg.bomb_inflated, workdir / f"bomb-{cfg.bomb_inflated}.gz")
    fmt = {
        "bomb": _size(cfg.bomb_inflated) + f" ({len(bomb) / 1e6:.1f} MB sent)",
        "big_body": _size(cfg.big_body),
        "big_url": _size(cfg.big_url),
        "big_header": _size(cfg.big_header),
        "header_count": f"{cfg.header_count:,}",
        "slowloris": f"{cfg.slowloris:,}",
        "idle_connections": f"{cfg.idle_connections:,}",
        "slow_model_s": f"{cfg.slow_model_ms / 1000:g}",
        "flood": _size(cfg.flood_bytes),
        "streams": f"{cfg.streams:,}",
        "flow_hold_s": f"{cfg.flow_hold_s:g}",
        "stream_hold_s": f"{cfg.stream_hold_s:g}",
        "stream_responses": f"{cfg.stream_responses:,}",
        "stream_response_bytes": _size(cfg.stream_response_bytes),
        "sequence_length": f"{cfg.sequence_length:,}",
        "keep_alive_clients": f"{cfg.keep_alive_clients:,}",
        "leak_requests": f"{cfg.leak_requests:,}",
        "memory_calls": f"{cfg.memory_calls:,}",
        "memory_answer_bytes": _size(cfg.memory_answer_bytes),
        "memory_connections": f"{cfg.memory_connections:,}",
        "memory_pipelined": f"{cfg.memory_pipelined:,}",
        "memory_http_answer_bytes": _size(cfg.memory_http_answer_bytes),
        "crash_loop_s": f"{cfg.crash_loop_s:g}",
    }
    funcs: dict[str, Callable[[], tuple[str, bool, str]]] = {
        "gzip_bomb": lambda: http_gzip_bomb(server, cfg, bomb),
        "grpc_gzip_bomb": lambda: grpc_gzip_bomb(server, cfg, bomb),
        "big_body_length": lambda: http_big_body(server, cfg, False),
        "big_body_chunked": lambda: http_big_body(server, cfg, True),
        "big_url": lambda: http_big_url(server, cfg),
        "big_header": lambda: http_big_header(server, cfg),
        "many_headers": lambda: http_many_headers(server, cfg),
        "slowloris": lambda: slowloris(server, cfg),
        "idle_connections": lambda: idle_connections(server, cfg),
        "slow_model": lambda: slow_model(server, cfg),
        "grpc_huge_message": lambda: grpc_huge_message(server, cfg),
        "continuation_flood": lambda: continuation_flood(server, cfg),
        "too_many_streams": lambda: too_many_streams(server, cfg),
        **{name: (lambda f=case[3]: f(server, cfg)) for name, case in ISSUE25_CASES.items()},
    }
    results = []
    for name in names:
        if not server.alive():
            break
        what, expected, which = ATTACKS[name]
        # "unsent": what the budget lets the server hold, twice --max-unsent-bytes
        limits = {"body": cfg.body_limit, "grpc": cfg.grpc_limit, "unsent": 2 * cfg.unsent_limit}
        limit = limits[which]
        time.sleep(0.5)  # let the previous attack's memory settle into the idle figure
        t0 = time.monotonic()
        with HealthWatch(server) as watch:
            try:
                got, ok, note = funcs[name]()
            except Exception as e:  # the harness's own failure: recorded, the run goes on
                got, ok, note = f"harness error {type(e).__name__}: {e}", False, ""
            time.sleep(0.3)  # a few health checks after the attack's last byte
        r = AttackResult(
            name, what.format(**fmt), expected, got, ok, limit,
            idle_rss=watch.idle_rss, peak_rss=watch.peak_rss, health_max_ms=watch.max_ms,
            health_checks=len(watch.latencies_ms), health_failures=len(watch.failures),
            seconds=time.monotonic() - t0, notes=note,
        )  # fmt: skip
        if watch.failures:
            r.notes = (
                (r.notes + "; " if r.notes else "")
                + "health check failures: "
                + ", ".join(f"{n} x {k}" for k, n in Counter(watch.failures).items())
            )
        results.append(r)
        if progress:
            print(
                f"  attack {name}: {got[:100]} | health max {r.health_max_ms:.1f} ms | "
                f"RSS +{r.over_idle / MiB:.1f} MiB | {'ok' if ok else 'MISS'}",
                flush=True,
            )
    return results
