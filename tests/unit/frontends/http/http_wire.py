"""An in-memory HTTP/1.1 client for HttpConnection: bytes in, parsed answers out (no sockets)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from inferd.frontends.http.protocol import App, HttpConnection


class Transport:
    """What HttpConnection writes to, kept in memory; ``pause_reading`` and ``close`` recorded."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.closed = False
        self.paused = False

    def write(self, data: bytes) -> None:
        self.data += data

    def writelines(self, parts: list[bytes]) -> None:
        for p in parts:
            self.data += p

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes


def parse_answers(data: bytes) -> list[Answer]:
    """Every whole answer in ``data`` (Content-Length or chunked bodies)."""
    out = []
    while data:
        head, sep, rest = data.partition(b"\r\n\r\n")
        if not sep:
            break
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        if status == 100:
            data = rest
            continue
        if headers.get("transfer-encoding") == "chunked":
            body = b""
            while True:
                size_line, _, rest = rest.partition(b"\r\n")
                n = int(size_line, 16)
                body += rest[:n]
                rest = rest[n + 2 :]
                if n == 0:
                    break
        else:
            n = int(headers.get("content-length", "0"))
            body, rest = rest[:n], rest[n:]
        out.append(Answer(status, headers, body))
        data = rest
    return out


class Client:
    """One connection to ``app``: ``send`` raw request bytes, ``answers`` after the loop ran."""

    def __init__(self, app: App) -> None:
        self.transport = Transport()
        self.conn = HttpConnection(app, set())
        self.conn.connection_made(self.transport)  # type: ignore[arg-type]

    def send(self, raw: bytes) -> None:
        self.conn.data_received(raw)

    async def answers(self, rounds: int = 5) -> list[Answer]:
        for _ in range(rounds):
            await asyncio.sleep(0)
        return parse_answers(bytes(self.transport.data))


def request(method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: x", f"Content-Length: {len(body)}"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body
