"""The execute watchdog: an execute past its limit fails its batch; the pool goes on serving."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest
from poolkit import WAIT_S, FakeInstance, answers, request, run, submit, until

from inferd.core.request import InferRequest
from inferd.core.response import InferResponse
from inferd.core.stats import ModelStats
from inferd.errors import UnavailableError
from inferd.scheduling.instances import InstancePool
from inferd.scheduling.queue import BatchPolicy
from inferd.scheduling.watchdog import Abortable

LIMIT_NS = 50_000_000  # the watchdog looks every 12.5 ms


class Hang:
    """Blocks every execute of request "hang" until released."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()

    def __call__(self, requests: list[InferRequest]) -> None:
        if any(r.id == "hang" for r in requests):
            self.started.set()
            assert self.release.wait(WAIT_S)


class KillableInstance(FakeInstance):
    """A process instance's part: ``abort`` ends the execute in flight with an error."""

    def __init__(self, hang: Hang) -> None:
        super().__init__(hang)
        self.aborted: list[str] = []

    def abort(self, reason: str) -> None:
        self.aborted.append(reason)
        self.fn_release()

    def fn_release(self) -> None:
        assert isinstance(self.fn, Hang)
        self.fn.release.set()

    def execute(self, requests: list[InferRequest]) -> list[InferResponse]:
        out = super().execute(requests)
        if self.aborted:
            raise UnavailableError("the process was killed")
        return out


def _pool(loop: asyncio.AbstractEventLoop, *insts: FakeInstance) -> InstancePool:
    named = [(f"m_{i}", inst) for i, inst in enumerate(insts)]
    return InstancePool("m", "1", named, BatchPolicy(), ModelStats(), loop, execute_timeout_ns=LIMIT_NS)


def test_a_thread_instance_that_hangs_fails_its_request_and_the_other_instance_serves(
    caplog: pytest.LogCaptureFixture,
) -> None:
    hang = Hang()
    first, second = FakeInstance(hang), FakeInstance(hang)

    async def main(loop: asyncio.AbstractEventLoop) -> None:
        pool = _pool(loop, first, second)
        assert not isinstance(first, Abortable)
        (stuck,) = submit(pool, loop, request("hang"))
        (resp,) = await answers([stuck])
        assert isinstance(resp.error, UnavailableError)
        assert resp.error.message == (
            "model 'm' version 1: the execute did not finish within 0.05 s (execute_timeout_secs); "
            "the instance stays busy until it returns"
        )
        assert pool._stats.fail.count == 1 and pool._stats.execution_count == 1
        # the other instance keeps serving while the first is stuck
        assert [r.error for r in await answers(submit(pool, loop, request(1), request(2)))] == [None, None]
        assert second.batches == [["1"], ["2"]]
        with caplog.at_level(logging.WARNING, "inferd.scheduling"):
            hang.release.set()  # what the stuck execute returns now is dropped, and said so
            await until(lambda: "an execute given up on returned" in caplog.text)
        assert pool._stats.success.count == 2 and pool._stats.fail.count == 1
        await pool.stop(1)

    run(main)


def test_when_every_instance_is_stuck_requests_fail_at_once() -> None:
    hang = Hang()
    inst = FakeInstance(hang)

    async def main(loop: asyncio.AbstractEventLoop) -> None:
        pool = _pool(loop, inst)
        stuck, queued = submit(pool, loop, request("hang"), request(1))
        first, behind = await answers([stuck, queued])
        assert first.error is not None and "did not finish within" in first.error.message
        assert behind.error is not None and "every instance is stuck" in behind.error.message
        with pytest.raises(UnavailableError, match="every instance is stuck"):
            submit(pool, loop, request(2))
        hang.release.set()
        await until(lambda: pool.inflight() == 0)
        (later,) = await answers(submit(pool, loop, request(3)))
        assert later.error is None  # back once the execute returned
        assert inst.batches == [["hang"], ["3"]]
        await pool.stop(1)

    run(main)


def test_an_abortable_instance_is_stopped_and_serves_again() -> None:
    hang = Hang()
    inst = KillableInstance(hang)

    async def main(loop: asyncio.AbstractEventLoop) -> None:
        pool = _pool(loop, inst)
        (resp,) = await answers(submit(pool, loop, request("hang")))
        assert resp.error is not None
        assert resp.error.message.endswith("its process is killed and restarts")
        await until(lambda: bool(inst.aborted))  # the batch is answered first, then the instance aborted
        assert inst.aborted == [resp.error.message]
        await until(lambda: pool.inflight() == 0)
        inst.aborted.clear()
        (again,) = await answers(submit(pool, loop, request(1)))
        assert again.error is None
        assert pool._stats.fail.count == 1  # the killed execute's own error is not counted twice
        await pool.stop(1)

    run(main)


def test_a_watched_pool_never_executes_inline_and_is_forgotten_when_it_stops() -> None:
    inst = FakeInstance(inline_ok=True)

    async def main(loop: asyncio.AbstractEventLoop) -> None:
        pool = _pool(loop, inst)
        for i in range(20):
            await answers(submit(pool, loop, request(i)))
        assert not pool.executing_inline
        watchdog = pool._watchdog
        assert watchdog is not None and pool in watchdog._pools
        await pool.stop(1)
        assert pool not in watchdog._pools

    run(main)
