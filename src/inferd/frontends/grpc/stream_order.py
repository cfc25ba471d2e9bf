"""A gRPC stream's answers to non-decoupled requests in the order the requests arrived, as the
reference's stream handler writes them (``EnqueueForResponse`` / ``WriteResponseIfReady`` in
``stream_infer_handler.cc``); ``service.ModelStreamInfer`` keeps one per stream, and a ``Waiting``:
the bytes of its answers not written yet, counted in the process's ``UnsentBudget``."""

from __future__ import annotations

import collections
from collections.abc import Callable

from inferd.core.response import ResponseStream
from inferd.core.unsent import UnsentBudget
from inferd.errors import InferdError
from inferd.frontends.flow import SMALL_ANSWER

#: a ModelStreamInfer call reads no further request while its requests under way, its answers held
#: for their turn and those waiting to be written pass this: a client that never reads costs no more
STREAM_IN_FLIGHT = 64
#: what a ModelStreamInfer call writes, in order: an answer, the error that ends the call
#: (``triton_grpc_error``), a decoupled model's answer, taken from its stream once written (with what
#: ``ResponseStream.defer`` gave), or None: the end
Out = bytes | InferdError | tuple[bytes, ResponseStream, int] | None


class InOrder:
    """A stream's answers to non-decoupled requests, written in the order the requests arrived: each
    takes a slot as it is read; a filled slot goes out once every slot before it has. An answer
    counts in ``waiting`` from the moment it fills its slot (its writer takes it out once written)."""

    __slots__ = ("_out", "_slots", "waiting")

    def __init__(self, out: Callable[[bytes | InferdError], None], waiting: Waiting | None = None) -> None:
        self._out = out  # puts an answer on the call's queue of what it writes
        self._slots: collections.deque[list[bytes | InferdError | None]] = collections.deque()
        self.waiting = waiting if waiting is not None else Waiting(None)

    def __len__(self) -> int:
        """Slots taken and not written yet (their requests under way, or answered out of turn)."""
        return len(self._slots)

    def take(self) -> list[bytes | InferdError | None]:
        slot: list[bytes | InferdError | None] = [None]
        self._slots.append(slot)
        return slot

    def give_back(self, slot: list[bytes | InferdError | None]) -> None:
        """A decoupled request's slot (taken last, not filled): its responses go out as they come."""
        slots = self._slots
        for i in range(len(slots) - 1, -1, -1):  # by identity: unfilled slots compare equal
            if slots[i] is slot:
                del slots[i]
                break
        self._flush()

    def fill(self, slot: list[bytes | InferdError | None], item: bytes | InferdError) -> None:
        slot[0] = item
        if isinstance(item, bytes):
            self.waiting.add(len(item))
        self._flush()

    def _flush(self) -> None:
        slots = self._slots
        while slots and slots[0][0] is not None:
            item = slots.popleft()[0]
            assert item is not None
            self._out(item)


class Waiting:
    """A stream's answers (its own encoded messages, not a decoupled model's, whose windows count
    them) from the moment they are ready until written, in the process's budget (None: not counted).
    Over the budget, a large answer is not kept while the stream has others waiting (or the budget
    is full): ``refusal`` says why, for the error message that stands for it."""

    __slots__ = ("budget", "held")

    def __init__(self, budget: UnsentBudget | None) -> None:
        self.budget = budget
        self.held = 0

    def refusal(self, size: int) -> str | None:
        budget = self.budget
        if budget is None or not budget.over or size <= SMALL_ANSWER or not (budget.full or self.held):
            return None
        return budget.refusal("this answer was not kept", self.held > 0, size)

    def add(self, size: int) -> None:
        """``size`` more bytes waiting (fewer: written)."""
        budget = self.budget
        if budget is not None:
            self.held += size
            budget.add(size)

    def clear(self) -> None:
        """The stream is over: what still waits goes nowhere."""
        if self.held:
            self.add(-self.held)
