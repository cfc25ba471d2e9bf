"""tests/waiting.py, the tests' one way to wait: it returns what held, and fails saying what it
waited for."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from waiting import WaitTimeout, wait_for_event, wait_for_file, wait_for_text, wait_until


def test_wait_until_returns_the_first_true_value() -> None:
    calls = iter([0, None, "", 7, 8])
    assert wait_until(lambda: next(calls), "a value", 5, interval=0) == 7


def test_wait_until_fails_with_what_it_waited_for_and_the_detail() -> None:
    with pytest.raises(WaitTimeout, match=r"timed out after 0.05 s waiting for the moon\nstill dark"):
        wait_until(lambda: False, "the moon", 0.05, detail=lambda: "still dark")


def test_an_ignored_exception_is_not_yet_and_is_named_at_the_end() -> None:
    def refused() -> bool:
        raise ConnectionRefusedError("nobody listens")

    with pytest.raises(WaitTimeout, match=r"\(last: ConnectionRefusedError: nobody listens\)"):
        wait_until(refused, "a listener", 0.05, ignore=(OSError,))
    with pytest.raises(ZeroDivisionError):  # any other exception ends the wait at once
        wait_until(lambda: 1 / 0, "nothing", 5)


def test_events_files_and_text(tmp_path: Path) -> None:
    event = threading.Event()
    threading.Timer(0.01, event.set).start()
    wait_for_event(event, "the timer")
    with pytest.raises(WaitTimeout, match="waiting for a set event"):
        wait_for_event(threading.Event(), "a set event", 0.01)
    log = tmp_path / "log"
    with pytest.raises(WaitTimeout, match=f"{log} to appear"):
        wait_for_file(log, 0.01)
    log.write_text("loading\nready in 3 ms\n")
    wait_for_file(log, 0.01)
    assert wait_for_text(log, "ready in", 0.01) == "loading\nready in 3 ms\n"
    with pytest.raises(WaitTimeout, match="'stopped' to be written") as e:
        wait_for_text(log, "stopped", 0.01)
    assert "ready in 3 ms" in str(e.value)  # the end of what it read
