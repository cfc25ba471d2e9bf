"""One budget for the response bytes a server process holds back for clients that do not read them.

Answers are produced before their clients read them; a client that reads slowly, or not at all,
leaves them in the server: in a connection's transport past its high-water mark, behind an earlier
answer of a pipelined HTTP connection, in an HTTP/2 stream waiting for the client's send window, in
a decoupled model's stream not taken yet. ``UnsentBudget`` sums all of these over every connection of
both front ends (``--max-unsent-bytes``); the composition root (``runtime.py``) makes one and hands it
to the core (stream windows) and to the front ends. Past it (``over``), the front ends stop giving
work to the connections that hold bytes already (``frontends/flow.py`` says how), and a stream's
sender waits; past twice the limit (``full``) no large answer is kept for any connection, so that
many connections holding one answer each cannot pass that either.

Updates come from the loop's thread and from the threads of models sending decoupled responses:
``add`` takes a lock. Nothing is counted on the way of an answer its client takes at once, so a
request that is not held back costs one read of ``over``.

Memory given back to the system: the answers a burst held (and those made for it and refused)
were freed once their connections closed, but glibc keeps freed pages in its arenas, and after
200 connections of 8 answers of 1 MiB the RSS stayed 100-260 MiB over idle. ``trim_forever`` (the
Runtime runs it) hands them back to the system (``malloc_trim``) once what was held has fallen to a
quarter of its high point, when that was ``TRIM_AFTER`` or more, and after that many bytes of
answers were refused (made, then dropped): at most once a second, and off the loop's thread.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import threading
from collections.abc import Callable
from pathlib import Path

MiB = 1 << 20
#: the default budget: this share of the memory the process may use, within these bounds
DEFAULT_SHARE = 16
DEFAULT_MIN = 64 * MiB
DEFAULT_MAX = 4096 * MiB
#: what was held at its high point, past which its fall gives the freed memory back to the system
TRIM_AFTER = 32 * MiB
#: how often ``trim_forever`` looks
TRIM_CHECK_S = 1.0
#: the memory limit of the process's cgroup (v2, then v1); "max" or a huge number: none
_CGROUP_LIMITS = (
    Path("/sys/fs/cgroup/memory.max"),
    Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"),
)


class UnsentBudget:
    """The bytes of answers held back for clients, against ``limit`` (0: no limit)."""

    __slots__ = ("_dropped", "_hard", "_high", "_lock", "full", "limit", "over", "peak", "refused", "used")

    def __init__(self, limit: int) -> None:
        self._lock = threading.Lock()
        self.limit = limit
        self._hard = 2 * limit
        #: bytes held now, and the most held at once since the start
        self.used = 0
        self.peak = 0
        self._high = 0  # the most held since the memory was last given back
        self._dropped = 0  # bytes of answers refused (made, then freed) since then
        #: past ``limit``, and past twice it (what the front ends read on their way: ``full`` only
        #: once ``over``)
        self.over = False
        self.full = False
        #: requests and answers refused for being over the budget
        self.refused = 0

    def add(self, delta: int) -> None:
        """``delta`` bytes more held (fewer, when negative); from any thread."""
        with self._lock:
            used = self.used + delta
            self.used = used
            self.over = 0 < self.limit < used
            self.full = self.over and used > self._hard
            if used > self._high:
                self._high = used
                if used > self.peak:
                    self.peak = used

    def trim_due(self) -> bool:
        """Whether what was held fell far enough from a high enough point to give memory back now
        (then the high point starts again from here)."""
        with self._lock:
            high = self._high
            if self._dropped < TRIM_AFTER and (high < TRIM_AFTER or 4 * self.used > high):
                return False
            self._high = self.used
            self._dropped = 0
            return True

    def refusal(self, what: str, holding: bool = True, size: int = 0) -> str:
        """Why ``what`` ("the request was not run", "this answer was not kept": ``size`` bytes made
        and dropped) was refused: its connection holds answers (``holding``), or the budget is full."""
        self.refused += 1
        self._dropped += size
        held = f"the server holds {self.used:,} bytes of answers that their clients have not read"
        if holding:
            return (
                f"{held}, more than --max-unsent-bytes ({self.limit:,}), and this connection has answers "
                f"unread: {what}; read them, then try again"
            )
        return f"{held}, more than twice --max-unsent-bytes ({self.limit:,}): {what}; try again later"

    def metric_lines(self) -> list[str]:
        """Prometheus families: what is held, the most held, the limit, the refusals."""
        return [
            "# HELP inferd_unsent_response_bytes Bytes of answers held for clients that have not read them",
            "# TYPE inferd_unsent_response_bytes gauge",
            f"inferd_unsent_response_bytes {self.used}",
            "# HELP inferd_unsent_response_bytes_peak The most bytes of answers held at once since the start",
            "# TYPE inferd_unsent_response_bytes_peak gauge",
            f"inferd_unsent_response_bytes_peak {self.peak}",
            "# HELP inferd_unsent_response_bytes_limit The --max-unsent-bytes of this process (0: none)",
            "# TYPE inferd_unsent_response_bytes_limit gauge",
            f"inferd_unsent_response_bytes_limit {self.limit}",
            "# HELP inferd_unsent_refusals Requests and answers refused past --max-unsent-bytes",
            "# TYPE inferd_unsent_refusals counter",
            f"inferd_unsent_refusals {self.refused}",
        ]


def machine_memory() -> int:
    """The memory this process may use: the machine's, or its cgroup's limit when lower."""
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        total = 0
    for path in _CGROUP_LIMITS:
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text.isdigit() and (not total or int(text) < total):
            total = int(text)
        break
    return total


def default_limit(memory: int | None = None, processes: int = 1) -> int:
    """``--max-unsent-bytes`` when not set: a sixteenth of ``memory`` (``machine_memory()``) within
    64 MiB and 4 GiB, shared out among ``processes`` (``--workers``)."""
    memory = machine_memory() if memory is None else memory
    share = min(max(memory // DEFAULT_SHARE, DEFAULT_MIN), DEFAULT_MAX)
    return max(share // max(1, processes), MiB)


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim`` (None elsewhere: musl, macOS)."""
    try:
        trim: Callable[[int], int] = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    return trim


async def trim_forever(budget: UnsentBudget) -> None:
    """Every ``TRIM_CHECK_S``: once ``budget.trim_due()``, the allocator's free memory goes back to
    the system (in a thread: it walks every arena)."""
    trim = _malloc_trim()
    if trim is None:
        return
    while True:
        await asyncio.sleep(TRIM_CHECK_S)
        if budget.trim_due():
            await asyncio.to_thread(trim, 0)
