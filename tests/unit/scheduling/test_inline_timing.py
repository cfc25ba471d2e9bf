"""Timing inline executes (scheduling/inline.py, execute.py): after a run of short executes the next
ones are not timed (no getrusage, no thread CPU clock: two system calls a batch), a long one among
them has the next ones timed again, and a model that blocks after such a run still goes back to
threads, two executes later (a lone block is not enough: ``BLOCKED_WINDOW``)."""

from __future__ import annotations

import asyncio
import resource
import threading
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
from poolkit import WAIT_S, FakeInstance, answers, request, run, submit

from inferd.core.stats import ModelStats
from inferd.scheduling import execute, inline
from inferd.scheduling.instances import InstancePool
from inferd.scheduling.queue import BatchPolicy


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """getrusage as the pool reads it, counted (the real one answers)."""
    calls = [0]
    real: Callable[[int], Any] = resource.getrusage

    def counted(who: int) -> Any:
        calls[0] += 1
        return real(who)

    monkeypatch.setattr(resource, "getrusage", counted)
    return calls


def test_a_run_of_short_executes_is_not_timed_until_a_long_one(monkeypatch: pytest.MonkeyPatch) -> None:
    # every execute short whatever the machine's load: the count of timed ones is exact
    monkeypatch.setattr(inline, "SMALL_NS", 10**12)
    monkeypatch.setattr(execute, "SMALL_NS", 10**12)
    long_one = threading.Event()
    inst = FakeInstance(lambda _: time.sleep(0.001) if long_one.is_set() else None, inline_ok=True)
    readings: list[int] = []

    async def main(loop: asyncio.AbstractEventLoop) -> int:
        pool = InstancePool("m", "1", [("m_0", inst)], BatchPolicy(), ModelStats(), loop)
        for i in range(inline.INLINE_AFTER + 1):  # warm-up in threads, then inline
            await answers(submit(pool, loop, request(i)))
        calls = _counting(monkeypatch)
        for i in range(inline.UNTIMED_AFTER):
            await answers(submit(pool, loop, request(f"short{i}")))
        readings.append(calls[0])
        for i in range(5):
            await answers(submit(pool, loop, request(f"untimed{i}")))
        readings.append(calls[0])
        monkeypatch.setattr(inline, "SMALL_NS", 100_000)  # the next one is long
        long_one.set()
        await answers(submit(pool, loop, request("long")))
        long_one.clear()
        readings.append(calls[0])
        await answers(submit(pool, loop, request("after")))
        readings.append(calls[0])
        await pool.stop(WAIT_S)
        return threading.get_ident()

    loop_thread = run(main)
    assert all(t == loop_thread for _, t in inst.calls[-(inline.UNTIMED_AFTER + 7) :])
    # timed until the run was long enough (one reading an execute: short ones need no second)
    assert 0 < readings[0] <= inline.UNTIMED_AFTER
    assert readings[1] == readings[0]  # then untimed
    assert readings[2] == readings[1]  # the long one came untimed too...
    assert readings[3] == readings[2] + 1  # ...and the one after it is timed again


def test_a_model_that_blocks_after_a_run_of_short_executes_goes_back_to_threads() -> None:
    block = threading.Event()
    inst = FakeInstance(lambda _: time.sleep(0.01) if block.is_set() else None, inline_ok=True)
    untimed: list[bool] = []

    async def main(loop: asyncio.AbstractEventLoop) -> int:
        pool = InstancePool("m", "1", [("m_0", inst)], BatchPolicy(), ModelStats(), loop)
        mode = pool._inline.mode
        for i in range(inline.INLINE_AFTER + 1):
            await answers(submit(pool, loop, request(i)))
        # short executes until the run is long enough (a loaded machine may make one long)
        for i in range(50 * inline.UNTIMED_AFTER):
            if mode.untimed:
                break
            await answers(submit(pool, loop, request(f"short{i}")))
        untimed.append(mode.untimed)
        block.set()
        for i in range(4):
            await answers(submit(pool, loop, request(f"slow{i}")))
        await pool.stop(WAIT_S)
        return threading.get_ident()

    loop_thread = run(main)
    assert untimed == [True]
    threads = [t for _, t in inst.calls[-4:]]
    # the first blocking one came untimed (its wall time taken for CPU), the next two were timed and
    # seen blocked (a lone block is not enough: BLOCKED_WINDOW): the last ran in a thread
    assert threads[:3] == [loop_thread] * 3
    assert threads[3] != loop_thread


def test_a_lone_block_keeps_the_pool_inline() -> None:
    """One execute that blocks (most often the loop waiting for the interpreter lock another thread
    took) leaves the pool on the loop; a second within BLOCKED_WINDOW inline executes sends it back."""
    mode = inline.InlineMode(time.monotonic_ns)
    seen = [mode.observe(20_000, True, True, True)]
    seen += [mode.observe(20_000, False, True, True) for _ in range(inline.BLOCKED_WINDOW)]
    seen.append(mode.observe(20_000, True, True, True))  # BLOCKED_WINDOW + 1 after the first
    seen.append(mode.observe(20_000, False, True, True))
    seen.append(mode.observe(20_000, True, True, True))  # two after the last
    assert seen[:-1] == [None] * (inline.BLOCKED_WINDOW + 3)
    assert seen[-1] is False


def test_a_pool_whose_execute_blocks_once_stays_on_the_loop() -> None:
    block = threading.Event()

    def execute(_: object) -> None:
        if block.is_set():
            block.clear()
            time.sleep(0.01)  # blocks once: a voluntary switch, 10 ms off-CPU

    inst = FakeInstance(execute, inline_ok=True)

    async def main(loop: asyncio.AbstractEventLoop) -> int:
        pool = InstancePool("m", "1", [("m_0", inst)], BatchPolicy(), ModelStats(), loop)
        for i in range(inline.INLINE_AFTER + 2):  # warm-up in threads, then inline (timed)
            await answers(submit(pool, loop, request(i)))
        block.set()
        for i in range(3):
            await answers(submit(pool, loop, request(f"after{i}")))
        await pool.stop(WAIT_S)
        return threading.get_ident()

    loop_thread = run(main)
    assert [t for _, t in inst.calls[-4:]] == [loop_thread] * 4


def test_untimed_executes_read_no_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """What an untimed execute saves: neither getrusage nor the thread's CPU clock is read."""
    monkeypatch.setattr(inline, "SMALL_NS", 10**12)
    monkeypatch.setattr(execute, "SMALL_NS", 10**12)
    inst = FakeInstance(inline_ok=True)
    seen: list[tuple[int, int]] = []

    async def main(loop: asyncio.AbstractEventLoop) -> None:
        pool = InstancePool("m", "1", [("m_0", inst)], BatchPolicy(), ModelStats(), loop)
        for i in range(inline.INLINE_AFTER + 1 + inline.UNTIMED_AFTER):
            await answers(submit(pool, loop, request(i)))
        assert pool._inline.mode.untimed
        counts = SimpleNamespace(rusage=0, cpu=0)
        real_cpu = time.thread_time_ns

        def rusage(who: int) -> Any:
            counts.rusage += 1
            return resource.struct_rusage((0.0,) * 16)

        def cpu() -> int:
            counts.cpu += 1
            return real_cpu()

        monkeypatch.setattr(resource, "getrusage", rusage)
        monkeypatch.setattr(time, "thread_time_ns", cpu)
        for i in range(5):
            await answers(submit(pool, loop, request(f"untimed{i}")))
        seen.append((counts.rusage, counts.cpu))
        monkeypatch.undo()
        await pool.stop(WAIT_S)

    run(main)
    assert seen == [(0, 0)]


def test_blocks_while_the_loop_guard_takes_its_turn_are_not_counted() -> None:
    """The loop thread waiting while the loop guard holds the interpreter lock (its beat, under load)
    is not the model blocking: the guard's turns (``LoopGuard.turns``) during an execute discount its
    block, however many in a row."""
    guard = inline.LOOP_GUARD
    with_guard = threading.Event()

    def execute(_: object) -> None:
        if with_guard.is_set():
            guard.turns += 1  # what the guard's thread does when it takes the lock mid-execute
            time.sleep(0.01)  # the loop off-CPU meanwhile: a voluntary switch

    inst = FakeInstance(execute, inline_ok=True)

    async def main(loop: asyncio.AbstractEventLoop) -> int:
        pool = InstancePool("m", "1", [("m_0", inst)], BatchPolicy(), ModelStats(), loop)
        for i in range(inline.INLINE_AFTER + 2):  # warm-up in threads, then inline (timed)
            await answers(submit(pool, loop, request(i)))
        turns = guard.turns
        deadline = time.monotonic() + WAIT_S
        while guard.turns == turns and time.monotonic() < deadline:  # the real guard beats while inline
            await asyncio.sleep(0.01)
        assert guard.turns > turns
        with_guard.set()
        for i in range(4):
            await answers(submit(pool, loop, request(f"guarded{i}")))
        await pool.stop(WAIT_S)
        return threading.get_ident()

    loop_thread = run(main)
    assert [t for _, t in inst.calls[-5:]] == [loop_thread] * 5
