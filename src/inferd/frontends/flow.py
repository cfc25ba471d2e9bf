"""Answers written for clients that do not read them: bounded per connection and per process.

A connection's transport holds what the kernel did not take yet. Past its high-water mark
(``HIGH_WATER``) the transport calls ``pause_writing``: the connection then stops reading its client
(and holds back the requests it read already) until ``resume_writing``, so a client that asks and
never reads costs at most that much plus the answers of the requests it had sent before.

The process-wide bound is ``core/unsent.UnsentBudget`` (``--max-unsent-bytes``): one object, made by
``runtime.py``, that both front ends add what they hold to. ``Unsent`` is one connection's share of it
in its transport: the bytes held past the mark, counted when the transport pauses and when more is
written while paused. The front ends count the rest themselves (HTTP: answers waiting behind an
earlier one; HTTP/2: data waiting for a send window). While the budget is over its limit, a
connection that holds anything takes no more work:

- a new request waits (HTTP: the connection stops reading; its transport's mark is first tightened
  to nothing, ``tighten``, so that it reads again only once its client took everything) or is
  refused (gRPC: UNAVAILABLE, the request not run);
- an answer produced for it meanwhile is refused (503 / UNAVAILABLE, smaller than the answer), so
  that the requests it had under way cannot add more than their first answer.

A connection that holds nothing is served as usual: its client may be reading. Past twice the budget
(``full``) a large answer is refused whatever its connection holds, so that many connections holding
one answer each cannot pass that: the server holds at most twice the budget and one answer (and one
response per decoupled stream, whose sender waits). Nothing here runs for an answer that goes out at
once but the one ``over`` check.
"""

from __future__ import annotations

import asyncio

from inferd.core.unsent import UnsentBudget

#: a connection's write buffer past this many bytes pauses it (uvloop's and asyncio's default too)
HIGH_WATER = 1 << 16
#: an answer no larger than this is never refused for the budget (the refusal would not be smaller)
SMALL_ANSWER = 1024


class Unsent:
    """One connection's share of an ``UnsentBudget`` in its transport: what it held when last counted."""

    __slots__ = ("budget", "counted", "tight")

    def __init__(self, budget: UnsentBudget) -> None:
        self.budget = budget
        self.counted = 0
        self.tight = False  # the mark was tightened to nothing

    def count(self, transport: asyncio.WriteTransport) -> None:
        """Count what ``transport`` holds now (paused: past its mark)."""
        size = transport.get_write_buffer_size()
        if size != self.counted:
            self.budget.add(size - self.counted)
            self.counted = size

    def drained(self, transport: asyncio.WriteTransport | None) -> None:
        """The transport went under its low-water mark (or away): nothing of it is counted."""
        if self.counted:
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
