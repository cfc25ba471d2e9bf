"""preserve_ordering: a model's responses leave in the order its requests left the queue.

Triton core's ``DynamicBatchScheduler::DelegateResponse`` / ``FinalizeResponses`` (2.51): as a batch
forms, each of its requests gets the next place in a completion queue; every response of a request
(errors included) goes to its place, and the places are emptied front first. The front request's
responses go out as they come (a decoupled model's stream is not held back), a later request's wait
until every request before it sent its final response. A request that never leaves the queue (a
queue timeout, the pool stopping) has no place and answers at once, as in the reference.

The pool calls ``reserve`` as it forms a batch (with its lock held, in any thread); the responses
arrive through ``ResponseStream.deliver`` on the event loop, which hands them to the place (the
stream's ``hold``), and ``_flush`` passes them on, on the loop.
"""

from __future__ import annotations

import collections
import threading

from inferd.core.request import InferRequest
from inferd.core.response import InferResponse, ResponseStream


class _Place:
    """One request's place: the responses it has that could not go out yet."""

    __slots__ = ("final", "items", "owner", "stream")

    def __init__(self, owner: OrderedResponses, stream: ResponseStream) -> None:
        self.owner = owner
        self.stream = stream
        self.items: list[tuple[InferResponse | None, bool]] = []
        self.final = False

    def take(self, response: InferResponse | None, final: bool) -> None:
        """The stream's ``hold`` (on the loop): keep the response, then send what may go."""
        owner = self.owner
        with owner.lock:
            if self.final:
                return  # after the final response nothing more is delivered, as without ordering
            self.items.append((response, final))
            self.final = final
        owner.flush()


class OrderedResponses:
    """The completion queue of one pool."""

    __slots__ = ("_flushing", "_places", "lock")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._places: collections.deque[_Place] = collections.deque()
        self._flushing = False

    def reserve(self, batch: list[InferRequest]) -> None:
        """Give each request of a batch that just formed the next place (in batch order)."""
        with self.lock:
            for r in batch:
                s = r.stream
                if s is not None:
                    place = _Place(self, s)
                    self._places.append(place)
                    s.hold = place.take

    def pending(self) -> int:
        """Requests with a place whose final response has not gone out yet."""
        with self.lock:
            return len(self._places)

    def flush(self) -> None:
        """On the loop: pass on the front places' responses, as far as the order allows."""
        if self._flushing:  # a consumer delivering while we pass on: the loop below picks it up
            return
        self._flushing = True
        try:
            while True:
                with self.lock:
                    if not self._places or not self._places[0].items:
                        return
                    place = self._places[0]
                    items, place.items = place.items, []
                    if place.final:
                        self._places.popleft()
                        place.stream.hold = None  # no stream -> place -> stream cycle left behind
                for response, final in items:
                    place.stream.pass_on(response, final)
        finally:
            self._flushing = False
