"""execution_mode auto's decision from synthetic execute samples (wall, CPU of the thread, overlap)."""

from __future__ import annotations

import logging

import pytest

from inferd.scheduling.execution_mode import (
    HELD_SHARE,
    LONG_EXECUTE_NS,
    SAMPLES_NEEDED,
    SHORT_EXECUTES_ENOUGH,
    AutoMode,
)

MS = 1_000_000


def _auto() -> tuple[AutoMode, list[bool]]:
    decisions: list[bool] = []
    return AutoMode("m", decisions.append), decisions


def test_two_instances_taking_turns_on_the_lock_move_to_processes(caplog: pytest.LogCaptureFixture) -> None:
    auto, decisions = _auto()
    caplog.set_level(logging.INFO, "inferd.scheduling")
    for i in range(SAMPLES_NEEDED):
        # 3 ms of CPU each; fully overlapped by the other: one waited its whole turn, the next not at all
        auto.observe(6 * MS if i % 2 else 3 * MS, 3 * MS, 6 * MS if i % 2 else 3 * MS)
        assert decisions == ([] if i < SAMPLES_NEEDED - 1 else [True])
    assert auto.done
    assert "moving its instances to worker processes" in caplog.text
    auto.observe(6 * MS, 3 * MS, 6 * MS)  # decided once
    assert decisions == [True]


def test_executes_side_by_side_keep_threads() -> None:
    auto, decisions = _auto()
    for _ in range(SAMPLES_NEEDED):
        auto.observe(3 * MS, int(2.9 * MS), 3 * MS)  # numpy: the lock let go, no waiting
    assert decisions == [False]


def test_executes_that_wait_on_io_keep_threads() -> None:
    auto, decisions = _auto()
    for _ in range(SAMPLES_NEEDED):
        auto.observe(10 * MS, MS // 10, 10 * MS)  # long, but nearly no CPU: a sleep or a socket
    assert decisions == [False]


def test_the_share_threshold_is_the_boundary() -> None:
    for share, expected in ((HELD_SHARE - 0.05, False), (HELD_SHARE + 0.05, True)):
        auto, decisions = _auto()
        wall = 4 * MS
        cpu = int(wall - share * wall)
        for _ in range(SAMPLES_NEEDED):
            auto.observe(wall, cpu, wall)
        assert decisions == [expected]


def test_executes_that_never_overlap_decide_nothing() -> None:
    auto, decisions = _auto()
    for _ in range(10 * SAMPLES_NEEDED):
        auto.observe(3 * MS, 3 * MS, 0)  # one at a time: processes would not be faster
    assert decisions == [] and not auto.done


def test_short_executes_settle_on_threads() -> None:
    auto, decisions = _auto()
    for _ in range(SHORT_EXECUTES_ENOUGH):
        auto.observe(LONG_EXECUTE_NS // 10, LONG_EXECUTE_NS // 10, LONG_EXECUTE_NS // 10)
    assert decisions == [False]
