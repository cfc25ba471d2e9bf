"""Waiting in tests: the one place that waits for something to happen.

A test waits on a condition (a file appears, a log line is written, a counter moves, a thread's
event is set), never for a fixed time: ``wait_until`` asks the condition again and again, a few
milliseconds apart, until it holds or its deadline passes, and then fails the test with what it
waited for (and, given ``detail``, what the world looked like then). An event is waited on as an
event (no polling). A server's own start is waited for by its progress instead
(``conftest.InferdProcess.wait_starting``): a loaded machine makes it slow, not stuck.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

#: how long a wait lasts unless the caller says: what a loaded 2-core machine needs, never a
#: measure of speed (performance is measured, not asserted)
WAIT_S = 30.0
#: how often a condition is asked again
POLL_S = 0.02


class WaitTimeout(AssertionError):
    """What a test waited for did not happen in time (an AssertionError: the test fails)."""


def wait_until(
    condition: Callable[[], T | None],
    what: str,
    timeout: float = WAIT_S,
    *,
    interval: float = POLL_S,
    ignore: tuple[type[BaseException], ...] = (),
    detail: Callable[[], object] | None = None,
) -> T:
    """``condition()``'s first true value, asked every ``interval`` s for ``timeout`` s; else
    WaitTimeout naming ``what`` (and ``detail()``). An exception of a type in ``ignore`` counts as
    "not yet" (a port that does not listen yet), and is named when the wait fails."""
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    while True:
        try:
            value = condition()
        except ignore as e:
            last_error = e
        else:
            if value:
                return value
        if time.monotonic() >= deadline:
            raise _timeout(what, timeout, last_error, detail)
        time.sleep(interval)


def _timeout(
    what: str,
    timeout: float,
    last_error: BaseException | None = None,
    detail: Callable[[], object] | None = None,
) -> WaitTimeout:
    message = f"timed out after {timeout:g} s waiting for {what}"
    if last_error is not None:
        message += f" (last: {type(last_error).__name__}: {last_error})"
    if detail is not None:
        message += f"\n{detail()}"
    return WaitTimeout(message)


def wait_for_event(event: threading.Event, what: str, timeout: float = WAIT_S) -> None:
    """``event`` set within ``timeout`` s, else WaitTimeout."""
    if not event.wait(timeout):
        raise WaitTimeout(f"timed out after {timeout:g} s waiting for {what}")


def read_text(path: Path) -> str:
    """The file's text, "" while it does not exist."""
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""


def wait_for_file(path: Path, timeout: float = WAIT_S, *, interval: float = POLL_S) -> None:
    """``path`` exists within ``timeout`` s (a model's "I got here" file), else WaitTimeout."""
    wait_until(path.exists, f"{path} to appear", timeout, interval=interval)


def wait_for_text(
    read: Path | Callable[[], str], needle: str, timeout: float = WAIT_S, *, what: str = ""
) -> str:
    """The text (of the file ``read``, or what ``read()`` returns, e.g. a server's log) once it
    holds ``needle``, else WaitTimeout showing its end."""
    get: Callable[[], str] = (lambda: read_text(read)) if isinstance(read, Path) else read
    return wait_until(
        lambda: text if needle in (text := get()) else "",
        what or f"{needle!r} to be written",
        timeout,
        detail=lambda: f"it ends with:\n{get()[-3000:]}",
    )


def wait_settled(
    read: Callable[[], int], tolerance: int = 0, quiet_s: float = 1.0, limit_s: float = 60.0
) -> int:
    """``read()`` once it stayed within ``tolerance`` for ``quiet_s`` (whatever made it move
    stopped), at most ``limit_s``: the larger of its last two readings (no failure: the caller
    asserts on the value)."""
    last, since = read(), time.monotonic()
    end = since + limit_s
    while time.monotonic() < end:
        time.sleep(0.1)
        now = read()
        if abs(now - last) > tolerance:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            break
    return max(last, read())
