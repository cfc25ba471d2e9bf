"""A gRPC stream's answers to non-decoupled requests in the order the requests arrived, as the
reference's stream handler writes them (``EnqueueForResponse`` / ``WriteResponseIfReady`` in
``stream_infer_handler.cc``); ``service.ModelStreamInfer`` keeps one per stream."""

from __future__ import annotations

import asyncio
import collections

from inferd.errors import InferdError


class InOrder:
    """A stream's answers to non-decoupled requests, written in the order the requests arrived: each
    takes a slot as it is read; a filled slot goes out once every slot before it has."""

    __slots__ = ("_out", "_slots")

    def __init__(self, out: asyncio.Queue[bytes | InferdError | None]) -> None:
        self._out = out
        self._slots: collections.deque[list[bytes | InferdError | None]] = collections.deque()

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
            self._out.put_nowait(slots.popleft()[0])
