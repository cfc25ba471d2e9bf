"""Raw HTTP/2 abuse of the gRPC port over a plain socket: bad prefaces, random frames, CONTINUATION
floods, too many streams, huge and undecodable header blocks, PING floods and rapid resets.

Every scenario opens its own connection and reads what the server answers (GOAWAY and its code,
RST_STREAM codes) until it closes or goes quiet. The server must survive all of them and answer
health checks after; the floods must be cut at the configured limits.
"""

from __future__ import annotations

import contextlib
import random
import socket
import struct
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from hpack import Encoder

from reliability.common import Server

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = (
    range(10)
)
END_STREAM, ACK, END_HEADERS, PADDED = 0x1, 0x1, 0x4, 0x8
ERRORS = {0: "NO_ERROR", 1: "PROTOCOL_ERROR", 2: "INTERNAL_ERROR", 3: "FLOW_CONTROL_ERROR", 4: "SETTINGS_TIMEOUT",
          5: "STREAM_CLOSED", 6: "FRAME_SIZE_ERROR", 7: "REFUSED_STREAM", 8: "CANCEL", 9: "COMPRESSION_ERROR",
          10: "CONNECT_ERROR", 11: "ENHANCE_YOUR_CALM", 12: "INADEQUATE_SECURITY", 13: "HTTP_1_1_REQUIRED"}  # fmt: skip
SCENARIOS = {
    "bad_preface": 15,
    "random_frames": 45,
    "hpack_garbage": 10,
    "huge_header_block": 5,
    "continuation_flood": 5,
    "too_many_streams": 5,
    "ping_flood": 5,
    "rapid_reset": 5,
    "settings_abuse": 5,
}


def frame(ftype: int, flags: int, sid: int, payload: bytes = b"") -> bytes:
    return (
        struct.pack(">I", len(payload))[1:]
        + bytes([ftype, flags])
        + struct.pack(">I", sid & 0x7FFFFFFF)
        + payload
    )


def grpc_headers(
    path: str = "/inference.GRPCInferenceService/ServerLive", extra: list[tuple[str, str]] | None = None
) -> bytes:
    enc = Encoder()
    return enc.encode(
        [(":method", "POST"), (":scheme", "http"), (":path", path), (":authority", "127.0.0.1"),
         ("content-type", "application/grpc"), ("te", "trailers"), *(extra or [])]
    )  # fmt: skip


def _hpack_int(value: int, prefix_bits: int, first: int = 0) -> bytes:
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first | value])
    out = bytearray([first | limit])
    value -= limit
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def hpack_literal(name: str, value: str) -> bytes:
    """A literal header field without indexing and without Huffman (hpack's encoder Huffman-codes in
    Python: minutes for a 1 MiB value)."""
    n, v = name.encode(), value.encode()
    return b"\x00" + _hpack_int(len(n), 7) + n + _hpack_int(len(v), 7) + v


@dataclass
class Outcome:
    """What the server did on one connection."""

    goaway: list[str] = field(default_factory=list)
    rst: Counter[str] = field(default_factory=Counter)
    frames: Counter[str] = field(default_factory=Counter)
    closed: bool = False
    sent_bytes: int = 0
    send_error: str = ""


class H2Socket:
    def __init__(self, port: int, timeout: float = 5.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.out = Outcome()
        self._buf = b""

    def send(self, data: bytes) -> bool:
        try:
            self.sock.sendall(data)
            self.out.sent_bytes += len(data)
            return True
        except OSError as e:
            self.out.send_error = type(e).__name__
            return False

    def read(self, quiet: float = 0.3, limit: float = 5.0) -> Outcome:
        """Frames until the server closes, is quiet for ``quiet`` s, or ``limit`` s passed."""
        end = time.monotonic() + limit
        self.sock.settimeout(quiet)
        while time.monotonic() < end:
            try:
                data = self.sock.recv(1 << 16)
            except TimeoutError:
                break
            except OSError:
                self.out.closed = True
                break
            if not data:
                self.out.closed = True
                break
            self._buf += data
            self._parse()
        return self.out

    def _parse(self) -> None:
        buf = self._buf
        while len(buf) >= 9:
            n = int.from_bytes(buf[:3], "big")
            if len(buf) < 9 + n:
                break
            ftype, payload = buf[3], buf[9 : 9 + n]
            self.out.frames[str(ftype)] += 1
            if ftype == GOAWAY and len(payload) >= 8:
                self.out.goaway.append(ERRORS.get(int.from_bytes(payload[4:8], "big"), "?"))
            elif ftype == RST_STREAM and len(payload) >= 4:
                self.out.rst[ERRORS.get(int.from_bytes(payload[:4], "big"), "?")] += 1
            buf = buf[9 + n :]
        self._buf = buf

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


def _open(port: int) -> H2Socket:
    s = H2Socket(port)
    s.send(PREFACE + frame(SETTINGS, 0, 0))
    return s


# -- scenarios --------------------------------------------------------------------------------------
def bad_preface(port: int, rng: random.Random) -> dict[str, Any]:
    s = H2Socket(port)
    choice = rng.randrange(5)
    if choice == 0:
        s.send(rng.randbytes(rng.randint(1, 64)))
    elif choice == 1:
        s.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    elif choice == 2:
        s.send(PREFACE[: rng.randint(1, len(PREFACE) - 1)])
        s.sock.shutdown(socket.SHUT_WR)
    elif choice == 3:
        s.send(PREFACE + frame(HEADERS, END_HEADERS | END_STREAM, 1, grpc_headers()))  # no SETTINGS first
    else:
        s.send(PREFACE + rng.randbytes(rng.randint(1, 40)))
    out = s.read()
    s.close()
    return {"closed": out.closed, "goaway": out.goaway}


def random_frames(port: int, rng: random.Random) -> dict[str, Any]:
    s = _open(port)
    for _ in range(rng.randint(1, 10)):
        ftype = rng.randrange(12)
        flags = rng.randrange(256)
        sid = rng.choice([0, 1, 2, 3, 5, rng.randrange(2**31)])
        payload = rng.randbytes(rng.choice([0, 1, 4, 5, 6, 8, 9, rng.randint(0, 200)]))
        if not s.send(frame(ftype, flags, sid, payload)):
            break
    if rng.random() < 0.3 and not s.out.send_error:  # a length that lies about what follows
        s.send(
            struct.pack(">I", rng.randrange(1 << 24))[1:]
            + bytes([rng.randrange(10), 0])
            + b"\0\0\0\1"
            + b"x" * 10
        )
    out = s.read()
    s.close()
    return {"closed": out.closed, "goaway": out.goaway, "rst": dict(out.rst)}


def hpack_garbage(port: int, rng: random.Random) -> dict[str, Any]:
    s = _open(port)
    s.send(frame(HEADERS, END_HEADERS | END_STREAM, 1, rng.randbytes(rng.randint(1, 300))))
    out = s.read()
    s.close()
    return {"closed": out.closed, "goaway": out.goaway, "rst": dict(out.rst)}


def huge_header_block(port: int, rng: random.Random, size: int = 1 << 20) -> dict[str, Any]:
    """One header of ``size`` bytes, in a HEADERS frame and CONTINUATIONs of 16 KiB."""
    block = grpc_headers() + hpack_literal("x-big", "v" * size)
    chunks = [block[i : i + 16384] for i in range(0, len(block), 16384)]
    s = _open(port)
    s.send(frame(HEADERS, END_HEADERS if len(chunks) == 1 else 0, 1, chunks[0]))
    for i, c in enumerate(chunks[1:], 1):
        if not s.send(frame(CONTINUATION, END_HEADERS if i == len(chunks) - 1 else 0, 1, c)):
            break
    out = s.read()
    s.close()
    return {"closed": out.closed, "goaway": out.goaway, "sent": out.sent_bytes}


def continuation_flood(port: int, rng: random.Random | None, total: int = 32 << 20) -> dict[str, Any]:
    """HEADERS without END_HEADERS, then CONTINUATION frames of 16 KiB, never ending, up to ``total``."""
    s = _open(port)
    s.send(frame(HEADERS, 0, 1, grpc_headers()))
    chunk = frame(CONTINUATION, 0, 1, b"\x00" * 16384)  # literal headers would be decoded: zeros are not
    batch = chunk * 16
    while s.out.sent_bytes < total:
        if not s.send(batch):
            break
    out = s.read()
    s.close()
    return {"closed": out.closed or bool(out.send_error), "goaway": out.goaway, "sent": out.sent_bytes}


def too_many_streams(port: int, rng: random.Random | None, streams: int = 1000) -> dict[str, Any]:
    """``streams`` calls opened at once (HEADERS without END_STREAM), none finished."""
    s = _open(port)
    block = grpc_headers("/inference.GRPCInferenceService/ModelInfer")
    frames = b"".join(frame(HEADERS, END_HEADERS, 1 + 2 * i, block) for i in range(streams))
    s.send(frames)
    # quiet 3 s: on loaded shared cores the refusals can come more than a second after the
    # server's SETTINGS (make fuzz under load 10 read 0 refusals twice with 1 s; rerun: all)
    out = s.read(quiet=3.0, limit=15.0)
    s.close()
    return {"closed": out.closed, "goaway": out.goaway, "rst": dict(out.rst), "streams": streams}


def ping_flood(port: int, rng: random.Random, pings: int = 10000) -> dict[str, Any]:
    s = _open(port)
    s.send(b"".join(frame(PING, 0, 0, struct.pack(">Q", i)) for i in range(pings)))
    out = s.read(quiet=1.0)
    s.close()
    return {"closed": out.closed, "goaway": out.goaway, "ping_acks": out.frames.get(str(PING), 0)}


def rapid_reset(port: int, rng: random.Random, streams: int = 5000) -> dict[str, Any]:
    """HEADERS then RST_STREAM at once, ``streams`` times (CVE-2023-44487)."""
    s = _open(port)
    block = grpc_headers("/inference.GRPCInferenceService/ServerMetadata")
    body = frame(DATA, END_STREAM, 0, b"\0\0\0\0\0")
    parts = []
    for i in range(streams):
        sid = 1 + 2 * i
        parts.append(frame(HEADERS, END_HEADERS, sid, block) + body[:5] + struct.pack(">I", sid) + body[9:])
        parts.append(frame(RST_STREAM, 0, sid, struct.pack(">I", 8)))
    s.send(b"".join(parts))
    out = s.read(quiet=1.0)
    s.close()
    return {"closed": out.closed, "goaway": out.goaway, "rst": dict(out.rst)}


def settings_abuse(port: int, rng: random.Random) -> dict[str, Any]:
    s = _open(port)
    choice = rng.randrange(4)
    if choice == 0:  # a flood of SETTINGS, each to be acknowledged
        s.send(frame(SETTINGS, 0, 0, struct.pack(">HI", 4, 65535)) * 5000)
    elif choice == 1:  # an initial window over the maximum
        s.send(frame(SETTINGS, 0, 0, struct.pack(">HI", 4, 2**31)))
    elif choice == 2:  # a window update that overflows the connection window
        s.send(frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", 2**31 - 1)) * 2)
    else:  # a max frame size out of range, then a large frame
        s.send(frame(SETTINGS, 0, 0, struct.pack(">HI", 5, 1 << 25)) + frame(DATA, 0, 1, b"x" * 70000))
    out = s.read()
    s.close()
    return {"closed": out.closed, "goaway": out.goaway}


FUNCS = {
    "bad_preface": bad_preface,
    "random_frames": random_frames,
    "hpack_garbage": hpack_garbage,
    "huge_header_block": huge_header_block,
    "continuation_flood": continuation_flood,
    "too_many_streams": too_many_streams,
    "ping_flood": ping_flood,
    "rapid_reset": rapid_reset,
    "settings_abuse": settings_abuse,
}


@dataclass
class H2Result:
    sent: Counter[str] = field(default_factory=Counter)
    outcomes: dict[str, Counter[str]] = field(default_factory=dict)
    floods: dict[str, Any] = field(default_factory=dict)  # the last result of each flood
    unexpected: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def total(self) -> int:
        return sum(self.sent.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "sent": dict(self.sent),
            "total": self.total,
            "outcomes": {k: dict(v) for k, v in self.outcomes.items()},
            "floods": self.floods,
            "unexpected": self.unexpected[:50],
            "seconds": round(self.seconds, 1),
        }


def run(
    server: Server,
    count: int,
    seconds: float,
    seed: int,
    max_streams: int = 256,
    max_header_list: int = 16384,
    flood_bytes: int = 32 << 20,
    streams: int = 1000,
) -> H2Result:
    """``count`` scenarios drawn by weight (each flood at least once), the server checked after each."""
    rng = random.Random(seed)
    result = H2Result()
    t0 = time.monotonic()
    names = [k for k, w in SCENARIOS.items() for _ in range(w)]
    order = list(SCENARIOS) + [rng.choice(names) for _ in range(max(0, count - len(SCENARIOS)))]
    for i, name in enumerate(order[:count]):
        if time.monotonic() - t0 > seconds or not server.alive():
            break
        kwargs: dict[str, Any] = {}
        if name == "continuation_flood":
            kwargs["total"] = flood_bytes
        elif name == "too_many_streams":
            kwargs["streams"] = streams
        try:
            got = FUNCS[name](server.grpc_port, rng, **kwargs)
        except OSError as e:
            got = {"error": type(e).__name__}
        result.sent[name] += 1
        key = "closed" if got.get("closed") else "open"
        if got.get("goaway"):
            key += " GOAWAY " + ",".join(sorted(set(got["goaway"])))
        if got.get("error"):
            key = "client error " + got["error"]
        result.outcomes.setdefault(name, Counter())[key] += 1
        if name in (
            "continuation_flood",
            "too_many_streams",
            "huge_header_block",
            "ping_flood",
            "rapid_reset",
        ):
            result.floods[name] = got
            why = _flood_failed(name, got, max_streams, max_header_list, flood_bytes)
            if why:
                result.unexpected.append({"scenario": name, "why": why, "outcome": got})
        if i % 10 == 0 and not server.ready(5.0):
            result.unexpected.append({"scenario": name, "why": "the server was not ready after it"})
    result.seconds = time.monotonic() - t0
    return result


def _flood_failed(
    name: str, got: dict[str, Any], max_streams: int, max_header_list: int, flood: int
) -> str | None:
    if name == "continuation_flood" and got.get("sent", 0) >= flood and not got.get("closed"):
        return f"{got.get('sent', 0):,} bytes of CONTINUATION accepted without the connection being closed"
    if name == "too_many_streams":
        refused = got.get("rst", {}).get("REFUSED_STREAM", 0)
        if got["streams"] > max_streams and refused < got["streams"] - max_streams and not got.get("goaway"):
            return f"{refused} streams refused of {got['streams']} (max concurrent {max_streams})"
    if name == "huge_header_block" and not got.get("goaway") and not got.get("closed"):
        return "a header block over the limit was not refused"
    return None
