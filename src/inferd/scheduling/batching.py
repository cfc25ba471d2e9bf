"""An InstancePool's batch formation and queue expiry: what waits, when a batch is ready, what it takes.

The queue is a plain ``collections.deque`` or the dynamic batcher's policy queue (scheduling/queue.py:
priorities, maximum size, timeouts). A worker about to take a batch first holds a short one open up to
``max_queue_delay`` (``wait_for_batch``), takes the requests whose queue timeout passed off the queue
(``take_expired``: also checked as a batch forms, as the reference does, so that an idle instance
cannot outrun the timer), then forms the batch (``form``), reserving each request's place in the
completion order under preserve_ordering (scheduling/ordering.py). Those run with the pool's lock
held. A request queued with a deadline also sets a timer on the loop (``expire_at``), which rejects
it then if it still waits.
"""

from __future__ import annotations

import asyncio
import collections
import threading
from collections.abc import Callable
from functools import partial

from inferd.core.request import InferRequest
from inferd.scheduling.ordering import OrderedResponses
from inferd.scheduling.queue import BatchPolicy, PolicyQueue, RequestQueue, form_batch, next_batch


class BatchFormer:
    """The pool's queue and how batches form from it (see the module docstring)."""

    __slots__ = ("_clock", "_lock", "_loop", "_ordered", "_reject", "form", "policy", "policy_queue", "queue")

    def __init__(
        self,
        policy: BatchPolicy,
        queue: PolicyQueue | None,
        clock: Callable[[], int],
        loop: asyncio.AbstractEventLoop,
        lock: threading.Lock,
        reject: Callable[[list[InferRequest], bool], None],
    ) -> None:
        """``queue``: the dynamic batcher's queue policy, None: first in, first out; ``lock``: the
        pool's; ``reject(requests, on_loop)``: answers the requests whose queue timeout passed."""
        self._loop = loop
        self._lock = lock
        self._reject = reject
        self.policy = policy
        self.policy_queue = queue
        self.queue: RequestQueue = collections.deque() if queue is None else queue
        self._clock = clock
        #: preserve_ordering: each request's place, reserved as its batch forms (None: off)
        self._ordered = OrderedResponses() if policy.preserve_ordering else None
        #: the next batch off the queue (not empty), and its batch size (no frame of ours between
        #: the worker and ``form_batch`` where no place is reserved: this is every request's path)
        self.form: Callable[[], tuple[list[InferRequest], int]] = (
            partial(form_batch, self.queue, policy, clock) if self._ordered is None else self._form_ordered
        )

    def wait_for_batch(
        self, cond: threading.Condition, holding: list[threading.Condition], stopping: Callable[[], bool]
    ) -> None:
        """Hold the oldest request up to max_queue_delay while the batch is short: until a batch is
        complete (``queue.next_batch``: a preferred size met, the largest passed, a request with other
        inputs behind it), or the batch reaches ``hold_for`` (else ``max_batch_size``) where no size is
        preferred. ``cond`` waits in ``holding`` meanwhile (a new request wakes it first)."""
        policy = self.policy
        queue = self.queue
        target = policy.hold_for or policy.max_batch_size
        deadline = queue[0].t_queue_ns + policy.max_queue_delay_ns
        while True:
            left = deadline - self._clock()
            if policy.preferred_batch_size or policy.optional_inputs:
                ready = next_batch(queue, policy, False)[1]
            else:
                ready = sum(r.batch_size for r in queue) >= target
            if ready or left <= 0 or stopping():
                return
            holding.append(cond)
            try:
                cond.wait(left / 1e9)
            finally:
                holding.remove(cond)

    def expire_at(self, deadline: int, now: int) -> None:
        """A request was queued with a queue deadline: on the loop, reject (or delay) it then if it
        still waits."""
        self._loop.call_later((deadline - now) / 1e9, self._expire, deadline)

    def _expire(self, deadline: int) -> None:
        """On the loop, at a request's queue deadline: reject (or delay) what timed out. uvloop's
        timers count whole milliseconds and fire up to one early (3% of them, measured): one that
        comes before ``deadline`` is set again rather than leaving the request to wait out the
        execute ahead of it."""
        early_ns = deadline - self._clock()
        if early_ns >= 0:
            self._loop.call_later(early_ns / 1e9 + 0.001, self._expire, deadline)
            return
        with self._lock:
            rejected = self.take_expired()
        self._reject(rejected, True)

    def take_expired(self) -> list[InferRequest]:
        """The queued requests past their deadline, taken off the queue."""
        pq = self.policy_queue
        return pq.expire(self._clock()) if pq is not None and pq.has_deadlines else []

    def _form_ordered(self) -> tuple[list[InferRequest], int]:
        batch, total = form_batch(self.queue, self.policy, self._clock)
        if self._ordered is not None:
            self._ordered.reserve(batch)
        return batch, total
