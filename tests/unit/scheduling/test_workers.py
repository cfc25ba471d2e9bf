"""An InstancePool's instances changing while it serves (scheduling/workers.py): added ones take
requests at once, removed ones take nothing new, finish what they run and unload before
``remove_instances`` returns."""

from __future__ import annotations

import asyncio

from poolkit import FakeInstance, Gate, answers, request, run, submit, until, wait_event

from inferd.backends.base import BackendInstance
from inferd.core.stats import ModelStats
from inferd.repository._proto import pb2
from inferd.scheduling.instances import InstancePool
from inferd.scheduling.queue import BatchPolicy
from inferd.scheduling.rate_limiter import RateLimiter, admit


class Counted(FakeInstance):
    """A FakeInstance that counts its unloads."""

    def __init__(self, fn: Gate | None = None) -> None:
        super().__init__(fn)
        self.unloads = 0

    def unload(self) -> None:
        self.unloads += 1


def _pool(loop: asyncio.AbstractEventLoop, *instances: Counted) -> InstancePool:
    named: list[tuple[str, BackendInstance]] = [(f"m_0_{i}", inst) for i, inst in enumerate(instances)]
    return InstancePool("m", "1", named, BatchPolicy(), ModelStats(), loop)


def test_a_removed_instance_finishes_its_batch_then_unloads_and_the_others_serve() -> None:
    gate = Gate()
    busy, other, added = Counted(gate), Counted(), Counted()

    async def go(loop: asyncio.AbstractEventLoop) -> None:
        pool = _pool(loop, busy, other)
        first = submit(pool, loop, request("r1"))  # the lowest idle instance: ``busy``
        await wait_event(gate.started)
        assert pool.add_instances([("m_0_2", added)]) == [2]
        removing = asyncio.create_task(pool.remove_instances([0], 10))
        await asyncio.sleep(0.05)
        assert not removing.done()  # its batch is still running
        later = submit(pool, loop, *(request(f"r{i}") for i in range(2, 8)))
        assert all(a.error is None for a in await answers(later))
        assert busy.batches == [["r1"]]  # retired: nothing new went to it
        assert other.batches or added.batches
        gate.release.set()
        assert (await answers(first))[0].error is None
        await asyncio.wait_for(removing, 10)
        assert busy.unloads == 1 and other.unloads == added.unloads == 0
        await until(lambda: pool.idle_workers() == 2)
        await pool.stop(1)
        assert (busy.unloads, other.unloads, added.unloads) == (1, 1, 1)

    run(go)


def test_work_in_flight_on_a_kept_instance_does_not_hold_the_update() -> None:
    gate = Gate()
    busy, idle = Counted(gate), Counted()

    async def go(loop: asyncio.AbstractEventLoop) -> None:
        pool = _pool(loop, busy, idle)
        first = submit(pool, loop, request("r1"))
        await wait_event(gate.started)
        pool.add_instances([("m_0_2", Counted())])
        await asyncio.wait_for(pool.remove_instances([1], 10), 5)  # the idle one: at once
        assert idle.unloads == 1 and not first[0].done
        gate.release.set()
        assert (await answers(first))[0].error is None
        await pool.stop(1)

    run(go)


def test_under_the_rate_limiter_added_instances_take_turns_and_removed_ones_leave() -> None:
    limiter = RateLimiter()
    first, added = Counted(), Counted()

    async def go(loop: asyncio.AbstractEventLoop) -> None:
        gate = admit(limiter, [("m_0_0", 0, None)])
        pool = InstancePool("m", "1", [("m_0_0", first)], BatchPolicy(), ModelStats(), loop, gate=gate)
        more = admit(limiter, [("m_0_1", 0, _asks(R1=3))])
        assert pool.add_instances([("m_0_1", added)], more) == [1]
        assert limiter.limits() == {0: {"R1": 3}}
        await asyncio.wait_for(pool.remove_instances([0], 10), 10)
        assert first.unloads == 1 and limiter.limits() == {0: {"R1": 3}}
        got = await answers(submit(pool, loop, request("r1")))  # the added one's turn comes
        assert got[0].error is None and added.batches == [["r1"]]
        await asyncio.wait_for(pool.remove_instances([1], 10), 10)
        assert added.unloads == 1 and limiter.limits() == {}
        await pool.stop(1)

    run(go)


def _asks(**counts: int) -> pb2.ModelRateLimiter:
    msg = pb2.ModelRateLimiter()
    for name, count in counts.items():
        msg.resources.add(name=name, count=count)
    return msg
