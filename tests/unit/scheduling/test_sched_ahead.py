"""The pool sends a busy instance its next batch ahead (scheduling/ahead.py), with fake lanes."""

from __future__ import annotations

import asyncio
from typing import Any

from poolkit import WAIT_S, FakeInstance, Gate, answers, request, run, submit, until, wait_event

from inferd.core.request import InferRequest
from inferd.core.response import InferResponse
from inferd.core.stats import ModelStats
from inferd.scheduling.instances import InstancePool
from inferd.scheduling.queue import BatchPolicy


class FakeLane(FakeInstance):
    """A FakeInstance that takes batches ahead: records what was reserved, sent, adopted, forgotten."""

    pipelines = True

    def __init__(self, fn: Any = None) -> None:
        super().__init__(fn)
        self.reserved: list[list[str]] = []
        self.sent: list[list[str]] = []
        self.adopted: list[list[str]] = []
        self.forgotten: list[list[str]] = []
        self._ahead: list[list[InferRequest]] = []

    def reserve(self, requests: list[InferRequest]) -> list[InferRequest]:
        self.reserved.append([r.id for r in requests])
        self._ahead.append(requests)
        return requests

    def send_ahead(self, token: list[InferRequest]) -> None:
        self.sent.append([r.id for r in token])

    def forget(self, token: list[InferRequest]) -> None:
        if any(t is token for t in self._ahead):
            self._ahead = [t for t in self._ahead if t is not token]
            self.forgotten.append([r.id for r in token])

    def execute(self, requests: list[InferRequest]) -> list[InferResponse]:
        for t in self._ahead:
            if t == requests:
                self._ahead.remove(t)
                self.adopted.append([r.id for r in requests])
                break
        return super().execute(requests)


def test_a_busy_instance_gets_the_next_request_ahead_and_runs_it_next() -> None:
    gate = Gate()
    lane = FakeLane(gate)

    async def main(loop: asyncio.AbstractEventLoop) -> tuple[list[InferResponse], ModelStats]:
        stats = ModelStats()
        pool = InstancePool("m", "1", [("m_0", lane)], BatchPolicy(), stats, loop)
        first = submit(pool, loop, request("a"))
        await wait_event(gate.started)
        rest = submit(pool, loop, request("b"), request("c"))
        await until(lambda: lane.sent == [["b"]])  # one ahead at a time; c waits in the queue
        assert pool.stats() == {"queued": 1, "executing": 2}
        gate.release.set()
        resps = await answers(first + rest)
        await pool.stop(WAIT_S)
        return resps, stats

    resps, stats = run(main)
    assert [r.id for r in resps] == ["a", "b", "c"] and all(r.error is None for r in resps)
    assert lane.batches == [["a"], ["b"], ["c"]]
    # c went ahead once b ran (taken up from the queue then: one ahead at a time)
    assert lane.adopted == lane.sent == [["b"], ["c"]] and lane.forgotten == []
    assert stats.execution_count == 3


def test_an_idle_instance_takes_the_request_instead() -> None:
    gates = [Gate(), Gate()]
    lanes = [FakeLane(gates[0]), FakeLane(gates[1])]

    async def main(loop: asyncio.AbstractEventLoop) -> None:
        pool = InstancePool(
            "m", "1", [("m_0", lanes[0]), ("m_1", lanes[1])], BatchPolicy(), ModelStats(), loop
        )
        await until(lambda: pool.idle_workers() == 2)
        streams = submit(pool, loop, request("a"))
        await wait_event(gates[0].started)
        streams += submit(pool, loop, request("b"))  # instance 1 is idle: it takes b
        await wait_event(gates[1].started)
        assert lanes[0].reserved == lanes[1].reserved == []
        streams += submit(pool, loop, request("c"))  # both busy: to the one that started first
        await until(lambda: lanes[0].sent == [["c"]])
        assert lanes[1].reserved == []
        gates[0].release.set()
        gates[1].release.set()
        assert all(r.error is None for r in await answers(streams))
        await pool.stop(WAIT_S)

    run(main)
    assert lanes[0].batches == [["a"], ["c"]] and lanes[0].adopted == [["c"]]


def test_a_request_cancelled_while_ahead_is_dropped_and_forgotten() -> None:
    gate = Gate()
    lane = FakeLane(gate)

    async def main(loop: asyncio.AbstractEventLoop) -> list[InferResponse]:
        pool = InstancePool("m", "1", [("m_0", lane)], BatchPolicy(), ModelStats(), loop)
        streams = submit(pool, loop, request("a"))
        await wait_event(gate.started)
        streams += submit(pool, loop, request("b"))
        await until(lambda: lane.sent == [["b"]])
        streams[1].cancel("the client went away")
        gate.release.set()
        await until(lambda: lane.forgotten == [["b"]])
        resps = await answers(streams[:1])
        await pool.stop(WAIT_S)
        return resps

    run(main)
    assert lane.batches == [["a"]] and lane.adopted == []


def _nothing_ahead(policy: BatchPolicy, **kwargs: Any) -> None:
    gate = Gate()
    lane = FakeLane(gate)

    async def main(loop: asyncio.AbstractEventLoop) -> None:
        pool = InstancePool("m", "1", [("m_0", lane)], policy, ModelStats(), loop, **kwargs)
        streams = submit(pool, loop, request("a"))
        await wait_event(gate.started)
        streams += submit(pool, loop, request("b"))
        await until(lambda: pool.stats() == {"queued": 1, "executing": 1})
        gate.release.set()
        assert all(r.error is None for r in await answers(streams))
        await pool.stop(WAIT_S)

    run(main)
    assert lane.reserved == [] and lane.batches == [["a"], ["b"]]


def test_nothing_is_sent_ahead_under_an_execute_timeout() -> None:
    _nothing_ahead(BatchPolicy(), execute_timeout_ns=60 * 10**9)


def test_nothing_is_sent_ahead_to_a_dynamic_batcher() -> None:
    # the next batch forms when the instance frees up (the reference's rule): it may grow meanwhile
    _nothing_ahead(BatchPolicy(max_batch_size=4))


def test_an_instance_that_does_not_pipeline_gets_nothing_ahead() -> None:
    gate = Gate()
    lane = FakeLane(gate)
    lane.pipelines = False  # (a decoupled model's process instance)

    async def main(loop: asyncio.AbstractEventLoop) -> None:
        pool = InstancePool("m", "1", [("m_0", lane)], BatchPolicy(), ModelStats(), loop)
        streams = submit(pool, loop, request("a"))
        await wait_event(gate.started)
        streams += submit(pool, loop, request("b"))
        await until(lambda: pool.stats() == {"queued": 1, "executing": 1})
        gate.release.set()
        assert all(r.error is None for r in await answers(streams))
        await pool.stop(WAIT_S)

    run(main)
    assert lane.reserved == []
