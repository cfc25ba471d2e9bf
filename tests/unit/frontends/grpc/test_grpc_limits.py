"""The lean gRPC server's limits: concurrent streams, header blocks, message sizes (also inflated),
grpc-timeout, keepalive PINGs, the client preface, connections. Timeouts are driven through
``sweep(now)`` and the deadline callback: nothing sleeps."""

from __future__ import annotations

import asyncio
import gzip
import struct

import h2.events
import h2.settings
from test_grpc_h2 import FakeServicer, Peer, frames, run

from inferd.frontends.grpc._pb import pb
from inferd.frontends.grpc.h2server import GrpcConnection, _Handlers, parse_timeout
from inferd.frontends.grpc.h2wire import PREFACE, frame, length_prefixed

SLOW = length_prefixed(pb.ModelMetadataRequest(name="slow").SerializeToString())


def goaway_code(data: bytes) -> int | None:
    for ftype, _, _, payload in frames(data):
        if ftype == 7:
            return int(struct.unpack(">II", payload[:8])[1])
    return None


def test_settings_advertise_the_limits() -> None:
    async def main() -> None:
        p = Peer(FakeServicer(grpc_max_concurrent_streams=3, grpc_max_header_list_size=2000))
        events = await p.pump()
        [changed] = [e for e in events if isinstance(e, h2.events.RemoteSettingsChanged)]
        values = {k: v.new_value for k, v in changed.changed_settings.items()}
        assert values[h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS] == 3
        assert values[h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE] == 2000

    run(main())


def test_streams_over_the_limit_are_refused() -> None:
    async def main() -> None:
        servicer = FakeServicer(grpc_max_concurrent_streams=2)
        p = Peer(servicer)
        await p.pump()
        sids = [p.call("ModelMetadata", SLOW) for _ in range(2)]
        await p.pump()
        assert all(sid in p.conn.streams for sid in sids)
        # a client library queues a third call; a client that ignores SETTINGS is refused
        block = p.h2.encoder.encode(
            [
                (":method", "POST"),
                (":scheme", "http"),
                (":path", "/inference.GRPCInferenceService/ServerLive"),
            ]
        )
        p.conn.data_received(frame(1, 0x4 | 0x1, 5, block))
        await asyncio.sleep(0)
        assert (3, 0, 5, b"\x00\x00\x00\x07") in frames(p.transport.take())  # RST_STREAM REFUSED_STREAM
        assert 5 not in p.conn.streams
        servicer.release.set()
        await p.pump()
        assert all(p.stream(sid)[2] == {"grpc-status": "0"} for sid in sids)

    run(main())


def test_an_endless_header_block_ends_the_connection_without_being_buffered() -> None:
    async def main() -> None:
        p = Peer(FakeServicer(grpc_max_header_list_size=1000))
        await p.pump()
        p.conn.data_received(frame(1, 0, 1, b"\x82" * 500))  # HEADERS without END_HEADERS
        for _ in range(10):
            p.conn.data_received(frame(9, 0, 1, b"\x82" * 500))  # CONTINUATION, and more
        await asyncio.sleep(0)
        assert goaway_code(p.transport.take()) == 0xB  # ENHANCE_YOUR_CALM
        assert p.transport.closed
        assert p.conn._headers_size <= 1500

    run(main())


def test_a_message_over_the_limit_is_refused_before_it_is_buffered() -> None:
    async def main() -> None:
        p = Peer(FakeServicer(grpc_max_message_size=1000), settings={})
        await p.pump()
        sid = p.call("ServerLive", b"", end=False)
        p.h2.send_data(sid, b"\x00" + struct.pack(">I", 5000) + b"a" * 1200, end_stream=False)
        await p.pump()
        trailers = p.stream(sid)[2]
        assert trailers is not None and trailers["grpc-status"] == "8"  # RESOURCE_EXHAUSTED
        assert "Received message larger than max" in trailers["grpc-message"]
        assert sid not in p.conn.streams
        # refused from its length prefix alone: nothing of it is buffered
        sid = p.call("ServerLive", b"", end=False)
        p.h2.send_data(sid, b"\x00" + struct.pack(">I", 100_000) + b"a" * 10, end_stream=False)
        await p.pump()
        trailers = p.stream(sid)[2]
        assert (
            trailers is not None
            and trailers["grpc-message"] == "Received message larger than max (100000 vs. 1000)"
        )

    run(main())


def test_a_compressed_message_that_inflates_past_the_limit() -> None:
    async def main() -> None:
        p = Peer(FakeServicer(grpc_max_message_size=1000))
        await p.pump()
        bomb = gzip.compress(bytes(10_000_000))
        sid = p.call("ServerLive", b"\x01" + struct.pack(">I", len(bomb)) + bomb[:0], end=False)
        p.h2.send_data(sid, b"\x01" + struct.pack(">I", len(bomb)) + bomb, end_stream=True)
        await p.pump()
        trailers = p.stream(sid)[2]
        assert trailers is not None and trailers["grpc-status"] == "8"

    run(main())


def test_grpc_timeout_ends_the_call_with_deadline_exceeded() -> None:
    assert parse_timeout("100m") == 0.1 and parse_timeout("2S") == 2.0 and parse_timeout("1H") == 3600.0
    assert parse_timeout("x") is None and parse_timeout("123456789S") is None

    async def main() -> None:
        p = Peer()
        await p.pump()
        sid = p.call("ModelMetadata", SLOW, extra=[("grpc-timeout", "1000S")])
        await p.pump()
        st = p.conn.streams[sid]
        assert st.timer is not None and st.task is not None
        task = st.task
        p.conn._deadline(st)  # what the loop calls when the second thousand is over
        await p.pump()
        trailers = p.stream(sid)[2]
        assert trailers == {"grpc-status": "4", "grpc-message": "Deadline Exceeded"}
        assert task.cancelled()
        done = p.call("ServerLive", length_prefixed(b""), extra=[("grpc-timeout", "5S")])
        await p.pump()
        assert p.stream(done)[2] == {"grpc-status": "0"}  # answered: its timer went with it

    run(main())


def test_keepalive_pings_and_a_silent_peer() -> None:
    async def main() -> None:
        p = Peer(FakeServicer(grpc_keepalive_time=10_000, grpc_keepalive_timeout=5_000))
        await p.pump()
        t = p.conn.last_io
        p.conn.sweep(t + 9)
        await asyncio.sleep(0)
        assert not [f for f in frames(p.transport.take()) if f[0] == 6]
        p.conn.sweep(t + 11)
        await asyncio.sleep(0)
        [ping] = [f for f in frames(p.transport.take()) if f[0] == 6]
        assert ping[1] == 0  # a PING, not an ACK
        p.conn.data_received(frame(6, 1, 0, ping[3]))  # the client answers
        p.conn.sweep(p.conn.last_io + 5)
        assert not p.transport.closed
        p.conn.sweep(p.conn.last_io + 11)  # another PING, never answered
        p.conn.sweep(p.conn.last_io + 17)
        await asyncio.sleep(0)
        assert goaway_code(p.transport.take()) == 0xB and p.transport.closed

    run(main())


def test_a_connection_that_sends_no_preface_is_closed() -> None:
    async def main() -> None:
        from test_grpc_h2 import FakeTransport

        conn = GrpcConnection(_Handlers(FakeServicer(http_header_timeout_secs=5)), set())
        transport = FakeTransport()
        conn.connection_made(transport)
        conn.data_received(PREFACE[:10])
        conn.sweep(conn.last_io + 4)
        assert not transport.closed
        conn.sweep(conn.last_io + 6)
        assert transport.closed

    run(main())


def test_connections_over_the_limit_are_sent_away() -> None:
    async def main() -> None:
        from test_grpc_h2 import FakeTransport

        handlers = _Handlers(FakeServicer(max_connections=1))
        conns: set[GrpcConnection] = set()
        first, second = GrpcConnection(handlers, conns), GrpcConnection(handlers, conns)
        t1, t2 = FakeTransport(), FakeTransport()
        first.connection_made(t1)
        second.connection_made(t2)
        await asyncio.sleep(0)
        assert goaway_code(t2.take()) == 0xB and t2.closed and not t1.closed

    run(main())
