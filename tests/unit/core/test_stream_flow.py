"""A ResponseStream's window (core/stream_flow.py): a sender waits while the consumer lags, the
consumer's takes let it on, a stalled client fails the stream, cancellation lets senders go; the
unread bytes count in the process's UnsentBudget, and over it a sender waits."""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np

from inferd.core.response import InferResponse, ResponseStream
from inferd.core.stream_flow import RESPONSE_OVERHEAD, StreamLimits, StreamWindow, tensor_bytes
from inferd.core.tensor import Tensor
from inferd.core.types import BYTES
from inferd.core.unsent import UnsentBudget
from inferd.errors import ErrorCode

SIZE = 1000
COST = RESPONSE_OVERHEAD + SIZE


def _resp(i: int) -> InferResponse:
    return InferResponse("m", "1", id=str(i), outputs=[Tensor.from_array("OUT", np.zeros(SIZE, np.uint8))])


def _limited(
    loop: asyncio.AbstractEventLoop,
    responses: int = 2,
    stall_s: float = 30.0,
    budget: UnsentBudget | None = None,
) -> ResponseStream:
    stream = ResponseStream(loop)
    stream.limit(StreamLimits(max_unread_bytes=responses * COST, stall_timeout_s=stall_s, budget=budget))
    return stream


class Sender(threading.Thread):
    """A model thread: ``n`` responses, then the final flag (with the last response when
    ``last_final``); ``sent`` counts the sends returned."""

    def __init__(self, stream: ResponseStream, n: int, last_final: bool = False) -> None:
        super().__init__(daemon=True)
        self.stream, self.n, self.sent, self.last_final = stream, n, 0, last_final

    def run(self) -> None:
        for i in range(self.n):
            self.stream.send(_resp(i), self.last_final and i == self.n - 1)
            self.sent += 1
        if not self.last_final:
            self.stream.send(None, True)


async def _until(check: object, limit: float = 5.0) -> None:
    end = time.monotonic() + limit
    while not check():  # type: ignore[operator]
        assert time.monotonic() < end, "timed out"
        await asyncio.sleep(0.01)


def _window(stream: ResponseStream) -> StreamWindow:
    w = stream._window
    assert w is not None
    return w


def test_tensor_bytes() -> None:
    assert tensor_bytes(Tensor.from_array("a", np.zeros((3, 4), np.float32))) == 48
    assert tensor_bytes(Tensor("r", BYTES, (1,), raw=b"\x03\x00\x00\x00abc")) == 7
    few = np.array([b"ab", b"cde"], np.object_)
    assert tensor_bytes(Tensor.from_array("b", few)) == 5
    many = np.array([b"xy"] * 10_000, np.object_)  # sampled: the same estimate
    assert tensor_bytes(Tensor.from_array("c", many)) == 20_000


def test_a_sender_waits_while_the_consumer_lags_and_every_response_arrives() -> None:
    async def main() -> None:
        stream = _limited(asyncio.get_running_loop())
        sender = Sender(stream, 10)
        sender.start()
        await _until(lambda: _window(stream).unread == 2 * COST)
        await asyncio.sleep(0.1)
        assert sender.sent == 2  # the third send waits for the consumer
        got = [r.id async for r, _final in stream if r is not None]
        assert got == [str(i) for i in range(10)]
        sender.join(5)
        assert _window(stream).unread == 0

    asyncio.run(main())


def test_a_response_larger_than_the_window_still_goes_through() -> None:
    async def main() -> None:
        stream = ResponseStream(asyncio.get_running_loop())
        stream.limit(StreamLimits(max_unread_bytes=10, stall_timeout_s=30))
        sender = Sender(stream, 3)
        sender.start()
        got = [r.id async for r, _final in stream if r is not None]
        assert got == ["0", "1", "2"]
        sender.join(5)

    asyncio.run(main())


def test_a_stalled_client_fails_the_stream_with_a_clear_error() -> None:
    async def main() -> None:
        stream = _limited(asyncio.get_running_loop(), stall_s=0.2)
        sender = Sender(stream, 5, last_final=True)
        sender.start()
        await asyncio.to_thread(sender.join, 10)  # every send returned: the third gave up
        assert sender.sent == 5
        assert stream.cancelled and "read none of the" in stream.cancel_reason
        items = [item async for item in stream]
        assert [r.id for r, _ in items if r is not None and r.error is None] == ["0", "1"]
        errors = [r.error for r, _ in items if r is not None and r.error is not None]
        assert len(errors) == 1 and errors[0].code is ErrorCode.CANCELLED
        assert "--stream-stall-timeout-secs" in errors[0].message
        assert items[-1] == (None, True)  # the model's final flag still ends it, without its response

    asyncio.run(main())


def test_cancelling_lets_a_waiting_sender_go() -> None:
    async def main() -> None:
        stream = _limited(asyncio.get_running_loop(), responses=1)
        sender = Sender(stream, 3)
        sender.start()
        await _until(lambda: _window(stream).unread == COST)
        stream.cancel("the client closed the connection")
        await asyncio.to_thread(sender.join, 5)
        assert not sender.is_alive() and sender.sent == 3  # the later sends were dropped

    asyncio.run(main())


def test_a_callback_consumer_defers_until_it_releases() -> None:
    async def main() -> None:
        stream = _limited(asyncio.get_running_loop(), responses=1)
        taken: list[tuple[str, int]] = []

        def callback(r: InferResponse | None, final: bool) -> None:
            if r is not None:
                taken.append((r.id, stream.defer()))

        stream.set_callback(callback)
        sender = Sender(stream, 3)
        sender.start()
        await _until(lambda: len(taken) == 1)
        await asyncio.sleep(0.1)
        assert sender.sent == 1 and len(taken) == 1  # held until the consumer releases
        while len(taken) < 3:
            await _until(lambda: len(taken) > 0)
            if taken[-1][1]:
                stream.release(taken[-1][1])
                taken[-1] = (taken[-1][0], 0)
            await asyncio.sleep(0.01)
        await asyncio.to_thread(sender.join, 5)
        assert [i for i, _ in taken] == ["0", "1", "2"]

    asyncio.run(main())


def test_the_loop_thread_never_waits() -> None:
    async def main() -> None:
        stream = _limited(asyncio.get_running_loop(), responses=1)
        for i in range(4):
            stream.deliver(_resp(i), False)  # on the loop: counted, never waiting
        stream.send(_resp(4))  # send from the loop's own thread does not wait either
        stream.send(None, True)
        got = [r.id async for r, _final in stream if r is not None]
        assert got == ["0", "1", "2", "3", "4"]

    asyncio.run(main())


def test_a_stream_without_a_window_is_unbounded() -> None:
    async def main() -> None:
        stream = ResponseStream(asyncio.get_running_loop())
        sender = Sender(stream, 50)
        sender.start()
        await asyncio.to_thread(sender.join, 5)
        assert sender.sent == 50 and stream._window is None

    asyncio.run(main())


# -- the process's budget (core/unsent.py) ---------------------------------------------------------------
def test_unread_responses_count_in_the_budget_until_taken() -> None:
    async def main() -> None:
        budget = UnsentBudget(0)
        stream = _limited(asyncio.get_running_loop(), responses=3, budget=budget)
        sender = Sender(stream, 6)
        sender.start()
        await _until(lambda: _window(stream).unread == 3 * COST)
        assert budget.used == 3 * COST
        got = [r.id async for r, _final in stream if r is not None]
        assert got == [str(i) for i in range(6)]
        await asyncio.to_thread(sender.join, 5)
        assert budget.used == 0 and budget.peak == 3 * COST

    asyncio.run(main())


def test_over_the_budget_a_sender_waits_with_one_response_unread() -> None:
    async def main() -> None:
        budget = UnsentBudget(10 * COST)
        budget.add(11 * COST)  # other clients hold more than the budget
        stream = _limited(asyncio.get_running_loop(), responses=5, budget=budget)
        sender = Sender(stream, 4)
        sender.start()
        await _until(lambda: _window(stream).unread == COST)
        await asyncio.sleep(0.1)
        assert sender.sent == 1  # its own window has room; the budget has none
        budget.add(-11 * COST)  # the others read: the next take lets the sender on
        got = [r.id async for r, _final in stream if r is not None]
        assert got == ["0", "1", "2", "3"]
        await asyncio.to_thread(sender.join, 5)
        assert budget.used == 0

    asyncio.run(main())


def test_a_cancelled_stream_leaves_the_budget_at_once() -> None:
    async def main() -> None:
        budget = UnsentBudget(0)
        stream = _limited(asyncio.get_running_loop(), responses=2, budget=budget)
        sender = Sender(stream, 5)
        sender.start()
        await _until(lambda: budget.used == 2 * COST)
        stream.cancel_on_close()  # the client went away: nobody takes what waits
        assert budget.used == 0
        await asyncio.to_thread(sender.join, 5)
        assert budget.used == 0
        async for _ in stream:  # taken after all: nothing is given back twice
            pass
        assert budget.used == 0

    asyncio.run(main())


def test_a_stalled_stream_stays_counted_until_its_client_reads_or_leaves() -> None:
    async def main() -> None:
        budget = UnsentBudget(0)
        stream = _limited(asyncio.get_running_loop(), stall_s=0.2, budget=budget)
        sender = Sender(stream, 5, last_final=True)
        sender.start()
        await asyncio.to_thread(sender.join, 10)
        assert stream.cancelled and budget.used == 2 * COST  # the two responses still wait
        stream.cancel_on_close()
        assert budget.used == 0

    asyncio.run(main())
