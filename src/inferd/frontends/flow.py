"""Answers written for clients that do not read them: bounded per connection and per listener.

A connection's transport holds what the kernel did not take yet. Past its high-water mark
(``HIGH_WATER``) the transport calls ``pause_writing``: the connection then stops reading its client
(and holds back the requests it read already) until ``resume_writing``, so a client that asks and
never reads costs at most that much plus the answers of the requests it had sent before.

``WriteBudget`` adds the listener-wide bound: the bytes held by the connections past their mark,
summed. While that passes ``limit``, a connection that would take more work with any unsent byte
first tightens its own mark to nothing (``tighten``): it pauses until its client took everything,
then gets its mark back. Nothing here runs per request while the budget is under its limit but the
one ``over`` check.
"""

from __future__ import annotations

import asyncio

#: a connection's write buffer past this many bytes pauses it (uvloop's and asyncio's default too)
HIGH_WATER = 1 << 16


class WriteBudget:
    """The bytes that the paused connections of one listener hold (see the module docstring)."""

    __slots__ = ("limit", "over", "used")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self.over = False

    def add(self, delta: int) -> None:
        self.used += delta
        self.over = 0 < self.limit < self.used


class Unsent:
    """One connection's share of a ``WriteBudget``: what its transport held when last counted."""

    __slots__ = ("budget", "counted", "tight")

    def __init__(self, budget: WriteBudget) -> None:
        self.budget = budget
        self.counted = 0
        self.tight = False  # the mark was tightened to nothing

    def count(self, transport: asyncio.WriteTransport) -> None:
        """Count what ``transport`` holds now (paused: past its mark)."""
        size = transport.get_write_buffer_size()
        self.budget.add(size - self.counted)
        self.counted = size

    def drained(self, transport: asyncio.WriteTransport | None) -> None:
        """The transport went under its low-water mark (or away): nothing of it is counted."""
        self.budget.add(-self.counted)
        self.counted = 0
        if self.tight:
            self.tight = False
            if transport is not None and not transport.is_closing():
                transport.set_write_buffer_limits(HIGH_WATER)

    def tighten(self, transport: asyncio.WriteTransport) -> bool:
        """The budget is over: pause ``transport`` until it holds nothing, if it holds anything
        (its ``pause_writing`` is called at once then); whether it did."""
        if self.tight or not transport.get_write_buffer_size():
            return False
        self.tight = True
        transport.set_write_buffer_limits(0)
        return True
