"""The sequence batcher: the scheduler of a model with ``sequence_batching`` (a stateful model).

A sequence is the requests that share a correlation ID (``sequence_id``), from the one flagged
START to the one flagged END. As Triton's ``SequenceBatchScheduler``:

- A sequence gets a **slot** at its START: an instance and a batch slot on it (``max_batch_size``
  slots per instance for ``direct``, ``max_candidate_sequences`` for ``oldest``; the lowest slot
  index first, so sequences spread over the instances), and keeps it to its END. A START that finds
  every slot taken waits in the **backlog**, with the requests that follow it, until a slot frees.
- Requests of a sequence execute **one at a time, in order**: the next one is handed to the
  instance when the previous one got its final response (its state, if any, written back first).
- ``direct``: each execute holds at most one request per slot, in slot order; an empty slot below
  a busy one gets a **filler** request (READY false, CORRID 0, zeros), whose response is dropped,
  so that position ``i`` of a batch is always slot ``i`` (what a model keeping state per batch slot
  needs). ``max_queue_delay_microseconds`` with ``minimum_slot_utilization`` holds a batch until
  that share of the slots is ready. ``oldest``: the dynamic batcher over the sequences' next
  requests (``preferred_batch_size``, ``max_queue_delay_microseconds``), no fillers.
- Control inputs and implicit state (``sequence_state.py``) are added to each request as it is
  handed to the instance; the state outputs are taken out of its response before the client sees
  it, and feed the sequence's next request.
- A sequence without a request for ``max_sequence_idle_microseconds`` is released (its slot goes to
  the backlog or is free again); a later request of it is refused as a continuation without a
  START. A request's ``timeout`` bounds its sequence's wait in the backlog ("timeout of the
  corresponding sequence has been expired"). A cancelled request ends its sequence: the requests
  queued behind it are cancelled too.
- ``iterative_sequence``: a request without a correlation ID starts a sequence of its own, under the
  next of the batcher's IDs (1, 2, ...), flagged START. Its model may release it for another
  execute (a Python model's ``set_release_flags(TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)``): it
  comes back to its slot flagged 0, behind what the sequence has queued. Its final response ends
  the sequence (the reference enqueues a cancelled END request then, counted as a CANCELED
  failure: so is it here).
- An ``instance_group`` update (engine/instance_update.py) adds instances with their slots; a removed
  instance's slots take no new sequence, and it unloads once its sequences ended (the update does
  not wait for them).

The parts: the settings read from the config once (``sequence_settings.py``); the instances, a pool
and batch slots each (``sequence_slots.py``); what a request gets on its way in and out (control
inputs, states: ``sequence_state.py``); the wrapped instance (``sequence_instance.py``: slot order,
fillers, state outputs requested), so statistics, inline mode, the execute watchdog and cancellation
are the pool's (``instances.py``) as for any model. The batcher here keeps the sequences: which
holds which slot, the backlog, each one's queue, their timers. It lives on the event loop:
``enqueue``, completions and timers all run there, so it takes no lock.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from inferd.backends.base import BackendInstance, Reschedulable
from inferd.core.request import SEQUENCE_END, SEQUENCE_START, InferRequest
from inferd.core.response import InferResponse, ResponseStream
from inferd.core.response_path import ResponsePath
from inferd.core.stats import ModelStats
from inferd.errors import (
    InferdError,
    InternalError,
    InvalidArgumentError,
    RequestCancelledError,
    UnavailableError,
)
from inferd.scheduling.instances import InstancePool
from inferd.scheduling.rate_limiter import Gate
from inferd.scheduling.sequence_instance import wrap_instance
from inferd.scheduling.sequence_settings import SequenceSettings
from inferd.scheduling.sequence_slots import SequenceSlots, Slot
from inferd.scheduling.sequence_state import SequenceStates, take_states
from inferd.scheduling.watchdog import Watchdog

if TYPE_CHECKING:
    from inferd.repository.config.schema import ModelConfig

log = logging.getLogger("inferd.scheduling")

#: how soon the reaper looks again at an idle sequence still waiting in the backlog (the reference's)
BACKLOG_IDLE_RECHECK_NS = 50_000_000
BACKLOG_EXPIRED = "timeout of the corresponding sequence has been expired"
STOPPING = "Server is stopping, scheduler for model has stopped accepting new inference requests"
NOT_STARTED = "must specify the START flag on the first request of the sequence"

Clock = Callable[[], int]
CorrelationId = int | str


class Sequence:
    """One sequence: its requests not yet handed to the instance, its slot (None: in the backlog)."""

    __slots__ = ("cid", "ended", "expire_ns", "last_ns", "queue", "slot", "states", "timer")

    def __init__(self, cid: CorrelationId, states: SequenceStates | None, now_ns: int) -> None:
        self.cid = cid
        self.queue: collections.deque[InferRequest] = collections.deque()
        self.slot: Slot | None = None
        self.states = states
        #: its END was queued, or it was released (idle): no request joins it any more
        self.ended = False
        self.last_ns = now_ns
        self.expire_ns = 0  # a backlogged sequence's deadline (its requests' timeouts)
        self.timer: asyncio.TimerHandle | None = None


class SequenceBatcher:
    """The scheduler of a ``sequence_batching`` model (the Scheduler protocol, ``base.py``)."""

    def __init__(
        self,
        model_name: str,
        model_version: str,
        config: ModelConfig,
        instances: list[tuple[str, BackendInstance]],
        stats: ModelStats,
        loop: asyncio.AbstractEventLoop,
        *,
        model_dir: Path | None = None,
        clock: Clock = time.monotonic_ns,
        execute_timeout_ns: int = 0,
        gate: Gate | None = None,
        watchdog: Watchdog | None = None,
    ) -> None:
        """``instances``: the model's instances (unloaded here if the config's sequence settings fail
        the reference's load checks); ``model_dir``: where ``initial_state/`` files are; ``gate``:
        the instances in the rate limiter (each instance's pool gets its own); ``watchdog``: the
        server's execute watchdog, which watches every pool."""
        self._watchdog = watchdog
        self._model_name = model_name
        self._model_version = model_version
        self._loop = loop
        self._clock = clock
        self._stats = stats
        try:
            self.settings = settings = SequenceSettings(config, model_dir)
        except InferdError:
            for _, inst in instances:
                inst.unload()
            if gate is not None:
                gate.close()
            raise
        #: iterative_sequence: requests without an ID get the next of these (see the module docstring)
        self.iterative = settings.iterative
        self._next_id = 1
        #: id(request) -> its slot, from its hand-off to the instance until its final response
        self.tickets: dict[int, Slot] = {}
        self._execute_timeout_ns = execute_timeout_ns
        gates = gate.split() if gate is not None else [None] * len(instances)
        pools: list[InstancePool] = []
        try:
            for (name, inst), g in zip(instances, gates, strict=True):
                pools.append(self._pool(name, inst, g))
        except BaseException:  # a pool that cannot start: the others' workers end too
            for pool in pools:
                pool.halt()
            raise
        self._slots = SequenceSlots(pools, settings.slot_count, loop)
        self._live: dict[CorrelationId, Sequence] = {}
        self._backlog: collections.deque[Sequence] = collections.deque()
        self._waiting = 0  # requests in the sequences' queues
        self._handed = 0  # requests with the instances, final response not yet seen
        self._reaper: asyncio.TimerHandle | None = None
        self._stopping = False
        #: the server is shutting down: no new sequence starts, the live ones go on (``drain``)
        self._draining = False

    def _pool(self, name: str, inst: BackendInstance, gate: Gate | None) -> InstancePool:
        """The pool that runs one instance (wrapped); an iterative model's instance reschedules here."""
        if self.iterative and isinstance(inst, Reschedulable):
            inst.rescheduler = self.reschedule
        return InstancePool(
            self._model_name,
            self._model_version,
            [(name, wrap_instance(inst, self.settings, self.tickets))],
            self.settings.policy,
            self._stats,
            self._loop,
            clock=self._clock,
            execute_timeout_ns=self._execute_timeout_ns,
            gate=gate,
            watchdog=self._watchdog,
        )

    # -- Scheduler protocol ------------------------------------------------------------------
    def enqueue(self, request: InferRequest) -> None:
        """Check ``request`` against its sequence (the reference's texts), then queue it there."""
        now = self._clock()
        request.t_queue_ns = now
        name = self._model_name
        if request.batch_size > 1:
            raise InvalidArgumentError(
                f"inference request to model '{name}' must specify batch-size 1 due to requirements of "
                "sequence batcher"
            )
        cid = request.correlation_id
        if cid == 0 or cid == "":
            if not self.iterative:
                raise InvalidArgumentError(
                    f"inference request to model '{name}' must specify a non-zero or non-empty correlation ID"
                )
            cid = request.correlation_id = self._next_id  # a sequence of its own (module docstring)
            self._next_id += 1
            request.flags = SEQUENCE_START
        start = bool(request.flags & SEQUENCE_START)
        end = bool(request.flags & SEQUENCE_END)
        if start and (self._stopping or self._draining):
            raise UnavailableError(STOPPING)
        seq = self._live.get(cid)
        if seq is None and not start:
            raise InvalidArgumentError(
                f"inference request for sequence {cid} to model '{name}' {NOT_STARTED}"
            )
        stream = request.stream
        if stream is None:
            raise InternalError("a sequence request needs a response stream")
        if seq is None:
            specs = self.settings.state_specs
            seq = Sequence(cid, SequenceStates(specs) if specs else None, now)
            if not end:
                self._live[cid] = seq
            slot = self._slots.take()
            if slot is not None:
                self._assign(seq, slot)
            else:
                self._backlog.append(seq)
        elif start:
            log.warning(
                "sequence %s for model '%s' has a conflict. The previous sequence did not end before this "
                "sequence start. Previous sequence will be terminated early.",
                cid,
                name,
            )
        seq.last_ns = now
        self._track(request, stream, seq)
        seq.queue.append(request)
        self._waiting += 1
        if end:
            seq.ended = True
            if self._live.get(cid) is seq:
                del self._live[cid]
        if seq.slot is None:
            if request.timeout_us:
                self._set_backlog_deadline(seq, now + request.timeout_us * 1000)
        else:
            self._pump(seq.slot)
        if self._reaper is None and self._live:
            self._reaper = self._loop.call_later(self.settings.idle_ns / 1e9, self.reap)

    def inflight(self) -> int:
        return self._waiting + self._handed

    def drain(self) -> None:
        """The server is shutting down: refuse new sequences (the reference's text) and serve the
        live ones, whose next requests come on their clients' open connections (runtime.py waits
        for ``live_sequences`` within the exit timeout)."""
        self._draining = True

    def live_sequences(self) -> int:
        """Sequences started and not ended yet (nor released as idle), backlogged ones included."""
        return len(self._live)

    async def stop(self, timeout_s: float) -> None:
        """No new sequence starts; what is queued finishes (up to ``timeout_s``), the rest fails."""
        self._stopping = True
        deadline = time.monotonic() + timeout_s
        while self.inflight() and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        if self._reaper is not None:
            self._reaper.cancel()
            self._reaper = None
        error = UnavailableError("Server is stopping")
        for seq in [*(s.seq for s in self._slots.all if s.seq is not None), *self._backlog]:
            self._fail_queue(seq, error)
        self._backlog.clear()
        await self._slots.stop(max(0.0, deadline - time.monotonic()))

    # -- what tests and the statistics may look at ------------------------------------------------
    def stats(self) -> dict[str, int]:
        return {
            "queued": self._waiting,
            "executing": self._handed,
            "sequences": sum(1 for s in self._slots.all if s.seq is not None) + len(self._backlog),
            "backlog": len(self._backlog),
        }

    @property
    def pools(self) -> list[InstancePool]:
        return self._slots.pools

    # -- the sequences --------------------------------------------------------------------------
    def _assign(self, seq: Sequence, slot: Slot) -> None:
        seq.slot = slot
        slot.seq = seq
        if seq.timer is not None:
            seq.timer.cancel()
            seq.timer = None

    def _pump(self, slot: Slot) -> None:
        """Hand the slot's next request to its instance, or pass the slot on once its sequence ended."""
        while not slot.busy:
            seq = slot.seq
            if seq is None:
                return
            if seq.queue:
                self._hand_off(slot, seq, seq.queue.popleft())
                return
            if not seq.ended:
                return  # it waits for the sequence's next request
            self._release(slot)

    def _release(self, slot: Slot) -> None:
        """The slot's sequence is over: the oldest backlogged sequence takes it, else it is free."""
        slot.seq = None
        if self._slots.leaving(slot):  # its instance was removed: the slot goes with it
            return
        while self._backlog:
            seq = self._backlog.popleft()
            if seq.queue or not seq.ended:
                log.debug("sequence %s of model '%s' takes slot %d", seq.cid, self._model_name, slot.index)
                self._assign(seq, slot)
                return
        self._slots.free(slot)

    def _hand_off(self, slot: Slot, seq: Sequence, request: InferRequest) -> None:
        """Controls and state in, then to the slot's instance (on the loop)."""
        self._waiting -= 1
        inputs = {**request.inputs, **self.settings.controls.for_request(request)}
        states = seq.states
        if states is not None:
            if request.flags & SEQUENCE_START:
                states.reset(self.settings.state_specs)
            inputs.update(states.current)
        request.inputs = inputs
        slot.busy = True
        self.tickets[id(request)] = slot
        self._handed += 1
        queued_ns = request.t_queue_ns
        try:
            self._slots.pools[slot.pool].enqueue(request)
            # the queue time counts from the batcher, as the reference's (the wait for its turn in the
            # sequence, or for a slot, is queueing too); a direct batch's delay counts from there too
            request.t_queue_ns = queued_ns
        except InferdError as e:  # the pool stopped: the final response frees the slot as any other
            assert request.stream is not None
            request.stream.deliver(self._error(request, e), True)

    def _track(self, request: InferRequest, stream: ResponseStream, seq: Sequence) -> None:
        """The scheduler's stages of the request's response path (core/response_path.py): hear of
        its final response; take the states out of its responses."""
        loop = self._loop

        def final(_s: ResponseStream) -> None:
            # after this delivery: its states are taken (post-processing) before the next request goes
            loop.call_soon(self._completed, request)

        take = None
        specs = self.settings.state_specs
        if specs:

            def take(response: InferResponse) -> None:
                take_states(response, specs, seq.states)

        path = stream.path
        stream.path = (ResponsePath() if path is None else path).tracked(final, take)

    def _completed(self, request: InferRequest) -> None:
        """On the loop, after a request's final response: its slot takes the sequence's next one."""
        slot = self.tickets.pop(id(request), None)
        if slot is None:
            return  # answered before it was handed off (the sequence failed or the server stops)
        self._handed -= 1
        slot.busy = False
        seq = slot.seq
        stream = request.stream
        if seq is not None and stream is not None and stream.cancelled:
            # as the reference: a cancelled request ends its sequence and cancels the ones behind it
            self._end(seq, RequestCancelledError("Request was cancelled"), "CANCELED")
        elif self.iterative and seq is not None and not request.flags & SEQUENCE_END:
            # released, not rescheduled: the reference's cancelled END request ends the sequence
            self._stats.record_request(False, 0, "CANCELED")
            seq.ended = True
            if self._live.get(seq.cid) is seq:
                del self._live[seq.cid]
        self._pump(slot)

    # -- iterative sequences ---------------------------------------------------------------------
    def reschedule(self, request: InferRequest) -> None:
        """The model released ``request`` for another execute (from any thread)."""
        self._loop.call_soon_threadsafe(self._rescheduled, request)

    def _rescheduled(self, request: InferRequest) -> None:
        """On the loop: ``request`` goes back to its slot, flagged 0, behind what its sequence queued;
        a sequence that ended meanwhile (idle, or the request was its END) refuses it, as the
        reference (which only logs it: its client would wait for ever)."""
        slot = self.tickets.pop(id(request), None)
        if slot is None:
            return
        self._handed -= 1
        slot.busy = False
        seq = slot.seq
        request.flags = 0
        if seq is None or seq.ended or request.stream is None:
            error = InvalidArgumentError(
                f"inference request for sequence {request.correlation_id} to model '{self._model_name}' "
                f"{NOT_STARTED}"
            )
            log.error("Failed to release request: %s", error.message)
            if request.stream is not None:
                request.stream.deliver(self._error(request, error), True)
        else:
            request.t_queue_ns = seq.last_ns = self._clock()
            seq.queue.append(request)
            self._waiting += 1
        self._pump(slot)

    # -- instance_group updates (engine/instance_update.py) -------------------------------------------
    @property
    def promoted(self) -> bool:
        return False  # its pools never move to processes

    def add_instances(
        self, instances: list[tuple[str, BackendInstance]], gate: Gate | None = None
    ) -> list[int]:
        """A pool and its slots for each of ``instances`` (``gate``: their rate limiter slots); their
        pool indices."""
        first = len(self._slots.pools)
        gates = gate.split() if gate is not None else [None] * len(instances)
        for (name, inst), g in zip(instances, gates, strict=True):
            for slot in self._slots.add(self._pool(name, inst, g)):
                self._release(slot)  # a backlogged sequence takes it, else it is free
        return list(range(first, len(self._slots.pools)))

    async def remove_instances(self, indices: list[int], timeout_s: float) -> None:
        """The pools at ``indices`` take no new sequence; each stops once its sequences ended."""
        await self._slots.remove(indices)

    def _end(self, seq: Sequence, error: InferdError, reason: str) -> None:
        seq.ended = True
        if self._live.get(seq.cid) is seq:
            del self._live[seq.cid]
        self._fail_queue(seq, error, reason)

    def _fail_queue(self, seq: Sequence, error: InferdError, reason: str = "REJECTED") -> None:
        now = self._clock()
        while seq.queue:
            r = seq.queue.popleft()
            self._waiting -= 1
            self._stats.record_request(False, now - r.t_start_ns, reason)
            if r.stream is not None:
                r.stream.deliver(self._error(r, error), True)

    def _error(self, request: InferRequest, error: InferdError) -> InferResponse:
        return InferResponse(self._model_name, self._model_version, request.id, error=error)

    # -- timers ----------------------------------------------------------------------------------
    def reap(self) -> None:
        """The idle timer: release the sequences idle for ``max_sequence_idle_microseconds``."""
        self._reaper = None
        now = self._clock()
        wait = self.settings.idle_ns
        idle: list[Slot] = []
        for cid, seq in list(self._live.items()):
            left = seq.last_ns + self.settings.idle_ns - now
            if left > 0:
                wait = min(wait, left)
                continue
            if seq.slot is None:  # still waiting for a slot: looked at again soon
                wait = min(wait, BACKLOG_IDLE_RECHECK_NS)
                continue
            log.debug("sequence %s of model '%s': max sequence idle exceeded", cid, self._model_name)
            del self._live[cid]
            seq.ended = True
            idle.append(seq.slot)
        for slot in idle:  # released now, or when their queued requests are done
            self._pump(slot)
        if self._live and not self._stopping:
            self._reaper = self._loop.call_later(max(wait, 1000) / 1e9, self.reap)

    def _set_backlog_deadline(self, seq: Sequence, deadline_ns: int) -> None:
        if seq.expire_ns and seq.expire_ns <= deadline_ns:
            return
        seq.expire_ns = deadline_ns
        if seq.timer is not None:
            seq.timer.cancel()
        seq.timer = self._loop.call_later(max(0, deadline_ns - self._clock()) / 1e9, self.expire, seq)

    def expire(self, seq: Sequence) -> None:
        """A backlogged sequence's deadline passed: its requests are rejected, the sequence forgotten."""
        seq.timer = None
        if seq.slot is not None:
            return
        try:
            self._backlog.remove(seq)
        except ValueError:
            return
        self._end(seq, UnavailableError(BACKLOG_EXPIRED), "REJECTED")
