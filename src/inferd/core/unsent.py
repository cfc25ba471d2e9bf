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
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

MiB = 1 << 20
#: the default budget: this share of the memory the process may use, within these bounds
DEFAULT_SHARE = 16
DEFAULT_MIN = 64 * MiB
DEFAULT_MAX = 4096 * MiB
#: the memory limit of the process's cgroup (v2, then v1); "max" or a huge number: none
_CGROUP_LIMITS = (
    Path("/sys/fs/cgroup/memory.max"),
    Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"),
)


class UnsentBudget:
    """The bytes of answers held back for clients, against ``limit`` (0: no limit)."""

    __slots__ = ("_hard", "_lock", "full", "limit", "over", "peak", "refused", "used")

    def __init__(self, limit: int) -> None:
        self._lock = threading.Lock()
        self.limit = limit
        self._hard = 2 * limit
        #: bytes held now, and the most held at once since the start
        self.used = 0
        self.peak = 0
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
            if used > self.peak:
                self.peak = used

    def refusal(self, what: str, holding: bool = True) -> str:
        """Why ``what`` ("the request was not run", "this answer was not kept") was refused: its
        connection holds answers (``holding``), or the budget is full."""
        self.refused += 1
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
