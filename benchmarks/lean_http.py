#!/usr/bin/env python3
"""A lean binary-HTTP client: the round trip of one model at concurrency 1, with little client cost.

    .venv/bin/python benchmarks/lean_http.py localhost:8000 tiny_mlp --seconds 8

perf_analyzer's own client (libcurl, its worker and stats threads) costs a few hundred
microseconds per request on two shared cores, more than a small model takes to run. To see what
the server adds to the runtime, this client does as little as it can: one keep-alive socket with
TCP_NODELAY, one request built once (the KServe v2 binary extension: a JSON header, then the raw
input bytes; outputs asked for as binary), sent again and again, each answer read to its
Content-Length and its status checked. Inputs are random, of the config's shape with batch 1, as
perf_analyzer sends. Stdlib only (run.py imports it). Prints one JSON line:
``{"model", "p50_us", "p99_us", "count", "infer_per_s", "floor_p50_us"}``; ``floor_p50_us`` is the
same client's round trip to ``GET /v2/health/live`` (HTTP and the loopback, no inference).
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import statistics
import struct
import sys
import time
from typing import Any

#: KServe v2 datatype -> struct format character
_FORMATS = {
    "FP32": "f",
    "FP64": "d",
    "INT64": "q",
    "INT32": "i",
    "INT16": "h",
    "INT8": "b",
    "UINT8": "B",
    "BOOL": "?",
}


class Connection:
    """One keep-alive HTTP/1.1 connection; ``roundtrip`` sends prepared bytes and reads one answer."""

    def __init__(self, host: str, port: int) -> None:
        self.sock = socket.create_connection((host, port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def roundtrip(self, request: bytes) -> tuple[int, bytes]:
        self.sock.sendall(request)
        buf = self.buf
        while (end := buf.find(b"\r\n\r\n")) < 0:
            buf += self._recv()
        head = buf[:end]
        status = int(head[9:12])
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        need = end + 4 + length
        while len(buf) < need:
            buf += self._recv()
        self.buf = buf[need:]
        return status, buf[end + 4 : need]

    def _recv(self) -> bytes:
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        return chunk

    def close(self) -> None:
        self.sock.close()


def http_request(method: str, path: str, host: str, body: bytes = b"", extra: str = "") -> bytes:
    head = f"{method} {path} HTTP/1.1\r\nHost: {host}\r\n{extra}"
    if body or method == "POST":
        head += f"Content-Length: {len(body)}\r\n"
    return (head + "\r\n").encode() + body


def infer_request(config: dict[str, Any], host: str, rng: random.Random) -> bytes:
    """The binary infer request for one batch-1 request of the model whose config is ``config``."""
    batched = int(config.get("max_batch_size", 0)) > 0
    inputs, raw = [], []
    for io in config["input"]:
        dt = io["data_type"].removeprefix("TYPE_")
        if dt not in _FORMATS:
            raise SystemExit(f"lean_http: input {io['name']} of type {dt} is not supported")
        dims = [int(d) if int(d) > 0 else 1 for d in io["dims"]]
        shape = ([1] if batched else []) + dims
        n = 1
        for d in shape:
            n *= d
        fmt = _FORMATS[dt]
        if fmt in "fd":
            values: list[Any] = [rng.random() for _ in range(n)]
        elif fmt == "?":
            values = [rng.random() < 0.5 for _ in range(n)]
        else:
            values = [rng.randrange(2) for _ in range(n)]
        data = struct.pack(f"<{n}{fmt}", *values)
        raw.append(data)
        inputs.append(
            {
                "name": io["name"],
                "shape": shape,
                "datatype": dt,
                "parameters": {"binary_data_size": len(data)},
            }
        )
    outputs = [{"name": o["name"], "parameters": {"binary_data": True}} for o in config["output"]]
    header = json.dumps({"inputs": inputs, "outputs": outputs}).encode()
    return http_request(
        "POST",
        f"/v2/models/{config['name']}/infer",
        host,
        header + b"".join(raw),
        f"Inference-Header-Content-Length: {len(header)}\r\nContent-Type: application/octet-stream\r\n",
    )


def timed(conn: Connection, request: bytes, warmup_s: float, seconds: float) -> list[int]:
    """Round trips of ``request`` for ``seconds`` after ``warmup_s``, in nanoseconds."""
    clock = time.perf_counter_ns
    start_measuring = clock() + int(warmup_s * 1e9)
    stop = start_measuring + int(seconds * 1e9)
    out: list[int] = []
    while True:
        t0 = clock()
        status, body = conn.roundtrip(request)
        t1 = clock()
        if status != 200:
            raise SystemExit(f"lean_http: HTTP {status}: {body[:300]!r}")
        if t1 >= stop:
            return out
        if t1 >= start_measuring:
            out.append(t1 - t0)


def percentile(sorted_ns: list[int], q: float) -> float:
    return sorted_ns[min(len(sorted_ns) - 1, int(len(sorted_ns) * q))] / 1000


def measure(url: str, model: str, seconds: float, warmup_s: float = 1.0) -> dict[str, Any]:
    host, _, port = url.rpartition(":")
    conn = Connection(host or "localhost", int(port))
    try:
        status, body = conn.roundtrip(http_request("GET", f"/v2/models/{model}/config", url))
        if status != 200:
            raise SystemExit(f"lean_http: config of {model}: HTTP {status}: {body[:300]!r}")
        request = infer_request(json.loads(body), url, random.Random(0))
        floor = sorted(timed(conn, http_request("GET", "/v2/health/live", url), 0.2, min(2.0, seconds / 4)))
        lat = sorted(timed(conn, request, warmup_s, seconds))
    finally:
        conn.close()
    return {
        "model": model,
        "count": len(lat),
        "infer_per_s": len(lat) / seconds,
        "p50_us": statistics.median(lat) / 1000 if lat else None,
        "p99_us": percentile(lat, 0.99) if lat else None,
        "floor_p50_us": statistics.median(floor) / 1000 if floor else None,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("url", help="host:port of the HTTP endpoint")
    ap.add_argument("model")
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--warmup", type=float, default=1.0)
    a = ap.parse_args(argv)
    print(json.dumps(measure(a.url, a.model, a.seconds, a.warmup)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
