"""One sweeper for the connections of a listener: their timeouts checked about once a second.

A timer per request or per read would cost a loop operation on the hot path; instead each
connection records when it last heard from its client, and ``sweep_forever`` hands every open
connection the time now (HTTP: slow headers, idle keep-alive; gRPC: the preface, keepalive PINGs).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from typing import Protocol

#: how often connections are looked at
SWEEP_S = 1.0
#: connections swept between two turns of the loop
BATCH = 500


class Sweepable(Protocol):
    def sweep(self, now: float) -> None: ...


async def sweep_forever(connections: Iterable[Sweepable], interval_s: float = SWEEP_S) -> None:
    """Call ``sweep(now)`` on every connection, every ``interval_s`` (a task; cancel it to stop)."""
    while True:
        await asyncio.sleep(interval_s)
        now = time.monotonic()
        for i, c in enumerate(list(connections), 1):
            c.sweep(now)
            if not i % BATCH:  # thousands of connections: let requests in between
                await asyncio.sleep(0)
