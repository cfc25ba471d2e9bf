"""preserve_ordering (scheduling/ordering.py) alone and in the instance pool; the rate limiter in the pool."""

from __future__ import annotations

import asyncio
import threading

from poolkit import WAIT_S, FakeInstance, answers, request, run, submit, until

from inferd.core.request import InferRequest
from inferd.core.response import InferResponse, ResponseStream
from inferd.core.stats import ModelStats
from inferd.errors import UnavailableError
from inferd.scheduling.instances import InstancePool
from inferd.scheduling.ordering import OrderedResponses
from inferd.scheduling.queue import BatchPolicy
from inferd.scheduling.rate_limiter import Gate, InstanceSlot, RateLimiter


def _streams(loop: asyncio.AbstractEventLoop, n: int) -> tuple[list[InferRequest], list[list[str]]]:
    """``n`` requests with streams that record what reaches their consumer, in one shared list."""
    seen: list[list[str]] = [[]]
    reqs = []
    for i in range(n):
        r = request(i)
        r.stream = ResponseStream(loop)
        r.stream.set_callback(
            lambda resp, final, i=i: seen[0].append(f"{i}{'F' if final else ''}:{resp.id if resp else '-'}")
        )
        reqs.append(r)
    return reqs, seen


def _resp(i: int | str) -> InferResponse:
    return InferResponse("m", "1", str(i))


def test_responses_wait_for_every_earlier_request() -> None:
    async def go(loop: asyncio.AbstractEventLoop) -> list[str]:
        order = OrderedResponses()
        reqs, seen = _streams(loop, 3)
        order.reserve(reqs[:2])
        order.reserve(reqs[2:])
        s0, s1, s2 = (r.stream for r in reqs)
        assert s0 is not None and s1 is not None and s2 is not None
        s2.deliver(_resp("c"), True)
        s1.deliver(_resp("b"), True)
        assert seen[0] == [] and order.pending() == 3
        s0.deliver(_resp("a"), True)
        assert order.pending() == 0
        return seen[0]

    assert run(go) == ["0F:a", "1F:b", "2F:c"]


def test_the_front_request_streams_and_later_ones_wait_for_its_final_response() -> None:
    """A decoupled model's responses: the first request's go out as they come, the second's only
    after the first request's final flag (the reference's FinalizeResponses)."""

    async def go(loop: asyncio.AbstractEventLoop) -> list[list[str]]:
        order = OrderedResponses()
        reqs, seen = _streams(loop, 2)
        order.reserve(reqs)
        s0, s1 = reqs[0].stream, reqs[1].stream
        assert s0 is not None and s1 is not None
        steps = []
        s0.deliver(_resp("a1"), False)
        steps.append(list(seen[0]))
        s1.deliver(_resp("b1"), False)
        s1.deliver(None, True)
        s0.deliver(_resp("a2"), False)
        steps.append(list(seen[0]))
        s0.deliver(None, True)
        s0.deliver(_resp("late"), True)  # after the final: dropped, as without ordering
        steps.append(list(seen[0]))
        assert s0.hold is None and s1.hold is None and s0.done and s1.done
        return steps

    a, b, c = run(go)
    assert a == ["0:a1"]
    assert b == ["0:a1", "0:a2"]
    assert c == ["0:a1", "0:a2", "0F:-", "1:b1", "1F:-"]


def test_requests_without_a_place_answer_at_once() -> None:
    async def go(loop: asyncio.AbstractEventLoop) -> list[str]:
        order = OrderedResponses()
        reqs, seen = _streams(loop, 2)
        order.reserve(reqs[:1])
        s0, s1 = reqs[0].stream, reqs[1].stream
        assert s0 is not None and s1 is not None
        s1.deliver(_resp("timeout"), True)  # rejected from the queue: never reserved
        s0.deliver(_resp("a"), True)
        return seen[0]

    assert run(go) == ["1F:timeout", "0F:a"]


def _pool(
    loop: asyncio.AbstractEventLoop, instances: list[FakeInstance], gate: Gate | None = None, **policy: int
) -> InstancePool:
    return InstancePool(
        "m",
        "1",
        [(f"m_{i}", inst) for i, inst in enumerate(instances)],
        BatchPolicy(**policy),  # type: ignore[arg-type]
        ModelStats(),
        loop,
        gate=gate,
    )


def test_pool_with_preserve_ordering_answers_in_request_order_across_instances() -> None:
    """Two instances; the first request's execute waits until the second one's answered inside the
    pool: its answer still reaches its client first."""
    second_done = threading.Event()

    def hold_first(reqs: list[InferRequest]) -> None:
        if reqs[0].id == "0":
            assert second_done.wait(WAIT_S)
        else:
            second_done.set()

    async def go(loop: asyncio.AbstractEventLoop, preserve: bool) -> list[str]:
        pool = InstancePool(
            "m",
            "1",
            [("m_0", FakeInstance(hold_first)), ("m_1", FakeInstance(hold_first))],
            BatchPolicy(max_batch_size=1, preserve_ordering=preserve),
            ModelStats(),
            loop,
        )
        got: list[str] = []
        streams = submit(pool, loop, request(0))
        await until(lambda: pool.stats()["executing"] == 1)
        streams += submit(pool, loop, request(1))
        await asyncio.wait_for(
            asyncio.gather(*(_record(s, got) for s in streams)),
            WAIT_S,
        )
        await pool.stop(1)
        return got

    async def both(loop: asyncio.AbstractEventLoop) -> tuple[list[str], list[str]]:
        ordered = await go(loop, True)
        second_done.clear()
        return ordered, await go(loop, False)

    ordered, unordered = run(both)
    assert ordered == ["0", "1"]
    assert unordered == ["1", "0"]  # the witness: without the option the short one answers first


async def _record(stream: ResponseStream, got: list[str]) -> None:
    got.append((await stream.first()).id)


# -- the rate limiter in the pool -------------------------------------------------------------------


def test_two_pools_sharing_one_resource_never_execute_together() -> None:
    limiter = RateLimiter()
    a, b = InstanceSlot("a_0", {0: {"R": 1}}, 0), InstanceSlot("b_0", {0: {"R": 1}}, 0)
    limiter.register([a, b])
    lock = threading.Lock()
    running = [0]
    most = [0]

    def busy(reqs: list[InferRequest]) -> None:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        threading.Event().wait(0.002)
        with lock:
            running[0] -= 1

    async def go(loop: asyncio.AbstractEventLoop) -> None:
        pa = _pool(loop, [FakeInstance(busy)], Gate(limiter, [a]))
        pb = _pool(loop, [FakeInstance(busy)], Gate(limiter, [b]))
        streams = []
        for i in range(30):
            streams += submit(pa, loop, request(f"a{i}"))
            streams += submit(pb, loop, request(f"b{i}"))
        assert all(resp.error is None for resp in await answers(streams))
        await pa.stop(1)
        await pb.stop(1)

    run(go)
    assert most[0] == 1
    assert a.exec_count + b.exec_count == 60 and limiter.held() == {}
    assert limiter.limits() == {}  # both pools unregistered at stop


def test_stop_wakes_a_worker_waiting_for_its_turn() -> None:
    limiter = RateLimiter()
    hog, waiter = InstanceSlot("hog", {0: {"R": 1}}, 0), InstanceSlot("m_0", {0: {"R": 1}}, 0)
    limiter.register([hog, waiter])
    assert limiter.acquire(hog)  # another model's instance holds R for good

    async def go(loop: asyncio.AbstractEventLoop) -> list[InferResponse]:
        pool = _pool(loop, [FakeInstance()], Gate(limiter, [waiter]))
        streams = submit(pool, loop, request(0))
        await until(lambda: waiter.staged)
        await pool.stop(0.05)  # the drain gives up; the queued request fails, the worker ends
        return await answers(streams)

    (resp,) = run(go)
    assert isinstance(resp.error, UnavailableError) and resp.error.message == "Server is stopping"
    assert not waiter.staged and limiter.limits() == {0: {"R": 1}}


def test_the_watchdog_gives_back_what_a_hung_execute_holds() -> None:
    limiter = RateLimiter()
    hung, other = InstanceSlot("m_0", {0: {"R": 1}}, 0), InstanceSlot("o_0", {0: {"R": 1}}, 0)
    limiter.register([hung, other])
    release = threading.Event()

    async def go(loop: asyncio.AbstractEventLoop) -> None:
        pool = InstancePool(
            "m",
            "1",
            [("m_0", FakeInstance(lambda reqs: release.wait(WAIT_S) or None))],
            BatchPolicy(),
            ModelStats(),
            loop,
            execute_timeout_ns=50_000_000,
            gate=Gate(limiter, [hung]),
        )
        (resp,) = await answers(submit(pool, loop, request(0)))
        assert isinstance(resp.error, UnavailableError)  # the watchdog's answer
        assert await asyncio.to_thread(limiter.acquire, other)  # R is free although execute still runs
        limiter.release(other)
        release.set()
        await until(lambda: pool.stats()["executing"] == 0)
        await pool.stop(1)

    run(go)
    assert limiter.held() == {}
