"""When an instance pool runs its executes on the event loop (inline mode), and when it goes back.

A backend whose instances hold the GIL anyway (Python models) gains nothing from a worker thread,
whose hand-off costs more than a small ``execute``. After ``INLINE_AFTER`` warm-up executions in
threads (none using BLS) averaging under ``INLINE_MAX_NS`` the pool tries batches on the event loop,
and goes back to threads when an execute blocks (a voluntary context switch longer than ``SMALL_NS``)
or ``SLOW_RUN`` executes in a row take more than ``INLINE_MAX_NS`` of CPU, trying again
``PROBE_EVERY_NS`` later (the measurements and why: ARCHITECTURE.md, "Inline mode for short executes").
"""

from __future__ import annotations

from collections.abc import Callable

INLINE_AFTER = 4
INLINE_MAX_NS = 2_000_000
SLOW_RUN = 3
SMALL_NS = 50_000  # a wait this short costs less than a thread hand-off
PROBE_EVERY_NS = 10_000_000_000


class InlineMode:
    """The measurements behind the switch; ``observe`` says when to switch (the pool switches)."""

    __slots__ = (
        "_clock",
        "_execs",
        "_inline_execs",
        "_next_probe_ns",
        "_slow_run",
        "_thread_ewma_ns",
        "ewma_ns",
    )

    def __init__(self, clock: Callable[[], int]) -> None:
        self._clock = clock
        self.ewma_ns = 0.0  # inline executes: the loop thread's CPU
        self._thread_ewma_ns = 0.0  # threaded executes: wall time
        self._slow_run = 0
        self._execs = 0  # threaded executions since the last switch
        self._inline_execs = 0
        self._next_probe_ns = 0

    def reset(self) -> None:
        """The pool switched: count afresh."""
        self._execs = 0
        self._inline_execs = 0
        self._slow_run = 0

    def observe(self, ns: int, blocked: bool, inline: bool, inline_now: bool) -> bool | None:
        """One execute (inline: its CPU time and whether it blocked; threaded: its wall time).
        Returns True to go inline, False to go back to threads, None to stay as it is."""
        if inline:
            self._inline_execs += 1
            self.ewma_ns = float(ns) if self._inline_execs == 1 else 0.8 * self.ewma_ns + 0.2 * ns
            # one long execute may be a GC pause: only a run of them counts
            self._slow_run = self._slow_run + 1 if ns > INLINE_MAX_NS else 0
            if blocked or self._slow_run >= SLOW_RUN:
                self._next_probe_ns = self._clock() + PROBE_EVERY_NS
                return False
            return None
        self._execs += 1
        # wall time in a thread over-states a GIL-bound execute, never under-states one: a model
        # whose threaded executes are long (a big graph, a sleep) is not worth a probe
        self._thread_ewma_ns = float(ns) if self._execs == 1 else 0.8 * self._thread_ewma_ns + 0.2 * ns
        if (
            self._execs >= INLINE_AFTER
            and not inline_now
            and self._thread_ewma_ns < INLINE_MAX_NS
            and self._clock() >= self._next_probe_ns
        ):
            return True
        return None
