"""A model's queue: the batches formed from it, and the dynamic batcher's queue policy.

``form_batch`` takes the next batch off the queue as the ``BatchPolicy`` allows: one request (the
default scheduler) or as many as fit in ``max_batch_size`` (the dynamic batcher).


Triton's ``dynamic_batching`` may give each priority level a ``ModelQueuePolicy``
(``default_queue_policy``, ``priority_queue_policy``): a maximum queue size (a request past it is
refused UNAVAILABLE "Exceeds maximum queue size"), a timeout for the time a request waits in the
queue (``default_timeout_microseconds``, which a request's own ``timeout`` parameter may shorten
when ``allow_timeout_override`` is set) and what to do with a request whose timeout passed:
``REJECT`` it (UNAVAILABLE "Request timeout expired") or ``DELAY`` it behind the requests of its
level that have not timed out. Requests of a lower level number go first; a request's
``priority`` 0, or one over ``priority_levels``, means ``default_priority_level``. As the
reference, the timeout bounds the wait in the queue only, not the execute (that is the execute
watchdog's, ``scheduling/watchdog.py``); the default scheduler (no ``dynamic_batching``) has no
queue policy.

A model without any of these keeps the plain ``collections.deque`` (``make_queue``): the policy
queue costs a deadline per request and a lookup per level.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from inferd.core.request import InferRequest
from inferd.errors import UnavailableError

if TYPE_CHECKING:
    from inferd.repository.config.schema import ModelConfig, ModelQueuePolicy

TIMEOUT_EXPIRED = "Request timeout expired"


class RequestQueue(Protocol):
    """What the instance pool needs of its queue (``collections.deque`` has it all)."""

    def append(self, request: InferRequest) -> None: ...

    def popleft(self) -> InferRequest: ...

    def clear(self) -> None: ...

    def __getitem__(self, index: int) -> InferRequest: ...

    def __len__(self) -> int: ...

    def __iter__(self) -> Iterator[InferRequest]: ...


@dataclass(slots=True, frozen=True)
class BatchPolicy:
    """How many requests one execute may take. ``max_batch_size`` 0: one request at a time."""

    max_batch_size: int = 0
    max_queue_delay_ns: int = 0
    #: dynamic_batching's preferred sizes: batches are cut as Triton's dynamic batcher cuts them
    #: (``next_batch``)
    preferred_batch_size: tuple[int, ...] = ()
    #: dynamic_batching's preserve_ordering: responses leave in the order their requests left the queue
    preserve_ordering: bool = False
    #: a short batch is held (up to ``max_queue_delay_ns``) until it reaches this batch size, with no
    #: cut at it: direct sequence batching's ``minimum_slot_utilization`` (0: ``max_batch_size``)
    hold_for: int = 0
    #: the model has optional inputs: a request that does not bring the inputs the batch's first one
    #: brought ends the batch, which goes at once (the reference's ``RequiredEqualInputs``)
    optional_inputs: bool = False

    @property
    def batching(self) -> bool:
        return self.max_batch_size > 0


def next_batch(queue: RequestQueue, policy: BatchPolicy, delay_exceeded: bool) -> tuple[int, bool]:
    """How many requests at the front of ``queue`` (not empty) the next batch takes, and whether it
    is complete (it goes now; else it may wait for more until the queue delay passes), as Triton's
    dynamic batcher decides (``DynamicBatchScheduler::GetDynamicBatch``):

    - requests are taken in order up to ``max_batch_size``; the batch is marked where its size is a
      preferred size, and where the next request would carry it past the largest preferred size
      (if no preferred size was met before);
    - a mark goes at once, unless the oldest request waited its queue delay: then everything up to
      ``max_batch_size`` goes;
    - without a mark, the batch is complete once it reaches the largest preferred size or
      ``max_batch_size`` stops it, or (``optional_inputs``) a request with other inputs than the
      first one's does.
    """
    if not policy.batching:
        return 1, True
    limit = policy.max_batch_size
    preferred = policy.preferred_batch_size
    top = max(preferred) if preferred else limit
    total = count = mark = 0
    stopped = False
    inputs = None
    for r in queue:
        size = max(1, r.batch_size)
        if count:
            if not mark and total + size > top:
                mark = count
            if total + size > limit or (inputs is not None and r.inputs.keys() != inputs):
                stopped = True
                break
        elif policy.optional_inputs:
            inputs = r.inputs.keys()
        total += size
        count += 1
        if total in preferred:
            mark = count
    if mark and not delay_exceeded:
        return mark, True
    return count, stopped or total >= top


def form_batch(
    queue: RequestQueue, policy: BatchPolicy, clock: Callable[[], int] | None = None
) -> tuple[list[InferRequest], int]:
    """Pop the next batch off ``queue`` (not empty): requests and their summed batch size. With
    preferred sizes, the batch is cut where ``next_batch`` says (``clock``: now, to tell whether
    the oldest request waited its queue delay); without, it takes what fits ``max_batch_size``."""
    if policy.preferred_batch_size and len(queue) > 1:
        delay = policy.max_queue_delay_ns
        exceeded = delay > 0 and clock is not None and clock() - queue[0].t_queue_ns >= delay
        count = next_batch(queue, policy, exceeded)[0]
        batch: list[InferRequest] = []
        total = 0
        for _ in range(count):
            r = queue.popleft()
            batch.append(r)
            total += r.batch_size
        return batch, total
    first = queue.popleft()
    batch = [first]
    total = first.batch_size
    if policy.batching:
        limit = policy.max_batch_size
        inputs = first.inputs.keys() if policy.optional_inputs else None
        while (
            queue
            and total + queue[0].batch_size <= limit
            and (inputs is None or queue[0].inputs.keys() == inputs)
        ):
            r = queue.popleft()
            batch.append(r)
            total += r.batch_size
    return batch, total


@dataclass(slots=True, frozen=True)
class LevelPolicy:
    """One priority level's ``ModelQueuePolicy``."""

    max_queue_size: int = 0
    default_timeout_ns: int = 0
    allow_override: bool = False
    reject: bool = True

    @classmethod
    def from_config(cls, policy: ModelQueuePolicy) -> LevelPolicy:
        return cls(
            max_queue_size=int(policy.max_queue_size),
            default_timeout_ns=int(policy.default_timeout_microseconds) * 1000,
            allow_override=bool(policy.allow_timeout_override),
            reject=policy.timeout_action != type(policy).DELAY,  # the message's enum, no config import
        )

    def deadline(self, request: InferRequest, now_ns: int) -> int:
        """When ``request`` times out in the queue (0: never), as the reference computes it: a
        request's timeout only shortens the policy's, so it counts only over a default."""
        timeout_ns = self.default_timeout_ns
        if self.allow_override and request.timeout_us:
            override_ns = request.timeout_us * 1000
            if override_ns < timeout_ns:
                timeout_ns = override_ns
        return now_ns + timeout_ns if timeout_ns else 0


class _Level:
    __slots__ = ("delayed", "policy", "waiting")

    def __init__(self, policy: LevelPolicy) -> None:
        self.policy = policy
        self.waiting: collections.deque[tuple[InferRequest, int]] = collections.deque()
        self.delayed: collections.deque[InferRequest] = collections.deque()

    def __len__(self) -> int:
        return len(self.waiting) + len(self.delayed)


class PolicyQueue:
    """Requests ordered by priority level; within a level, those on time, then the delayed ones."""

    def __init__(
        self,
        default: LevelPolicy,
        levels: int = 0,
        default_level: int = 0,
        per_level: dict[int, LevelPolicy] | None = None,
    ) -> None:
        self._max_level = levels
        self._default_level = default_level if levels else 0
        per_level = per_level or {}
        numbers = range(1, levels + 1) if levels else (0,)
        self._levels = {n: _Level(per_level.get(n, default)) for n in numbers}
        self._size = 0
        self.has_deadlines = any(lv.policy.default_timeout_ns for lv in self._levels.values())

    def level_of(self, request: InferRequest) -> int:
        p = request.priority
        return self._default_level if p == 0 or p > self._max_level else p

    def admit(self, request: InferRequest, now_ns: int) -> int:
        """Queue ``request``; its deadline (0: none). UNAVAILABLE past the level's maximum size."""
        level = self._levels[self.level_of(request)]
        limit = level.policy.max_queue_size
        if limit and len(level) >= limit:
            raise UnavailableError(f"[request id: {request.id or '<id_unknown>'}] Exceeds maximum queue size")
        deadline = level.policy.deadline(request, now_ns)
        level.waiting.append((request, deadline))
        self._size += 1
        return deadline

    def append(self, request: InferRequest) -> None:
        self.admit(request, request.t_queue_ns)

    def expire(self, now_ns: int) -> list[InferRequest]:
        """Requests whose queue timeout passed: the rejected ones are removed and returned, the
        delayed ones move behind their level's other requests."""
        rejected: list[InferRequest] = []
        for level in self._levels.values():
            if not level.policy.default_timeout_ns or not level.waiting:
                continue
            kept: collections.deque[tuple[InferRequest, int]] = collections.deque()
            for request, deadline in level.waiting:
                if deadline and now_ns > deadline:
                    if level.policy.reject:
                        rejected.append(request)
                        self._size -= 1
                    else:
                        level.delayed.append(request)
                else:
                    kept.append((request, deadline))
            level.waiting = kept
        return rejected

    def _first(self) -> _Level:
        for level in self._levels.values():
            if level.waiting or level.delayed:
                return level
        raise IndexError("the queue is empty")

    def popleft(self) -> InferRequest:
        level = self._first()
        self._size -= 1
        if level.waiting:
            return level.waiting.popleft()[0]
        return level.delayed.popleft()

    def __getitem__(self, index: int) -> InferRequest:
        if index != 0:
            raise IndexError("only the queue's first request can be looked at")
        level = self._first()
        return level.waiting[0][0] if level.waiting else level.delayed[0]

    def clear(self) -> None:
        for level in self._levels.values():
            level.waiting.clear()
            level.delayed.clear()
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[InferRequest]:
        for level in self._levels.values():
            yield from (r for r, _ in level.waiting)
            yield from level.delayed


def queue_policy(cfg: ModelConfig) -> PolicyQueue | None:
    """The model's policy queue, or None when its config asks for nothing a deque cannot do."""
    if not cfg.HasField("dynamic_batching"):
        return None
    db = cfg.dynamic_batching
    default = LevelPolicy.from_config(db.default_queue_policy)
    per_level = {int(n): LevelPolicy.from_config(p) for n, p in db.priority_queue_policy.items()}
    if not db.priority_levels and default == LevelPolicy():
        return None
    return PolicyQueue(default, int(db.priority_levels), int(db.default_priority_level), per_level)
