"""The loop guard (scheduling/inline.py): an inline execute that runs away is interrupted, its batch
fails UNAVAILABLE and the pool leaves the event loop for good; a loop that beats is left alone."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from poolkit import WAIT_S, FakeInstance, answers, request, run, submit

from inferd.core.request import InferRequest
from inferd.core.stats import ModelStats
from inferd.errors import UnavailableError
from inferd.scheduling import inline, instances
from inferd.scheduling.inline import LOOP_GUARD
from inferd.scheduling.instances import InstancePool
from inferd.scheduling.queue import BatchPolicy


def _runaway(flag: threading.Event, seconds: float | None) -> FakeInstance:
    """An instance whose executes are short until ``flag``: then pure Python work for ``seconds``
    (None: forever)."""

    def work(_: list[InferRequest]) -> None:
        if not flag.is_set():
            return
        end = None if seconds is None else time.monotonic() + seconds
        n = 0
        while end is None or time.monotonic() < end:
            n += 1

    return FakeInstance(work, inline_ok=True)


def test_a_runaway_inline_execute_is_interrupted_and_the_pool_leaves_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(inline, "OVERRUN_S", 0.3)
    monkeypatch.setattr(instances, "OVERRUN_S", 0.3)
    flag = threading.Event()
    inst = _runaway(flag, None)
    ticks: list[float] = []

    async def main(loop: asyncio.AbstractEventLoop) -> tuple[int, str, float]:
        pool = InstancePool("m", "1", [("m_0", inst)], BatchPolicy(), ModelStats(), loop)
        for i in range(inline.INLINE_AFTER + 1):  # the last one inline
            await answers(submit(pool, loop, request(i)))
        flag.set()
        loop.call_later(0.01, lambda: ticks.append(time.monotonic()))  # due while the execute runs
        t0 = time.monotonic()
        (resp,) = await answers(submit(pool, loop, request("runaway")))
        flag.clear()
        (after,) = await answers(submit(pool, loop, request("after")))  # executes in a thread
        assert after.error is None
        await pool.stop(WAIT_S)
        assert isinstance(resp.error, UnavailableError)
        return threading.get_ident(), resp.error.message, ticks[0] - t0

    loop_thread, message, stalled = run(main)
    assert "the execute ran longer than 0.3 s on the event loop" in message
    assert "run in threads from now on" in message
    threads = [t for _, t in inst.calls]
    assert threads[-2] == loop_thread and threads[-1] != loop_thread  # "runaway" inline, "after" not
    assert 0.3 <= stalled < 0.3 + 1.0  # the loop's own timer waited for the interrupt, no longer


def test_a_long_inline_execute_within_the_bound_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(inline, "OVERRUN_S", 2.0)
    flag = threading.Event()
    inst = _runaway(flag, 0.3)

    async def main(loop: asyncio.AbstractEventLoop) -> None:
        pool = InstancePool("m", "1", [("m_0", inst)], BatchPolicy(), ModelStats(), loop)
        for i in range(inline.INLINE_AFTER + 1):
            await answers(submit(pool, loop, request(i)))
        assert loop in LOOP_GUARD._beats  # watched while inline
        flag.set()
        (resp,) = await answers(submit(pool, loop, request("long")))
        assert resp.error is None  # (the pool may leave the loop after it: handing the GIL over is a wait)
        await pool.stop(WAIT_S)
        assert loop not in LOOP_GUARD._beats  # and no more once its last inline pool stopped

    run(main)
