"""The lean gRPC server's HTTP/2 framing, driven by the ``h2`` package as an independent client.

A fake transport collects what the server writes; a fake servicer answers the unary RPCs and echoes
ModelStreamInfer, so these tests see only the framing: preface and SETTINGS, header blocks,
length-prefixed messages, trailers, flow control, PING, RST_STREAM, GOAWAY.
"""

from __future__ import annotations

import asyncio
import gzip
import struct
from collections.abc import AsyncIterator
from typing import Any, cast

import h2.config
import h2.connection
import h2.events
import h2.settings
import pytest

from inferd.errors import NotFoundError
from inferd.frontends.grpc import h2life
from inferd.frontends.grpc._pb import pb
from inferd.frontends.grpc.h2conn import STREAM_WINDOW
from inferd.frontends.grpc.h2server import GrpcConnection, LeanGrpcServer, _Handlers
from inferd.frontends.grpc.h2wire import PREFACE, frame, hpack_int, length_prefixed, percent_encode
from inferd.frontends.grpc.service import InferenceServicer
from inferd.options import ServerOptions
from inferd.server_config import GrpcConfig

SVC = "/inference.GRPCInferenceService"


class FakeCore:
    def ready(self) -> bool:
        return True


class FakeServicer(InferenceServicer):
    """The real servicer's dispatch and error mapping over a fake core; ServerLive records the
    metadata, ModelMetadata answers big, slow and unknown models, ModelStreamInfer echoes every
    message, then ends OK. The RPCs not overridden fail (the fake core has none of them)."""

    def __init__(self, **options: Any) -> None:
        super().__init__(FakeCore(), GrpcConfig.from_options(ServerOptions(**options)))  # type: ignore[arg-type]
        self.metadata: Any = None
        self.stream_cancelled = False
        self.release = asyncio.Event()

    async def ServerLive(self, request: Any, context: Any) -> Any:
        self.metadata = context.invocation_metadata()
        return pb.ServerLiveResponse(live=True)

    async def ModelMetadata(self, request: Any, context: Any) -> Any:
        if request.name == "big":
            return pb.ModelMetadataResponse(name="x" * 200_000)
        if request.name == "slow":
            await self.release.wait()
            return pb.ModelMetadataResponse(name="slow")
        raise NotFoundError(f"Request for unknown model: '{request.name}' 100% ü")

    async def ModelStreamInfer(self, request_iterator: AsyncIterator[bytes], context: Any) -> None:
        try:
            async for data in request_iterator:
                await context.write(data)
        except asyncio.CancelledError:
            self.stream_cancelled = True
            raise


class FakeTransport:
    def __init__(self) -> None:
        self.data = bytearray()
        self.closed = False
        self.eof = False  # half-closed: FIN after what was written
        self.reading = True  # pause_reading / resume_reading

    def write(self, data: bytes) -> None:
        self.data += data

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed or self.eof

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self.eof = True

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def take(self) -> bytes:
        out = bytes(self.data)
        self.data.clear()
        return out


class Peer:
    """An h2 client wired to one GrpcConnection."""

    def __init__(
        self,
        servicer: FakeServicer | None = None,
        settings: dict[h2.settings.SettingCodes, int] | None = None,
    ) -> None:
        self.servicer = servicer or FakeServicer()
        self.conn = GrpcConnection(_Handlers(self.servicer), set())
        self.transport = FakeTransport()
        self.conn.connection_made(self.transport)  # type: ignore[arg-type]
        self.h2 = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
        )
        self.h2.local_settings = h2.settings.Settings(client=True, initial_values=settings or {})
        self.h2.initiate_connection()
        self.events: list[Any] = []

    async def pump(self, rounds: int = 3) -> list[Any]:
        """Client bytes to the server, server bytes (after its loop iteration) to the client."""
        new: list[Any] = []
        for _ in range(rounds):
            out = self.h2.data_to_send()
            if out:
                self.conn.data_received(out)
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            data = self.transport.take()
            if data:
                new += self.h2.receive_data(data)
        self.events += new
        return new

    def call(
        self, method: str, message: bytes, end: bool = True, extra: list[tuple[str, str]] | None = None
    ) -> int:
        sid: int = self.h2.get_next_available_stream_id()
        self.h2.send_headers(
            sid,
            [
                (":method", "POST"),
                (":scheme", "http"),
                (":path", f"{SVC}/{method}" if not method.startswith("/") else method),
                (":authority", "localhost"),
                ("te", "trailers"),
                ("content-type", "application/grpc"),
                *(extra or []),
            ],
        )
        if message or end:
            self.h2.send_data(sid, message, end_stream=end)
        return sid

    def stream(self, sid: int) -> tuple[dict[str, str], bytes, dict[str, str] | None, bool]:
        """Response headers, body bytes, trailers (None until they came), reset?"""
        headers: dict[str, str] = {}
        body = b""
        trailers: dict[str, str] | None = None
        reset = False
        for e in self.events:
            if getattr(e, "stream_id", None) != sid:
                continue
            if isinstance(
                e, h2.events.ResponseReceived
            ):  # str headers: header_encoding (h2's types say bytes)
                headers = cast("dict[str, str]", dict(e.headers))
            elif isinstance(e, h2.events.DataReceived):
                body += e.data
            elif isinstance(e, h2.events.TrailersReceived):
                trailers = cast("dict[str, str]", dict(e.headers))
            elif isinstance(e, h2.events.StreamReset):
                reset = True
        if trailers is None and headers.get("grpc-status") is not None:  # trailers-only
            trailers = {k: v for k, v in headers.items() if k.startswith("grpc-")}
        return headers, body, trailers, reset


def messages(body: bytes) -> list[bytes]:
    out = []
    while body:
        n = int.from_bytes(body[1:5], "big")
        out.append(body[5 : 5 + n])
        body = body[5 + n :]
    return out


def frames(data: bytes) -> list[tuple[int, int, int, bytes]]:
    """(type, flags, stream id, payload) of every frame in ``data``."""
    out = []
    while data:
        n = int.from_bytes(data[:3], "big")
        out.append((data[3], data[4], int.from_bytes(data[5:9], "big"), data[9 : 9 + n]))
        data = data[9 + n :]
    return out


def run(coro: Any) -> Any:
    return asyncio.run(coro)


# -- pieces --------------------------------------------------------------------------------------------
def test_frame_and_hpack_integers() -> None:
    assert frame(4, 1, 0) == b"\x00\x00\x00\x04\x01\x00\x00\x00\x00"
    assert frame(0, 0, 3, b"ab")[:9] == b"\x00\x00\x02\x00\x00\x00\x00\x00\x03"
    assert hpack_int(10, 5) == b"\x0a"
    assert hpack_int(1337, 5) == b"\x1f\x9a\x0a"  # RFC 7541 C.1.2
    assert hpack_int(31, 4) == b"\x0f\x10"
    assert length_prefixed(b"abc") == b"\x00\x00\x00\x00\x03abc"


def test_percent_encoding() -> None:
    assert percent_encode("plain text: ok") == b"plain text: ok"
    assert percent_encode("100%") == b"100%25"
    assert percent_encode("ü\n") == b"%C3%BC%0A"


# -- connection ----------------------------------------------------------------------------------------
def test_preface_settings_and_window() -> None:
    async def main() -> None:
        p = Peer()
        events = await p.pump()
        settings = [e for e in events if isinstance(e, h2.events.RemoteSettingsChanged)]
        assert (
            settings
            and settings[0].changed_settings[h2.settings.SettingCodes.INITIAL_WINDOW_SIZE].new_value
            == STREAM_WINDOW
        )
        assert any(isinstance(e, h2.events.SettingsAcknowledged) for e in events)
        assert p.h2.outbound_flow_control_window == 2**31 - 1

    run(main())


def test_bad_preface_gets_goaway() -> None:
    async def main() -> None:
        p = Peer()
        p.conn.data_received(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        await asyncio.sleep(0)
        data = p.transport.take()
        assert [f[0] for f in frames(data)] == [4, 8, 7]  # SETTINGS, WINDOW_UPDATE, then GOAWAY
        assert p.transport.closed

    run(main())


def test_ping_is_acknowledged() -> None:
    async def main() -> None:
        p = Peer()
        await p.pump()
        p.h2.ping(b"12345678")
        events = await p.pump()
        assert [e.ping_data for e in events if isinstance(e, h2.events.PingAckReceived)] == [b"12345678"]

    run(main())


# -- unary ---------------------------------------------------------------------------------------------
def test_unary_call_headers_message_trailers() -> None:
    async def main() -> None:
        p = Peer()
        sid = p.call("ServerLive", length_prefixed(b""), extra=[("x-fwd-a", "1")])
        await p.pump()
        headers, body, trailers, reset = p.stream(sid)
        assert headers[":status"] == "200" and headers["content-type"] == "application/grpc"
        assert pb.ServerLiveResponse.FromString(messages(body)[0]).live
        assert trailers == {"grpc-status": "0"}
        assert not reset
        assert ("x-fwd-a", "1") in p.servicer.metadata
        assert not p.conn.streams

    run(main())


def test_input_split_byte_by_byte() -> None:
    async def main() -> None:
        p = Peer()
        sids = [p.call("ServerLive", length_prefixed(b"")) for _ in range(3)]
        for b in p.h2.data_to_send():
            p.conn.data_received(bytes((b,)))
        await p.pump()
        for sid in sids:
            assert p.stream(sid)[2] == {"grpc-status": "0"}

    run(main())


def test_error_is_trailers_only_with_percent_encoded_message() -> None:
    async def main() -> None:
        p = Peer()
        sid = p.call(
            "ModelMetadata", length_prefixed(pb.ModelMetadataRequest(name="nope").SerializeToString())
        )
        await p.pump()
        headers, body, _, _ = p.stream(sid)
        assert body == b""
        assert headers["grpc-status"] == "5"  # NOT_FOUND
        assert headers["grpc-message"] == "Request for unknown model: 'nope' 100%25 %C3%BC"

    run(main())


def test_unparsable_request_and_unknown_method() -> None:
    async def main() -> None:
        p = Peer()
        bad = p.call("ServerLive", length_prefixed(b"\xff"))
        unknown = p.call("NoSuchRpc", length_prefixed(b""))
        missing = p.call("ServerLive", b"")
        await p.pump()
        assert p.stream(bad)[2] == {"grpc-status": "13", "grpc-message": "Unable to parse request"}
        assert p.stream(unknown)[2]["grpc-status"] == "12"  # type: ignore[index]
        assert p.stream(missing)[2]["grpc-status"] == "13"  # type: ignore[index]

    run(main())


def test_health_check() -> None:
    async def main() -> None:
        p = Peer()
        sid = p.call("/grpc.health.v1.Health/Check", length_prefixed(b""))
        await p.pump()
        assert messages(p.stream(sid)[1]) == [b"\x08\x01"]

    run(main())


def test_gzip_request_message() -> None:
    async def main() -> None:
        p = Peer()
        msg = gzip.compress(pb.ModelMetadataRequest(name="nope").SerializeToString())
        sid = p.call(
            "ModelMetadata", b"\x01" + struct.pack(">I", len(msg)) + msg, extra=[("grpc-encoding", "gzip")]
        )
        await p.pump()
        assert p.stream(sid)[2]["grpc-status"] == "5"  # type: ignore[index]

    run(main())


def test_large_response_waits_for_flow_control_and_respects_max_frame() -> None:
    async def main() -> None:
        p = Peer(settings={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 50_000})
        await p.pump()
        sid = p.call(
            "ModelMetadata", length_prefixed(pb.ModelMetadataRequest(name="big").SerializeToString())
        )
        await p.pump()
        _, body, trailers, _ = p.stream(sid)
        assert len(body) == 50_000 and trailers is None  # the stream window is spent
        sizes = [len(e.data) for e in p.events if isinstance(e, h2.events.DataReceived)]
        assert max(sizes) <= 16384
        p.h2.increment_flow_control_window(1 << 20, sid)
        p.h2.increment_flow_control_window(1 << 20)
        await p.pump()
        _, body, trailers, _ = p.stream(sid)
        assert trailers == {"grpc-status": "0"}
        assert pb.ModelMetadataResponse.FromString(messages(body)[0]).name == "x" * 200_000

    run(main())


def test_reset_stream_cancels_the_call() -> None:
    async def main() -> None:
        p = Peer()
        sid = p.call(
            "ModelMetadata", length_prefixed(pb.ModelMetadataRequest(name="slow").SerializeToString())
        )
        await p.pump()
        assert sid in p.conn.streams
        task = p.conn.streams[sid].task
        p.h2.reset_stream(sid)
        await p.pump()
        assert sid not in p.conn.streams
        assert task is not None and task.cancelled()
        p.servicer.release.set()

    run(main())


def test_goaway_in_two_steps_serves_calls_sent_before_the_client_saw_it() -> None:
    async def main() -> None:
        p = Peer()
        meta = length_prefixed(pb.ModelMetadataRequest(name="slow").SerializeToString())
        slow = p.call("ModelMetadata", meta)
        await p.pump()
        p.conn.goaway()
        await asyncio.sleep(0)
        first = frames(p.transport.take())
        # GOAWAY naming the highest stream id (nothing refused yet), and a PING
        assert [f[0] for f in first] == [7, 6]
        assert struct.unpack(">II", first[0][3]) == (0x7FFFFFFF, 0)
        # a call the client sent before it read that GOAWAY is served
        early = p.call("ServerLive", length_prefixed(b""))
        p.conn.data_received(p.h2.data_to_send())
        for _ in range(3):
            await asyncio.sleep(0)
        assert [(f[0], f[2]) for f in frames(p.transport.take())] == [(1, early), (0, early), (1, early)]
        # the PING's ACK: the final GOAWAY names the last stream taken
        p.conn.data_received(frame(6, 1, 0, first[1][3]))
        await asyncio.sleep(0)
        [final] = frames(p.transport.take())
        assert final[0] == 7 and struct.unpack(">II", final[3]) == (early, 0)
        refused = p.call("ServerLive", length_prefixed(b""))
        p.conn.data_received(p.h2.data_to_send())
        await asyncio.sleep(0)
        assert frames(p.transport.take()) == [(3, 0, refused, b"\x00\x00\x00\x07")]  # REFUSED_STREAM
        assert not p.transport.eof
        p.servicer.release.set()
        for _ in range(3):
            await asyncio.sleep(0)
        answer = frames(p.transport.take())
        assert [(f[0], f[2]) for f in answer] == [(1, slow), (0, slow), (1, slow)]
        assert answer[-1][1] == 0x5  # trailers: END_HEADERS | END_STREAM
        # the last call over: FIN after the answer, and the socket stays open to read the client out
        assert p.transport.eof and not p.transport.closed
        p.conn.data_received(frame(6, 0, 0, b"12345678"))  # read and dropped: no reset, no answer
        await asyncio.sleep(0)
        assert p.transport.take() == b""
        assert p.conn.eof_received() is False  # the client's FIN closes the transport

    run(main())


def test_goaway_without_an_ack_goes_final_after_its_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(h2life, "_SHUTDOWN_ACK_S", 0.01)

    async def main() -> None:
        p = Peer()
        await p.pump()
        p.conn.goaway()
        await asyncio.sleep(0)
        assert [f[0] for f in frames(p.transport.take())] == [7, 6]
        await asyncio.sleep(0.05)  # no ACK comes: the final GOAWAY, and with no call open, FIN
        [final] = frames(p.transport.take())
        assert final[0] == 7 and struct.unpack(">II", final[3]) == (0, 0)
        assert p.transport.eof

    run(main())


# -- streams -------------------------------------------------------------------------------------------
def test_bidirectional_stream_echo_and_half_close() -> None:
    async def main() -> None:
        p = Peer()
        sid = p.call("ModelStreamInfer", length_prefixed(b"one") + length_prefixed(b"two")[:4], end=False)
        await p.pump()
        assert messages(p.stream(sid)[1]) == [b"one"]
        p.h2.send_data(sid, length_prefixed(b"two")[4:] + length_prefixed(b"three"), end_stream=True)
        await p.pump(5)
        _, body, trailers, _ = p.stream(sid)
        assert messages(body) == [b"one", b"two", b"three"]
        assert trailers == {"grpc-status": "0"}

    run(main())


def test_lost_connection_cancels_streams() -> None:
    async def main() -> None:
        p = Peer()
        p.call("ModelStreamInfer", length_prefixed(b"one"), end=False)
        await p.pump()
        p.conn.connection_lost(None)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert p.servicer.stream_cancelled

    run(main())


def test_continuation_and_padding() -> None:
    async def main() -> None:
        p = Peer()
        await p.pump()
        enc = p.h2.encoder
        block = enc.encode(
            [
                (":method", "POST"),
                (":scheme", "http"),
                (":path", f"{SVC}/ServerLive"),
                (":authority", "localhost"),
                ("content-type", "application/grpc"),
                ("x-long", "v" * 100),
            ]
        )
        sid = p.h2.get_next_available_stream_id()
        half = len(block) // 2
        # HEADERS (padded) + CONTINUATION, then a padded DATA frame with END_STREAM
        p.h2.data_to_send()  # nothing pending
        raw = frame(1, 0x8, sid, b"\x03" + block[:half] + b"\x00\x00\x00") + frame(9, 0x4, sid, block[half:])
        raw += frame(0, 0x8 | 0x1, sid, b"\x02" + length_prefixed(b"") + b"\x00\x00")
        p.conn.data_received(raw)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        out = p.transport.take()
        assert out.endswith(frame(1, 0x5, sid, b"\x00\x0bgrpc-status\x010"))

    run(main())


def test_lean_server_binds_and_stops() -> None:
    async def main() -> None:
        s = LeanGrpcServer(FakeServicer(), "127.0.0.1", 0)
        await s.start()
        assert s.port
        reader, writer = await asyncio.open_connection("127.0.0.1", s.port)
        writer.write(PREFACE + frame(4, 0, 0))
        head = await reader.readexactly(9)
        assert head[3] == 4  # the server's SETTINGS first
        await s.stop(1.0)
        writer.close()

    run(main())


def test_a_call_sent_as_the_server_stops_is_answered_and_the_socket_ends_with_fin() -> None:
    """The race of a client that sends a call while the server's GOAWAY is on its way: the call is
    served, and the connection ends with FIN once the client acknowledged the PING (a server that
    closed at once made the client's send fail with EPIPE: 'Stream removed', not retried)."""

    async def main() -> None:
        s = LeanGrpcServer(FakeServicer(), "127.0.0.1", 0)
        await s.start()
        reader, writer = await asyncio.open_connection("127.0.0.1", s.port)
        client = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
        )
        client.initiate_connection()
        writer.write(client.data_to_send())
        client.receive_data(await reader.read(65536))  # the server's SETTINGS
        writer.write(client.data_to_send())
        await writer.drain()
        stopping = asyncio.create_task(s.stop(5.0))
        await asyncio.sleep(0.05)  # the first GOAWAY is written; the client has not read it
        headers = [(":method", "POST"), (":scheme", "http"), (":path", f"{SVC}/ServerLive")]
        headers += [(":authority", "x"), ("te", "trailers"), ("content-type", "application/grpc")]
        client.send_headers(1, headers)
        client.send_data(1, length_prefixed(b""), end_stream=True)
        writer.write(client.data_to_send())
        buf, seen = b"", []
        while data := await asyncio.wait_for(reader.read(65536), 5):  # to the server's FIN
            buf += data
            while len(buf) >= 9 and len(buf) >= (n := 9 + int.from_bytes(buf[:3], "big")):
                [f], buf = frames(buf[:n]), buf[n:]
                seen.append(f)
                if f[0] == 6 and not f[1] & 1:  # the server's PING: its ACK
                    writer.write(frame(6, 1, 0, f[3]))
        assert seen[-2] == (1, 0x5, 1, b"\x00\x0bgrpc-status\x010")  # the call's trailers
        goaways = [struct.unpack(">II", f[3]) for f in seen if f[0] == 7]
        assert goaways == [(0x7FFFFFFF, 0), (1, 0)]  # the first names every stream, the final the last taken
        writer.close()
        await asyncio.wait_for(stopping, 5)
        assert not s._connections

    run(main())


@pytest.mark.parametrize("block_reuse", [True, False])
def test_header_block_cache_tracks_the_dynamic_table(block_reuse: bool) -> None:
    async def main() -> None:
        p = Peer()
        extra = [("x-id", "same")] if block_reuse else []
        first = [p.call("ServerLive", length_prefixed(b""), extra=extra) for _ in range(3)]
        await p.pump()
        other = p.call("ServerLive", length_prefixed(b""), extra=[("x-id", "other")])
        await p.pump()
        for sid in first:
            assert p.stream(sid)[2] == {"grpc-status": "0"}
        assert p.stream(other)[2] == {"grpc-status": "0"}
        assert ("x-id", "other") in p.servicer.metadata

    run(main())


def test_garbage_frames_end_only_their_connection(caplog: pytest.LogCaptureFixture) -> None:
    import random

    async def main() -> None:
        rng = random.Random(7)
        for _ in range(200):
            p = Peer()
            await p.pump()
            junk = b"".join(
                frame(
                    rng.randrange(12), rng.randrange(256), rng.randrange(6), rng.randbytes(rng.randrange(20))
                )
                for _ in range(rng.randrange(1, 6))
            )
            p.conn.data_received(junk)
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            for f in frames(p.transport.take()):
                if f[0] == 7:  # GOAWAY: the connection is closed, nothing after it is read
                    assert p.transport.closed
            p.conn.connection_lost(None)
            await asyncio.sleep(0)

    run(main())
    assert not [r for r in caplog.records if r.levelname == "ERROR"]  # every case handled, none a crash


def test_the_lean_server_is_chosen_unless_compression_or_aio() -> None:
    from inferd.frontends.grpc.aio import GrpcServer
    from inferd.frontends.grpc.h2server import make_grpc_server

    core: Any = FakeCore()

    def make(**options: Any) -> Any:
        return make_grpc_server(InferenceServicer(core, GrpcConfig.from_options(ServerOptions(**options))))

    assert ServerOptions().grpc_server == "lean"
    assert isinstance(make(), LeanGrpcServer)
    assert isinstance(make(grpc_server="aio"), GrpcServer)
    assert isinstance(make(grpc_use_ssl=True), LeanGrpcServer)  # TLS too
    assert isinstance(make(grpc_infer_response_compression_level="high"), GrpcServer)
