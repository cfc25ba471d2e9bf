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
    # the first blocking one came untimed (its wall time taken for CPU), the next was timed and seen
    # blocked (and the one after it, if the loop guard took a turn in the first: BLOCKED_WINDOW): the
    # pool went back to threads
    assert threads[:2] == [loop_thread, loop_thread]
    assert threads[3] != loop_thread


def test_a_lone_block_in_a_guard_turn_keeps_the_pool_inline() -> None:
    """A block while the loop guard took a turn on the interpreter lock (most often the loop waiting
    for the guard) leaves the pool on the loop; a second within BLOCKED_WINDOW inline executes sends
    it back; a block without a guard turn sends it back at once."""
    mode = inline.InlineMode(time.monotonic_ns)
    seen = [mode.observe(20_000, True, True, True, True)]
    seen += [mode.observe(20_000, False, True, True) for _ in range(inline.BLOCKED_WINDOW)]
    seen.append(mode.observe(20_000, True, True, True, True))  # BLOCKED_WINDOW + 1 after the first
    seen.append(mode.observe(20_000, False, True, True))
    seen.append(mode.observe(20_000, True, True, True, True))  # two after the last
    assert seen[:-1] == [None] * (inline.BLOCKED_WINDOW + 3)
    assert seen[-1] is False
    assert inline.InlineMode(time.monotonic_ns).observe(20_000, True, True, True) is False


def test_a_block_in_a_guard_turn_keeps_the_pool_on_the_loop() -> None:
    """What the loop guard does under load: it takes the interpreter lock during an inline execute
    and the loop waits off-CPU (a voluntary switch). Once, the pool stays on the loop; a model that
    blocks in every execute with a guard turn in each (one sleeping a beat or longer) still leaves."""
    guard = inline.LOOP_GUARD
    once = threading.Event()
    always = threading.Event()

    def execute(_: object) -> None:
        if once.is_set() or always.is_set():
            once.clear()
            guard.turns += 1  # the guard's thread took the lock mid-execute
            time.sleep(0.01)  # the loop off-CPU meanwhile: a voluntary switch

    inst = FakeInstance(execute, inline_ok=True)
    after_once: list[int] = []

    async def main(loop: asyncio.AbstractEventLoop) -> int:
        pool = InstancePool("m", "1", [("m_0", inst)], BatchPolicy(), ModelStats(), loop)
        for i in range(inline.INLINE_AFTER + 2):  # warm-up in threads, then inline (timed)
            await answers(submit(pool, loop, request(i)))
        turns = guard.turns
        deadline = time.monotonic() + WAIT_S
        while guard.turns == turns and time.monotonic() < deadline:  # the real guard beats while inline
            await asyncio.sleep(0.01)
        assert guard.turns > turns
        once.set()
        for i in range(3):
            await answers(submit(pool, loop, request(f"once{i}")))
        after_once.append(len(inst.calls))
        always.set()
        for i in range(3):
            await answers(submit(pool, loop, request(f"always{i}")))
        await pool.stop(WAIT_S)
        return threading.get_ident()

    loop_thread = run(main)
    threads = [t for _, t in inst.calls]
    assert threads[after_once[0] - 4 : after_once[0]] == [loop_thread] * 4
    assert threads[after_once[0]] == loop_thread  # the first always: within BLOCKED_WINDOW of once's
    assert threads[-1] != loop_thread


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
