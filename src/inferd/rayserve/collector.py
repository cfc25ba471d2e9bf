"""The rendezvous through which one replica reads every replica's statistics (a Ray actor).

Serve routes a request to one replica and offers no call to all of them, so each replica keeps one
long poll open on this actor (``wait``). A replica answering a statistics or metrics request asks
the actor to ``collect``: every waiting replica wakes, reads its own core and ``report``s. The
collection ends when every registered replica reported, or after ``REPORT_TIMEOUT_S``: a replica
that did not report by then (it died, or is stuck) is forgotten until its next ``wait``, so a dead
replica delays one collection, not every one. Counts are read when asked, never cached: what a
client reads is the sum over the replicas alive at that moment.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

#: how long a collection waits for the replicas' reports
REPORT_TIMEOUT_S = 2.0
#: a long poll returns empty after this long, so a replica notices a collector that went away
POLL_TIMEOUT_S = 30.0
#: the actor's name, per Serve application (namespace NAMESPACE)
NAME = "inferd-stats-{app}"
NAMESPACE = "inferd"


class StatsCollector:
    """Long polls of the replicas and the collections under way (an async Ray actor)."""

    def __init__(self) -> None:
        #: replica id -> when it last polled (registered while it polls)
        self._replicas: dict[str, float] = {}
        #: collection number -> its query (what to read: "statistics" or "metrics")
        self._pending: dict[int, str] = {}
        self._reports: dict[int, dict[str, Any]] = {}
        self._generation = 0
        self._changed = asyncio.Event()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait(self, replica: str, seen: int) -> list[tuple[int, str]]:
        """A replica's long poll: the collections after ``seen`` (empty after POLL_TIMEOUT_S)."""
        self._replicas[replica] = time.monotonic()
        deadline = time.monotonic() + POLL_TIMEOUT_S
        while True:
            due = [(g, q) for g, q in self._pending.items() if g > seen]
            if due:
                return due
            left = deadline - time.monotonic()
            if left <= 0:
                return []
            changed = self._changed
            try:
                await asyncio.wait_for(changed.wait(), left)
            except TimeoutError:
                return []

    def report(self, replica: str, generation: int, answer: Any) -> None:
        """A replica's answer to collection ``generation``."""
        reports = self._reports.get(generation)
        if reports is not None:
            reports[replica] = answer
            self._notify()

    def leave(self, replica: str) -> None:
        """A replica shutting down: do not wait for it."""
        self._replicas.pop(replica, None)
        self._notify()

    def replicas(self) -> list[str]:
        """The replicas registered now."""
        return sorted(self._replicas)

    async def collect(self, query: str) -> list[Any]:
        """Every registered replica's answer to ``query`` (those that answered in time)."""
        self._generation += 1
        generation = self._generation
        expected = set(self._replicas)
        reports: dict[str, Any] = {}
        self._reports[generation] = reports
        self._pending[generation] = query
        self._notify()
        deadline = time.monotonic() + REPORT_TIMEOUT_S
        try:
            while not expected <= reports.keys():
                left = deadline - time.monotonic()
                if left <= 0:
                    for gone in expected - reports.keys():
                        self._replicas.pop(gone, None)
                    break
                changed = self._changed
                try:
                    await asyncio.wait_for(changed.wait(), left)
                except TimeoutError:
                    continue
                expected &= self._replicas.keys() | reports.keys()  # one that left is not waited for
        finally:
            del self._pending[generation]
            del self._reports[generation]
        return list(reports.values())
