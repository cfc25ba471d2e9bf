"""HttpServer while the server drains: the listener closed, the open connections served on (a
sequence's next request comes on one); then ``wind_down``: each answer says ``Connection: close``
and an idle connection is closed only after its grace."""

from __future__ import annotations

import asyncio

from inferd.frontends.http.protocol import HttpRequest, Responder
from inferd.frontends.http.server import HttpServer


def _answer(req: HttpRequest, resp: Responder) -> None:
    resp.send(200, b"{}")


async def _exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bytes:
    writer.write(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
    await writer.drain()
    return await reader.readuntil(b"\r\n\r\n{}")


def test_open_connections_are_served_until_wound_down_and_idle_ones_keep_a_grace() -> None:
    async def main() -> None:
        server = HttpServer(_answer, "127.0.0.1", 0)
        await server.start()
        busy = await asyncio.open_connection("127.0.0.1", server.port)
        idle = await asyncio.open_connection("127.0.0.1", server.port)
        for c in (busy, idle):
            assert b"Connection: close" not in await _exchange(*c)
        server.stop_listening()
        try:
            await asyncio.open_connection("127.0.0.1", server.port)
            raise AssertionError("a new connection was accepted")
        except OSError:
            pass
        # draining, a sequence live: the open connections serve on, kept alive
        assert b"Connection: close" not in await _exchange(*busy)
        assert server.wind_down(60.0) == 2  # nothing needs them now: idle ones get their grace
        assert not idle[0].at_eof()
        answer = await _exchange(*busy)  # answered, told to go elsewhere, and closed
        assert b"Connection: close" in answer and await busy[0].read() == b""
        assert server.wind_down(0.0) == 0  # the idle one, past its grace
        assert await idle[0].read() == b""
        await server.stop()
        for _, writer in (busy, idle):
            writer.close()

    asyncio.run(main())
