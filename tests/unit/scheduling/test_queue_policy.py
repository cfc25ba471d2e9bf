"""The dynamic batcher's queue policy: priority levels, queue timeouts (REJECT and DELAY), queue sizes."""

from __future__ import annotations

import asyncio

import pytest
from poolkit import FakeInstance, Gate, answers, request, run, submit, until

from inferd.core.request import InferRequest
from inferd.core.response import ResponseStream
from inferd.core.stats import ModelStats
from inferd.errors import UnavailableError
from inferd.repository.config.schema import ModelConfig, ModelQueuePolicy
from inferd.scheduling.instances import InstancePool
from inferd.scheduling.queue import BatchPolicy, LevelPolicy, PolicyQueue, queue_policy

MS = 1_000_000


def _req(i: int, priority: int = 0, timeout_us: int = 0) -> InferRequest:
    r = request(i)
    r.priority = priority
    r.timeout_us = timeout_us
    return r


def _ids(q: PolicyQueue) -> list[str]:
    return [r.id for r in q]


def test_lower_levels_go_first_and_out_of_range_priorities_take_the_default() -> None:
    q = PolicyQueue(LevelPolicy(), levels=3, default_level=2)
    for i, p in enumerate([3, 0, 1, 9, 2, 1]):
        q.admit(_req(i, p), 0)
    assert _ids(q) == ["2", "5", "1", "3", "4", "0"]
    assert q[0].id == "2"
    assert [q.popleft().id for _ in range(len(q))] == ["2", "5", "1", "3", "4", "0"]
    with pytest.raises(IndexError):
        q.popleft()


def test_a_full_level_refuses_with_the_reference_text() -> None:
    q = PolicyQueue(LevelPolicy(max_queue_size=2), levels=2, default_level=1, per_level={2: LevelPolicy()})
    q.admit(_req(0), 0)
    q.admit(_req(1, 1), 0)
    with pytest.raises(UnavailableError, match=r"^\[request id: 7\] Exceeds maximum queue size$"):
        q.admit(_req(7), 0)
    anonymous = _req(8)
    anonymous.id = ""
    with pytest.raises(UnavailableError, match=r"^\[request id: <id_unknown>\] Exceeds"):
        q.admit(anonymous, 0)
    q.admit(_req(9, 2), 0)  # another level, without a limit
    assert len(q) == 3


def test_a_request_timeout_only_shortens_the_policys() -> None:
    allow = LevelPolicy(default_timeout_ns=10 * MS, allow_override=True)
    assert allow.deadline(_req(0, timeout_us=2000), 100) == 100 + 2 * MS
    assert allow.deadline(_req(0, timeout_us=50_000), 100) == 100 + 10 * MS  # longer: the policy's
    assert allow.deadline(_req(0), 100) == 100 + 10 * MS
    no_override = LevelPolicy(default_timeout_ns=10 * MS)
    assert no_override.deadline(_req(0, timeout_us=2000), 100) == 100 + 10 * MS
    # as the reference: without a default timeout, a request's own is ignored
    assert LevelPolicy(allow_override=True).deadline(_req(0, timeout_us=2000), 100) == 0


def test_expired_requests_are_rejected_or_delayed() -> None:
    q = PolicyQueue(
        LevelPolicy(default_timeout_ns=5),
        levels=2,
        default_level=1,
        per_level={2: LevelPolicy(default_timeout_ns=5, reject=False)},
    )
    q.admit(_req(0, 1), 0)
    q.admit(_req(1, 2), 0)
    q.admit(_req(2, 1), 10)
    q.admit(_req(3, 2), 10)
    rejected = q.expire(8)
    assert [r.id for r in rejected] == ["0"]
    assert _ids(q) == ["2", "3", "1"]  # the delayed request goes behind its level's others
    assert len(q) == 3
    q.clear()
    assert len(q) == 0 and _ids(q) == []


def _config(text: str) -> ModelConfig:
    from google.protobuf import text_format

    return text_format.Parse(text, ModelConfig())


def test_queue_policy_from_config() -> None:
    assert queue_policy(_config("max_batch_size: 4")) is None
    assert queue_policy(_config("max_batch_size: 4 dynamic_batching {}")) is None
    q = queue_policy(
        _config(
            "dynamic_batching { default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 7 "
            "allow_timeout_override: true max_queue_size: 3 } }"
        )
    )
    assert q is not None and q.has_deadlines
    assert LevelPolicy.from_config(
        ModelQueuePolicy(
            timeout_action=ModelQueuePolicy.DELAY, default_timeout_microseconds=7, max_queue_size=3
        )
    ) == LevelPolicy(max_queue_size=3, default_timeout_ns=7000, reject=False)
    levels = queue_policy(_config("dynamic_batching { priority_levels: 2 default_priority_level: 1 }"))
    assert levels is not None and levels.level_of(_req(0)) == 1 and not levels.has_deadlines


def _pool(loop: asyncio.AbstractEventLoop, inst: FakeInstance, queue: PolicyQueue) -> InstancePool:
    return InstancePool("m", "1", [("m_0", inst)], BatchPolicy(), ModelStats(), loop, queue=queue)


def test_the_pool_rejects_a_request_that_waited_past_its_timeout() -> None:
    gate = Gate()
    inst = FakeInstance(gate)

    async def main(loop: asyncio.AbstractEventLoop) -> None:
        pool = _pool(loop, inst, PolicyQueue(LevelPolicy(default_timeout_ns=30 * MS, allow_override=True)))
        stats = pool._stats
        (first,) = submit(pool, loop, _req(0))
        await until(gate.started.is_set)
        # waits behind the held execute: its 1 ms (shorter than the policy's 30 ms) passes in the queue
        (late,) = submit(pool, loop, _req(1, timeout_us=1000))
        (resp,) = await answers([late])
        assert resp.error is not None and resp.error.message == "Request timeout expired"
        assert isinstance(resp.error, UnavailableError)
        assert stats.fail_reasons["REJECTED"] == 1
        gate.release.set()
        (ok,) = await answers([first])
        assert ok.error is None
        assert inst.batches == [["0"]]  # the rejected request never reached the model
        await pool.stop(1)

    run(main)


def test_the_pool_refuses_past_the_maximum_queue_size() -> None:
    gate = Gate()
    inst = FakeInstance(gate)

    async def main(loop: asyncio.AbstractEventLoop) -> None:
        pool = _pool(loop, inst, PolicyQueue(LevelPolicy(max_queue_size=1)))
        (first,) = submit(pool, loop, _req(0))
        await until(gate.started.is_set)
        (queued,) = submit(pool, loop, _req(1))
        refused = _req(2)
        refused.stream = ResponseStream(loop)
        with pytest.raises(UnavailableError, match="Exceeds maximum queue size"):
            pool.enqueue(refused)
        gate.release.set()
        assert [r.error for r in await answers([first, queued])] == [None, None]
        await pool.stop(1)

    run(main)


def test_the_pool_serves_higher_priorities_first() -> None:
    gate = Gate()
    inst = FakeInstance(gate)

    async def main(loop: asyncio.AbstractEventLoop) -> None:
        pool = _pool(loop, inst, PolicyQueue(LevelPolicy(), levels=2, default_level=2))
        streams = submit(pool, loop, _req(0))
        await until(gate.started.is_set)
        streams += submit(pool, loop, _req(1), _req(2, 2), _req(3, 1))
        gate.release.set()
        await answers(streams)
        assert inst.batches == [["0"], ["3"], ["1"], ["2"]]
        await pool.stop(1)

    run(main)


def test_an_idle_instance_does_not_outrun_a_requests_timeout() -> None:
    """A deadline already past when a worker takes the queue is rejected there, not executed (the
    loop's timer may come later: qa/L0_backend_python bls test_timeout, a 5 us BLS timeout)."""
    inst = FakeInstance()
    ticks = iter(range(0, 10**12, MS))  # every look at the clock is a millisecond later

    async def main(loop: asyncio.AbstractEventLoop) -> None:
        pool = InstancePool(
            "m",
            "1",
            [("m_0", inst)],
            BatchPolicy(),
            ModelStats(),
            loop,
            clock=lambda: next(ticks),
            queue=PolicyQueue(LevelPolicy(default_timeout_ns=10**9, allow_override=True)),
        )
        (resp,) = await answers(submit(pool, loop, _req(1, timeout_us=5)))
        assert resp.error is not None and resp.error.message == "Request timeout expired"
        assert inst.batches == []
        await pool.stop(1)

    run(main)


def test_a_timer_that_fires_early_is_set_again() -> None:
    """uvloop's millisecond timers may fire just before a deadline: the request is still rejected
    when its deadline passes, not left to wait out the execute ahead of it (CI met this once)."""
    gate = Gate()
    inst = FakeInstance(gate)
    now = [0]

    async def main(loop: asyncio.AbstractEventLoop) -> None:
        pool = InstancePool(
            "m",
            "1",
            [("m_0", inst)],
            BatchPolicy(max_batch_size=1),
            ModelStats(),
            loop,
            clock=lambda: now[0],
            # the first request's own timer (60 s) must not be the one that rejects the second
            queue=PolicyQueue(LevelPolicy(default_timeout_ns=60 * 10**9, allow_override=True)),
        )
        (first,) = submit(pool, loop, _req(0))
        await until(gate.started.is_set)
        (late,) = submit(pool, loop, _req(1, timeout_us=2000))  # deadline: 2 ms on the pool's clock
        await asyncio.sleep(0.02)  # its timer fired, more than once, while the clock says 0
        assert not late.done
        now[0] = 2 * MS + 1
        (resp,) = await answers([late])
        assert resp.error is not None and resp.error.message == "Request timeout expired"
        gate.release.set()
        assert [r.error for r in await answers([first])] == [None]
        assert inst.batches == [["0"]]
        await pool.stop(1)

    run(main)
