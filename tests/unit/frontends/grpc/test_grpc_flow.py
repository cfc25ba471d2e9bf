"""gRPC flow control. The lean server, driven by the ``h2`` package as in test_grpc_h2: no DATA and
no reading while the transport is over its mark, a ModelStreamInfer call that does not take its
requests holds their window, padding counts in a stream's window; data waiting for a window counts in
the process's budget until sent, reset or lost, and over the budget a connection that holds answers
gets UNAVAILABLE. ModelStreamInfer over a fake core: no more requests read while answers wait, a
decoupled model's response taken once written."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import h2.events
import h2.settings
import numpy as np
from test_grpc_h2 import FakeServicer, FakeTransport, Peer, frames, messages, run

from inferd.core.response import InferResponse
from inferd.core.stream_flow import RESPONSE_OVERHEAD, StreamLimits
from inferd.core.tensor import Tensor
from inferd.core.unsent import UnsentBudget
from inferd.frontends.grpc._pb import pb
from inferd.frontends.grpc.h2conn import STREAM_WINDOW
from inferd.frontends.grpc.h2server import GrpcConnection, _Handlers
from inferd.frontends.grpc.h2wire import DATA, PADDED, WINDOW_UPDATE, frame, length_prefixed
from inferd.frontends.grpc.service import InferenceServicer
from inferd.frontends.grpc.stream_order import STREAM_IN_FLIGHT
from inferd.server_config import GrpcConfig

MiB = 1 << 20


class FlowTransport(FakeTransport):
    """FakeTransport with the write buffer's size, which flow control asks of a transport."""

    def get_write_buffer_size(self) -> int:
        return len(self.data)


def _peer(servicer: FakeServicer | None = None) -> Peer:
    p = Peer(servicer, settings={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 1 << 24})
    t = FlowTransport()
    p.transport = t
    p.conn._transport = t
    return p


def _budget_peer(budget: UnsentBudget) -> Peer:
    """A client that opens no window (SETTINGS_INITIAL_WINDOW_SIZE 0), on a connection of ``budget``."""
    p = Peer(settings={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0})
    p.conn = GrpcConnection(_Handlers(p.servicer, budget), set())
    p.transport = FlowTransport()
    p.conn.connection_made(p.transport)
    return p


_BIG = length_prefixed(pb.ModelMetadataRequest(name="big").SerializeToString())  # a 200 KB answer
_BIG_ANSWER = 5 + len(pb.ModelMetadataResponse(name="x" * 200_000).SerializeToString())


def test_data_waiting_for_a_window_counts_until_sent_or_reset() -> None:
    async def main() -> None:
        budget = UnsentBudget(0)
        p = _budget_peer(budget)
        await p.pump()
        one, two = p.call("ModelMetadata", _BIG), p.call("ModelMetadata", _BIG)
        await p.pump()
        assert budget.used == 2 * _BIG_ANSWER  # both wait for a window
        p.h2.reset_stream(one)
        await p.pump()
        assert budget.used == _BIG_ANSWER  # a reset stream's queue goes at once
        p.h2.increment_flow_control_window(1 << 20)
        p.h2.increment_flow_control_window(1 << 20, two)
        await p.pump(6)
        _, body, trailers, _ = p.stream(two)
        assert trailers == {"grpc-status": "0"} and len(body) == _BIG_ANSWER
        assert budget.used == 0 and budget.peak == 2 * _BIG_ANSWER

    run(main())


def test_a_lost_connection_gives_back_what_waited() -> None:
    async def main() -> None:
        budget = UnsentBudget(0)
        p = _budget_peer(budget)
        await p.pump()
        for _ in range(3):
            p.call("ModelMetadata", _BIG)
        await p.pump()
        assert budget.used == 3 * _BIG_ANSWER
        p.conn.connection_lost(None)
        assert budget.used == 0 and not p.conn.streams

    run(main())


def test_over_the_budget_a_connection_that_holds_answers_gets_unavailable() -> None:
    async def main() -> None:
        budget = UnsentBudget(150_000)
        p = _budget_peer(budget)
        await p.pump()
        first = p.call("ModelMetadata", _BIG)
        await p.pump()
        assert budget.over  # its answer waits for a window
        second = p.call("ModelMetadata", _BIG)  # answered while it holds one: not kept
        infer = p.call("ModelInfer", length_prefixed(b""))  # opened while it holds one: not run
        live = p.call("ServerLive", length_prefixed(pb.ServerLiveRequest().SerializeToString()))
        await p.pump()
        for sid, what in ((second, "this answer was not kept"), (infer, "the request was not run")):
            _, _, trailers, _ = p.stream(sid)
            assert trailers is not None and trailers["grpc-status"] == "14", trailers  # UNAVAILABLE
            assert what in trailers["grpc-message"] and "--max-unsent-bytes" in trailers["grpc-message"]
        assert p.stream(first)[2] is None and p.stream(live)[2] is None  # kept: waiting for a window
        held = budget.used
        assert _BIG_ANSWER < held < _BIG_ANSWER + 100 and budget.refused == 2  # small answers are kept
        other = _budget_peer(budget)  # a connection that holds nothing is served
        await other.pump()
        mine = other.call("ModelMetadata", _BIG)
        await other.pump()
        assert budget.used == held + _BIG_ANSWER and other.stream(mine)[2] is None  # waiting for its window
        assert budget.full  # past twice the budget: a large answer is not kept on any connection
        third = _budget_peer(budget)
        await third.pump()
        refused = third.call("ModelMetadata", _BIG)
        await third.pump()
        trailers = third.stream(refused)[2]
        assert trailers is not None and trailers["grpc-status"] == "14"
        assert "more than twice --max-unsent-bytes (150,000)" in trailers["grpc-message"]

    run(main())


def test_no_data_and_no_reading_while_the_client_takes_nothing() -> None:
    async def main() -> None:
        p = _peer()
        await p.pump()
        p.conn.pause_writing()
        transport = p.transport
        assert isinstance(transport, FlowTransport) and not transport.reading
        sid = p.call("ServerLive", length_prefixed(pb.ServerLiveRequest().SerializeToString()))
        await p.pump()
        _, body, trailers, _ = p.stream(sid)
        assert body == b"" and trailers is None  # answered, held back
        p.conn.resume_writing()
        assert transport.reading
        await p.pump()
        _, body, trailers, _ = p.stream(sid)
        assert trailers == {"grpc-status": "0"}
        assert pb.ServerLiveResponse.FromString(messages(body)[0]).live

    run(main())


class GatedServicer(FakeServicer):
    """ModelStreamInfer takes no request until ``gate`` is set, then echoes each."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()

    async def ModelStreamInfer(self, request_iterator: AsyncIterator[bytes], context: Any) -> None:
        await self.gate.wait()
        async for data in request_iterator:
            await context.write(data[:10])


def _stream_acks(p: Peer, sid: int) -> int:
    return sum(e.delta for e in p.events if isinstance(e, h2.events.WindowUpdated) and e.stream_id == sid)


def test_a_stream_call_that_takes_nothing_holds_its_window() -> None:
    async def main() -> None:
        servicer = GatedServicer()
        p = _peer(servicer)
        await p.pump()
        sid = p.call("ModelStreamInfer", b"", end=False)
        for _ in range(10):
            p.h2.send_data(sid, length_prefixed(b"x" * (MiB - 5)))  # one frame each
            await p.pump()
        held = _stream_acks(p, sid)
        assert held <= STREAM_WINDOW // 4 + 2 * MiB  # acknowledged up to the inbox's bound only
        assert p.h2.local_flow_control_window(sid) < STREAM_WINDOW  # the client's window shrank
        servicer.gate.set()
        for _ in range(5):
            await p.pump()
        assert _stream_acks(p, sid) > held  # taken: the window comes back
        p.h2.end_stream(sid)
        await p.pump()
        _, body, trailers, _ = p.stream(sid)
        assert len(messages(body)) == 10 and trailers == {"grpc-status": "0"}

    run(main())


def test_padding_counts_in_the_stream_window() -> None:
    async def main() -> None:
        p = _peer(FakeServicer())
        await p.pump()
        sid = p.call("ModelStreamInfer", b"", end=False)
        await p.pump()
        payload = length_prefixed(b"y" * 100)
        padded = bytes([200]) + payload + bytes(200)  # pad length, data, padding
        sent = 0
        while sent < STREAM_WINDOW // 4:
            p.conn.data_received(frame(DATA, PADDED, sid, padded))
            sent += len(padded)
        await asyncio.sleep(0)
        updates = [f for f in frames(p.transport.take()) if f[0] == WINDOW_UPDATE and f[2] == sid]
        assert sum(int.from_bytes(f[3], "big") for f in updates) >= STREAM_WINDOW // 4

    run(main())


# -- ModelStreamInfer over a fake core ---------------------------------------------------------------
class BlockedContext:
    """A call whose client takes nothing until ``open`` is set."""

    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.open = asyncio.Event()

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return ()

    async def write(self, message: bytes) -> None:
        await self.open.wait()
        self.written.append(message)


def _request(model: str, i: int) -> bytes:
    msg = pb.ModelInferRequest(model_name=model, id=str(i))
    msg.inputs.add(name="INPUT0", datatype="FP32", shape=[1])
    msg.raw_input_contents.append(np.array([i], np.float32).tobytes())
    return bytes(msg.SerializeToString())


async def _until(check: Callable[[], bool], limit: float = 5.0) -> None:
    end = time.monotonic() + limit
    while not check():
        assert time.monotonic() < end, "timed out"
        await asyncio.sleep(0.01)


def test_a_stream_call_reads_no_more_requests_while_its_answers_wait(core: Any) -> None:
    async def main() -> None:
        core.hold = True  # the test answers
        servicer = InferenceServicer(core, GrpcConfig())
        ctx = BlockedContext()

        async def requests() -> AsyncIterator[bytes]:
            for i in range(200):
                yield _request("identity_fp32", i)

        call = asyncio.ensure_future(servicer.stream_infer(requests(), ctx))
        await _until(lambda: len(core.calls) >= STREAM_IN_FLIGHT // 2)
        await asyncio.sleep(0.05)
        read = len(core.calls)
        assert STREAM_IN_FLIGHT // 2 <= read <= STREAM_IN_FLIGHT  # then it stops reading
        ctx.open.set()
        answered = 0
        while answered < 200:
            await _until(lambda n=answered: len(core.streams) > n)  # type: ignore[misc]
            for s in core.streams[answered:]:
                s.deliver(InferResponse("identity_fp32", "1", outputs=[]), True)
                answered += 1
        assert await asyncio.wait_for(call, 5) is None
        assert len(ctx.written) == 200

    asyncio.run(main())


def test_a_decoupled_stream_takes_a_response_once_it_is_written(core: Any) -> None:
    async def main() -> None:
        core.hold = True
        servicer = InferenceServicer(core, GrpcConfig())
        ctx = BlockedContext()
        done = asyncio.Event()

        async def requests() -> AsyncIterator[bytes]:
            yield _request("repeat", 0)
            await done.wait()

        call = asyncio.ensure_future(servicer.stream_infer(requests(), ctx))
        await _until(lambda: len(core.streams) == 1)
        stream = core.streams[0]
        one = InferResponse("repeat", "1", outputs=[Tensor.from_array("OUTPUT0", np.zeros(1000, np.float32))])
        stream.limit(StreamLimits(max_unread_bytes=2 * (RESPONSE_OVERHEAD + 4000), stall_timeout_s=30))
        sent: list[int] = []

        def model() -> None:
            for i in range(10):
                stream.send(one)
                sent.append(i)
            stream.send(None, True)

        thread = threading.Thread(target=model, daemon=True)
        thread.start()
        await _until(lambda: len(sent) == 2)
        await asyncio.sleep(0.1)
        assert len(sent) == 2  # the client took nothing: the model waits
        ctx.open.set()
        await asyncio.to_thread(thread.join, 5)
        done.set()
        assert await asyncio.wait_for(call, 5) is None
        assert len(ctx.written) == 10

    asyncio.run(main())


def test_a_streams_answers_count_until_written_and_over_the_budget_are_not_kept(core: Any) -> None:
    async def main() -> None:
        core.hold = True
        budget = UnsentBudget(20_000)
        servicer = InferenceServicer(core, GrpcConfig(), unsent=budget)
        ctx = BlockedContext()

        async def requests() -> AsyncIterator[bytes]:
            for i in range(3):
                yield _request("identity_fp32", i)

        call = asyncio.ensure_future(servicer.stream_infer(requests(), ctx))
        await _until(lambda: len(core.streams) == 3)
        big = [Tensor.from_array("OUTPUT0", np.zeros(3000, np.float32))]  # 12 KB answers
        for s in core.streams:
            s.deliver(InferResponse("identity_fp32", "1", outputs=big), True)
        await asyncio.sleep(0)
        # the first two wait for the client (over the budget after the second), the third is not kept
        assert 24_000 < budget.used < 25_000 and budget.refused == 1  # (the refusal's message too)
        ctx.open.set()
        assert await asyncio.wait_for(call, 5) is None
        answers = [pb.ModelStreamInferResponse.FromString(m) for m in ctx.written]
        assert [a.error_message == "" for a in answers] == [True, True, False]
        assert "this answer was not kept" in answers[2].error_message
        assert budget.used == 0

    asyncio.run(main())
