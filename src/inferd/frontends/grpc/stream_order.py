"""A gRPC stream's answers to non-decoupled requests in the order the requests arrived, as the
reference's stream handler writes them (``EnqueueForResponse`` / ``WriteResponseIfReady`` in
``stream_infer_handler.cc``); ``service.ModelStreamInfer`` keeps one per stream."""

from __future__ import annotations

import collections
from collections.abc import Callable

from inferd.core.response import ResponseStream
from inferd.errors import InferdError

#: a ModelStreamInfer call reads no further request while its requests under way, its answers held
#: for their turn and those waiting to be written pass this: a client that never reads costs no more
STREAM_IN_FLIGHT = 64
#: what a ModelStreamInfer call writes, in order: an answer, the error that ends the call
#: (``triton_grpc_error``), a decoupled model's answer, taken from its stream once written (with what
#: ``ResponseStream.defer`` gave), or None: the end
Out = bytes | InferdError | tuple[bytes, ResponseStream, int] | None


class InOrder:
    """A stream's answers to non-decoupled requests, written in the order the requests arrived: each
    takes a slot as it is read; a filled slot goes out once every slot before it has."""

    __slots__ = ("_out", "_slots")

    def __init__(self, out: Callable[[bytes | InferdError], None]) -> None:
        self._out = out  # puts an answer on the call's queue of what it writes
        self._slots: collections.deque[list[bytes | InferdError | None]] = collections.deque()

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
        self._flush()

    def _flush(self) -> None:
        slots = self._slots
        while slots and slots[0][0] is not None:
            item = slots.popleft()[0]
            assert item is not None
            self._out(item)
