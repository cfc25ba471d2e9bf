"""The process's budget of answers held for clients (core/unsent.py): over and full, the high point,
when freed memory goes back to the system, and the default from the machine's memory."""

from __future__ import annotations

import threading

from inferd.core.unsent import (
    DEFAULT_MAX,
    DEFAULT_MIN,
    TRIM_AFTER,
    UnsentBudget,
    default_limit,
    machine_memory,
)

MiB = 1 << 20


def test_over_past_the_limit_full_past_twice_it() -> None:
    b = UnsentBudget(100)
    b.add(100)
    assert (b.over, b.full) == (False, False)
    b.add(1)
    assert (b.over, b.full) == (True, False)
    b.add(100)
    assert (b.over, b.full) == (True, True)
    b.add(-201)
    assert (b.over, b.full, b.used, b.peak) == (False, False, 0, 201)


def test_no_limit_is_never_over() -> None:
    b = UnsentBudget(0)
    b.add(1 << 40)
    assert not b.over and not b.full and b.peak == 1 << 40


def test_adds_from_many_threads_sum_up() -> None:
    b = UnsentBudget(0)

    def work() -> None:
        for _ in range(10_000):
            b.add(3)
            b.add(-2)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert b.used == 80_000


def test_refusals_say_why() -> None:
    b = UnsentBudget(1000)
    b.add(2500)
    held = b.refusal("this answer was not kept", holding=True)
    assert "holds 2,500 bytes" in held and "--max-unsent-bytes (1,000)" in held and "this connection" in held
    full = b.refusal("this answer was not kept", holding=False)
    assert "more than twice --max-unsent-bytes (1,000)" in full and "try again later" in full
    assert b.refused == 2


def test_memory_goes_back_once_what_was_held_fell_from_a_high_point() -> None:
    b = UnsentBudget(0)
    b.add(TRIM_AFTER // 2)
    b.add(-(TRIM_AFTER // 2))
    assert not b.trim_due()  # not enough was held to be worth it
    b.add(TRIM_AFTER + 4 * MiB)  # 36 MiB
    assert not b.trim_due()  # still held
    b.add(-26 * MiB)
    assert not b.trim_due()  # 10 MiB: more than a quarter of the high point
    b.add(-2 * MiB)
    assert b.trim_due() and not b.trim_due()  # 8 MiB: once, then from the new low point
    b.refusal("this answer was not kept", size=TRIM_AFTER)  # answers made and dropped
    assert b.trim_due()


def test_the_default_is_a_sixteenth_of_the_memory_within_bounds() -> None:
    assert default_limit(16 << 30) == 1 << 30
    assert default_limit(16 << 30, processes=4) == 256 * MiB  # shared out among --workers
    assert default_limit(512 * MiB) == DEFAULT_MIN
    assert default_limit(1 << 40) == DEFAULT_MAX
    assert machine_memory() > 0
