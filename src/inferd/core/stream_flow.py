"""Flow control of a streamed request: how far its responses may run ahead of the client reading them.

A decoupled model may send responses faster than its client reads them (or a client may read none
at all). ``StreamWindow`` bounds what waits for the consumer: the bytes of the responses sent and
not yet taken (each counts its tensors plus ``RESPONSE_OVERHEAD``). Past ``max_unread_bytes`` the
model's send waits in its own thread until the consumer takes some; one response always goes
through, however large. A send that waited ``stall_timeout_s`` while the consumer took nothing
gives up: the stream then fails (``ResponseStream`` cancels the request and delivers the error
``stalled_error`` describes). A sender on the event loop never waits: its responses are counted.

The unread bytes of every window count in the process's ``UnsentBudget`` too (``core/unsent.py``, the
limits' ``budget``): while it is over its limit, a send waits as if its own window were full (one
response still goes through when nothing of its stream is unread). A cancelled stream gives back
its share at once (``drop``): its responses go nowhere.

The consumer takes a response when a front end moved it on towards its client: an event stream when
it writes the event (only while the connection's write buffer is under its high-water mark), a gRPC
stream when its message went into the HTTP/2 stream (only while that is under its own mark).
"""

from __future__ import annotations

import collections
import threading
import time
from dataclasses import dataclass

import numpy as np

from inferd.core.tensor import Tensor
from inferd.core.unsent import UnsentBudget
from inferd.errors import RequestCancelledError

#: what a response costs beside its tensors' bytes (the Python objects that carry it)
RESPONSE_OVERHEAD = 1024
#: BYTES elements looked at to estimate a large BYTES tensor's size
_SAMPLE = 256
#: ``reserve``'s answers besides a cost
DROP = -1  # the stream ended or was cancelled: the response goes nowhere
STALLED = -2  # the send waited past the stall timeout: the stream must fail
FLAG_ONLY = -3  # the final response of a failed stream: only its final flag goes on (after the error)


@dataclass(slots=True, frozen=True)
class StreamLimits:
    """How far a streamed request's responses may run ahead of its client (``ServerOptions``)."""

    max_unread_bytes: int = 16 << 20
    stall_timeout_s: float = 60.0  # 0: a send waits as long as the client stays
    #: the process's budget of held response bytes (None: only the window bounds a stream)
    budget: UnsentBudget | None = None


def tensor_bytes(t: Tensor) -> int:
    """About the bytes ``t`` holds (BYTES: its elements' lengths, sampled when there are many)."""
    raw = t.raw
    if raw is not None:
        return len(raw) if isinstance(raw, bytes) else memoryview(raw).nbytes
    if t.device is not None:  # in device memory: counted without a host copy
        return t.device.nbytes
    a = t.array
    if a.dtype != np.object_:
        return int(a.nbytes)
    flat = a.reshape(-1)
    n = flat.size
    sample = flat[:_SAMPLE] if n > _SAMPLE else flat
    size = sum(len(v) if isinstance(v, (bytes, bytearray, str)) else 8 for v in sample)
    return size if n <= _SAMPLE else size * n // _SAMPLE


def stalled_error(window: StreamWindow) -> RequestCancelledError:
    """Why a stream whose client stopped reading failed."""
    return RequestCancelledError(
        f"the client read none of the {window.unread:,} bytes of responses waiting for it for "
        f"{window.stall_s:g} s: the request was cancelled (--stream-stall-timeout-secs, "
        f"--stream-max-unread-bytes)"
    )


class StreamWindow:
    """The unread responses of one stream (see the module docstring). ``reserve`` runs in the
    sender's thread; ``release`` and ``close`` on the loop (``close`` from any thread)."""

    __slots__ = (
        "_cond",
        "budget",
        "closed",
        "costs",
        "current",
        "limit",
        "stall_s",
        "stalled",
        "taken_at",
        "unread",
    )

    def __init__(self, limits: StreamLimits) -> None:
        self._cond = threading.Condition(threading.Lock())
        self.limit = limits.max_unread_bytes
        self.stall_s = limits.stall_timeout_s
        #: where ``unread`` counts too (None once dropped)
        self.budget = limits.budget
        #: bytes sent and not taken yet
        self.unread = 0
        #: the costs of the responses queued for an iterating consumer, oldest first (loop thread)
        self.costs: collections.deque[int] = collections.deque()
        #: the cost of the response a callback consumer is being handed (``ResponseStream.defer``)
        self.current = 0
        self.taken_at = time.monotonic()
        self.closed = False
        self.stalled = False  # a send gave up: the stream failed

    def reserve(self, response_tensors: list[Tensor] | None, final: bool, wait: bool) -> int:
        """Count a response sent (None: a final flag alone); its cost, or DROP / STALLED /
        FLAG_ONLY. Waits while the window is full when ``wait`` (never for a final response)."""
        cost = 0
        if response_tensors is not None:
            cost = RESPONSE_OVERHEAD + sum(tensor_bytes(t) for t in response_tensors)
        with self._cond:
            if self.closed:
                if not final:
                    return DROP
                if self.stalled and response_tensors is not None:
                    return FLAG_ONLY
            if wait and not final and self.unread and self._full(cost):
                started = time.monotonic()
                while self.unread and self._full(cost) and not self.closed:
                    if not self.stall_s:
                        self._cond.wait()
                        continue
                    left = max(started, self.taken_at) + self.stall_s - time.monotonic()
                    if left <= 0:
                        self.closed = self.stalled = True
                        return STALLED
                    self._cond.wait(left)
                if self.closed:
                    return DROP
            self.unread += cost
            budget = self.budget
            if budget is not None and cost:
                budget.add(cost)
        return cost

    def _full(self, cost: int) -> bool:
        budget = self.budget
        return self.unread + cost > self.limit or (budget is not None and budget.over)

    def release(self, cost: int) -> None:
        """The consumer took a response of ``cost`` (0: nothing to give back)."""
        if not cost:
            return
        with self._cond:
            self.unread -= cost
            budget = self.budget
            if budget is not None:
                budget.add(-cost)
            self.taken_at = time.monotonic()
            self._cond.notify_all()

    def close(self) -> None:
        """No response is wanted any more (the stream ended, failed or was cancelled): waiting
        senders return, later non-final sends are dropped."""
        with self._cond:
            self.closed = True
            self._cond.notify_all()

    def drop(self) -> None:
        """The stream was cancelled: what it holds goes nowhere, and leaves the budget now (whether or
        not its consumer ever takes it)."""
        with self._cond:
            budget, self.budget = self.budget, None
            if budget is not None and self.unread:
                budget.add(-self.unread)
