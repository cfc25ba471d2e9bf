"""Sending a process instance its next batch while its current one runs (issue 48).

A worker process is idle from the moment it sends a batch's end until its next batch arrives: the
end crosses to the server, the pool's worker thread answers it, takes the next request and sends
it, and each step waits for a core the other instances' processes also want. At ``cpu_work``'s
3 ms executes on two shared cores that round trip cost a tenth of each instance's time. So when
requests wait and no worker is idle, the pool reserves the next request for a busy process
instance and sends it at once: its worker runs it as soon as the current execute ends (worker.py
``_run``), and the pool's worker thread, done with the current batch, adopts it (the instance's
``execute`` of the same requests waits for its end instead of sending them).

Only where nothing else depends on when an execute starts: no dynamic batching (ARCHITECTURE.md:
a batch forms when its instance frees up, the reference's rule), no queue policy (its timeouts),
no execute timeout (a batch waiting behind another would run down its clock), no rate limiter
(its grant comes before the batch is taken), and instances that say they may (``pipelines``: a
process instance of a model that is not decoupled). At most one batch waits ahead per instance,
the one that started first gets it (it frees up first); a worker that dies fails both the batch
it ran and the one ahead, as it fails the one it ran (UNAVAILABLE); unload and instance removal
wait for both, as for what executes. Statistics: the queue time of a batch sent ahead runs to
when the pool's thread takes it up (just after the worker started it), its compute is the
worker's own measure, as for any other.
"""

from __future__ import annotations

from typing import Any, Protocol, cast

from inferd.backends.base import BackendInstance
from inferd.core.request import InferRequest
from inferd.scheduling.batching import BatchFormer
from inferd.scheduling.workers import Workers


class Lane(Protocol):
    """An instance that takes its next batch ahead (``ProcessInstance``)."""

    @property
    def pipelines(self) -> bool: ...

    def reserve(self, requests: list[InferRequest]) -> Any: ...

    def send_ahead(self, token: Any) -> None: ...

    def forget(self, token: Any) -> None: ...


def lane_of(instance: BackendInstance) -> Lane | None:
    """The instance as a lane when it takes batches ahead, else None."""
    return cast(Lane, instance) if getattr(instance, "pipelines", False) else None


#: a batch sent ahead: its requests, batch size, the lane it went to and the lane's token
Sent = tuple[list[InferRequest], int, Lane, Any]


class Ahead:
    """Who executes and what each was sent ahead (the pool's lock guards it)."""

    __slots__ = ("batches", "busy", "enabled")

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        #: worker index -> (when its batch started, its lane): the workers executing on a lane
        self.busy: dict[int, tuple[int, Lane]] = {}
        #: worker index -> the batch sent ahead to its instance, which it runs next
        self.batches: dict[int, Sent] = {}

    def fill(self, workers: Workers, former: BatchFormer) -> list[Sent]:
        """While requests wait and no worker is idle, reserve a batch for each busy lane with none
        ahead, the longest-running first (lock held); the caller sends them after the lock."""
        queue = former.queue
        sent: list[Sent] = []
        busy = self.busy
        retired = workers.retired
        if workers.idle or workers.holding:
            return sent
        # every live worker executes (one woken and not yet running is not in ``busy``: the next
        # request is its own)
        if len(busy) < workers.live or (retired and sum(i not in retired for i in busy) < workers.live):
            return sent
        while queue:
            index = -1
            since = 0
            for i, (t0, _lane) in busy.items():
                if i not in self.batches and i not in retired and (index < 0 or t0 < since):
                    index, since = i, t0
            if index < 0:
                break
            lane = busy[index][1]
            batch, total = former.form()
            one = (batch, total, lane, lane.reserve(batch))
            self.batches[index] = one
            sent.append(one)
        return sent


def send(sent: list[Sent]) -> None:
    """Send what ``fill`` reserved (after the pool's lock: packing may copy tensors)."""
    for _batch, _total, lane, token in sent:
        lane.send_ahead(token)
