"""Instance pool: one worker thread per model instance, pulling batches from one shared queue.

The default scheduler and the dynamic batcher are the same pool with a different BatchPolicy
(scheduling/queue.py): one request per execute, or as many queued requests as fit in
``max_batch_size`` (waiting up to ``max_queue_delay`` for more). Results cross back to the event
loop once per batch.

``InstancePool`` coordinates; each part is its own object under the pool's one lock:

- ``BatchFormer`` (batching.py): the queue, batch formation, queue timeouts, preserve_ordering's places;
- ``Workers`` (workers.py): the instances, a worker thread each, who is idle and whom to wake;
- ``BatchRunner`` (execute.py): one batch executed and answered, its statistics;
- the execution strategies: ``InlineSwitch`` (inline.py: short executes of a GIL-bound backend on the
  event loop) and ``AutoPromotion`` (execution_mode.py: ``execution_mode: auto``'s move to processes);
- ``ExecuteWatch`` (execute_watch.py): the execute watchdog's view;
- the rate limiter's ``Gate`` (rate_limiter.py), when on, grants each worker its turn before it takes
  a batch.

Instances are added and retired while the pool serves (an ``instance_group`` update: workers.py).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable

from inferd.backends.base import BackendInstance
from inferd.core.request import InferRequest
from inferd.core.stats import ModelStats
from inferd.errors import UnavailableError
from inferd.scheduling.ahead import Ahead, Sent, lane_of, send
from inferd.scheduling.batching import BatchFormer
from inferd.scheduling.execute import BatchRunner, Out
from inferd.scheduling.execute_watch import ExecuteWatch
from inferd.scheduling.execution_mode import AutoPromotion
from inferd.scheduling.inline import LOOP_GUARD, OVERRUN_S, InlineOverrun, InlineSwitch
from inferd.scheduling.queue import BatchPolicy, PolicyQueue
from inferd.scheduling.rate_limiter import Gate
from inferd.scheduling.watchdog import Watchdog
from inferd.scheduling.workers import Workers

log = logging.getLogger("inferd.scheduling")

Clock = Callable[[], int]


class InstancePool:
    """Queue + worker threads for one model version (default scheduler or dynamic batcher)."""

    def __init__(
        self,
        model_name: str,
        model_version: str,
        instances: list[tuple[str, BackendInstance]],
        policy: BatchPolicy,
        stats: ModelStats,
        loop: asyncio.AbstractEventLoop,
        clock: Clock = time.monotonic_ns,
        promote: Callable[[], dict[int, BackendInstance]] | None = None,
        queue: PolicyQueue | None = None,
        execute_timeout_ns: int = 0,
        gate: Gate | None = None,
        watchdog: Watchdog | None = None,
    ) -> None:
        """``promote``: makes process instances for ``execution_mode: auto`` (scheduling/execution_mode.py),
        by worker index;
        ``queue``: the dynamic batcher's queue policy (scheduling/queue.py), None: first in, first out;
        ``execute_timeout_ns``: the execute watchdog's limit (scheduling/watchdog.py), 0: none;
        ``gate``: the instances' slots in the rate limiter (scheduling/rate_limiter.py), None: off;
        ``watchdog``: the server's, which watches the pool when it has an execute timeout (None: one of its own)."""
        self._model_name = model_name
        self._model_version = model_version
        self._stats = stats
        self._loop = loop
        self._clock = clock
        self._lock = threading.Lock()
        self._executing = 0
        self._stopping = False
        self._gate = gate
        workers = self._workers = Workers(self._lock, instances)
        threads = [workers.start(name, self._worker) for name, _inst in instances]
        # a queue delay means waiting for more requests: that needs a thread that may block
        capable = (
            policy.max_queue_delay_ns == 0
            and not execute_timeout_ns  # an execute that hangs on the loop hangs the watchdog too
            and gate is None  # the loop must never wait for the rate limiter's grant
            and all(inst.inline_ok for _, inst in instances)
        )
        self._inline = InlineSwitch(
            capable,
            clock,
            loop,
            self._lock,
            workers.wake_all,
            self,
            f"model '{model_name}' version {model_version}",
        )
        self._auto = (
            None if promote is None else AutoPromotion(model_name, promote, workers, self._leave_threads)
        )
        self._watch = ExecuteWatch(model_name, model_version, execute_timeout_ns, workers, gate, stats)
        self._runner = BatchRunner(
            model_name, model_version, stats, loop, clock, self._inline, self._auto, self._watch.abandoned
        )
        self._former = BatchFormer(policy, queue, clock, loop, self._lock, self._runner.reject)
        self._queue = self._former.queue
        self._policy_queue = queue
        #: the next batch sent ahead to a busy process instance (ahead.py says where it applies)
        self._ahead = Ahead(not policy.batching and queue is None and not execute_timeout_ns and gate is None)
        started = 0
        try:
            for t in threads:
                t.start()
                started += 1
        except BaseException:  # no thread left to run (the system's limit): the started ones end
            self.halt(threads[:started])
            raise
        self._watchdog = (watchdog or Watchdog()) if execute_timeout_ns else None
        if self._watchdog is not None:
            self._watchdog.watch(self)

    # -- Scheduler protocol ------------------------------------------------------------------
    def enqueue(self, request: InferRequest) -> None:
        request.t_queue_ns = now = self._clock()
        inline = self._inline
        deadline = 0
        sent: list[Sent] | None = None
        with self._lock:
            if self._stopping:
                raise UnavailableError("Server is stopping")
            watch = self._watch
            if watch.abandoned and watch.all_stuck():
                raise watch.stuck_error()
            pq = self._policy_queue
            if pq is None:
                self._queue.append(request)
            else:
                deadline = pq.admit(request, now)
            if not inline.active:
                self._workers.wake_one()
                if self._ahead.busy:
                    sent = self._fill_ahead()
        if sent:
            send(sent)
        if deadline:  # on the loop: reject (or delay) it then if it still waits
            self._former.expire_at(deadline, now)
        if not inline.active:
            return
        if not inline.drain_scheduled:
            inline.drain_scheduled = True
            self._loop.call_soon(self._drain)

    def inflight(self) -> int:
        return len(self._queue) + self._executing

    def stats(self) -> dict[str, int]:
        return {"queued": len(self._queue), "executing": self._executing}

    def idle_workers(self) -> int:
        """Workers waiting for a request (what a test waits for instead of sleeping)."""
        with self._lock:
            return len(self._workers.idle)

    def holding_workers(self) -> int:
        """Workers holding a short batch open for more requests (max_queue_delay)."""
        with self._lock:
            return len(self._workers.holding)

    @property
    def executing_inline(self) -> bool:
        """Whether executes run on the event loop now (inline mode)."""
        return self._inline.active

    async def stop(self, timeout_s: float) -> None:
        if self._watchdog is not None:
            self._watchdog.forget(self)
        LOOP_GUARD.unwatch(self._loop, self)
        deadline = time.monotonic() + timeout_s
        while self.inflight() and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        with self._lock:
            self._stopping = True
            leftover = list(self._queue)
            self._queue.clear()
            self._workers.wake_all()
        if self._gate is not None:  # workers waiting for a turn: nothing is left to take
            self._gate.withdraw()
        for r in leftover:
            self._runner.fail(r, UnavailableError("Server is stopping"))
        await asyncio.to_thread(self._join_and_unload)

    def halt(self, threads: list[threading.Thread] | None = None) -> None:
        """End the workers at once (a load that fails after this pool started): nothing is queued
        yet, nothing is unloaded (the load does that)."""
        with self._lock:
            self._stopping = True
            self._workers.wake_all()
        self._workers.join(threads)

    def _join_and_unload(self) -> None:
        self._workers.join()
        if self._gate is not None:
            self._gate.close()
        self._workers.unload_all()

    # -- instance_group updates and execution_mode auto ----------------------------------------------
    @property
    def promoted(self) -> bool:
        """Whether the instances moved (or are moving) to worker processes."""
        return self._workers.replacements is not None

    def add_instances(
        self, instances: list[tuple[str, BackendInstance]], gate: Gate | None = None
    ) -> list[int]:
        """Serve on ``instances`` too; their worker indices. ``gate``: their rate limiter slots."""
        workers = self._workers
        started = []
        with self._lock:
            if self._stopping:
                raise RuntimeError("the pool stopped")
            if self._gate is not None and gate is not None:  # slot i is worker i's
                self._gate.extend(gate)
            first = len(workers.instances)
            for name, inst in instances:
                workers.instances.append((name, inst))
                if workers.replacements is not None:  # already moved: made as processes by the caller
                    workers.replacements.append(inst)
                started.append(workers.start(name, self._worker))
                self._watch.added()
                if self._auto is not None:
                    self._auto.added()
                self._inline.capable = self._inline.capable and inst.inline_ok
            workers.live += len(instances)
            if not self._inline.capable:
                self._inline.active = False
            if self._auto is not None:
                self._auto.grew()
        for t in started:
            t.start()
        return list(range(first, first + len(instances)))

    async def remove_instances(self, indices: list[int], timeout_s: float) -> None:
        """Retire the workers at ``indices``; returns once each finished its batch (up to
        ``timeout_s``) and its instance unloaded."""
        with self._lock:
            if self._gate is not None:  # one waiting for its turn stops waiting
                self._gate.retire(indices)
            self._workers.retire(indices, bool(self._queue))
        await asyncio.to_thread(self._workers.join_retired, indices, timeout_s)
        if self._gate is not None:
            self._gate.leave(indices)

    def _leave_threads(self) -> bool:
        """``execution_mode: auto`` moves to processes (lock held): never inline again; False when
        the pool stops."""
        if self._stopping:
            return False
        self._inline.capable = False
        self._inline.active = False
        return True

    # -- worker side ---------------------------------------------------------------------------
    def _worker(self, index: int, cond: threading.Condition) -> None:
        queue = self._queue
        workers = self._workers
        instance = workers.instances[index][1]
        gate = self._gate
        inline = self._inline
        watch = self._watch
        runner = self._runner
        ahead = self._ahead
        lane = lane_of(instance) if ahead.enabled else None
        while True:
            if (
                workers.replacements is not None
                and workers.replacements[index] is not instance
                and index not in ahead.batches  # (what was sent ahead runs on the instance first)
            ):
                instance = workers.take_over(index, instance)
                lane = lane_of(instance) if ahead.enabled else None
            sent: list[Sent] | None = None
            with cond:
                taken = ahead.batches.pop(index, None) if ahead.batches else None
                if taken is not None:  # sent ahead while its last batch ran: its worker runs it already
                    batch, total = taken[0], taken[1]
                else:
                    took = self._take(index, cond, instance)
                    if took is None:
                        return
                    batch, total = took
                    del took  # (nothing but ``batch`` holds the requests: see the end of the loop)
                    if not batch:
                        continue
                if lane is not None:
                    ahead.busy[index] = (self._clock(), lane)
                    if queue:
                        sent = self._fill_ahead()
            if sent:
                send(sent)
            out: Out = []
            watched = watch.timeout_ns > 0
            if watched:
                with self._lock:
                    watch.running[index] = (self._clock(), batch)
            try:
                runner.run(instance, batch, total, inline=False, out=out, worker=index)
            finally:
                if gate is not None:  # before the answers go; with more queued, it stays in the order
                    gate.release(index, again=bool(queue))
                with self._lock:
                    self._executing -= len(batch)
                    if lane is not None:
                        ahead.busy.pop(index, None)
                    if watched:
                        watch.running[index] = None
                        watch.abandoned.discard(index)
                    if inline.active and queue and not inline.drain_scheduled:
                        inline.drain_scheduled = True
                        self._loop.call_soon_threadsafe(self._drain)
                if taken is not None:  # (the runner dropped its cancelled requests: nobody adopted it)
                    taken[2].forget(taken[3])
                # answers cross back after the count dropped: a caller that sees its answer sees it
                runner.send_back(out)
                # an idle worker holds nothing: the last batch's tensors may be views over a client's
                # shared memory, which cannot be unregistered while they live
                del batch, out, taken

    def _take(
        self, index: int, cond: threading.Condition, instance: BackendInstance
    ) -> tuple[list[InferRequest], int] | None:
        """Wait for the worker's next batch (lock held): it, no batch (look again: take over, or
        none was left) or None (its thread ends: the pool stops, or its instance was retired)."""
        former = self._former
        queue = self._queue
        workers = self._workers
        idle = workers.idle
        retired = workers.retired
        gate = self._gate
        inline = self._inline
        while not queue or inline.active:
            if self._stopping or index in retired:
                return None
            if workers.replacements is not None and workers.replacements[index] is not instance:
                return [], 0  # take over first, then look again
            if gate is not None:  # no work after all: out of the rate limiter's order
                gate.unstage(index)
            idle.append(cond)
            cond.wait()
            if cond in idle:  # woken by a wake-all, or never popped: not idle any more
                idle.remove(cond)
        if retired and index in retired:  # an instance_group update removed its instance
            return None
        policy = former.policy
        if policy.batching and policy.max_queue_delay_ns > 0:
            former.wait_for_batch(cond, workers.holding, self._is_stopping)
            if not queue:  # stop() failed the queue, or another worker took it meanwhile
                return [], 0
        expired = former.take_expired()
        if expired:
            self._runner.reject(expired, on_loop=False)
            if not queue:
                return [], 0
        if gate is not None and not gate.turn(index, self._lock, lambda: bool(queue) and not self._stopping):
            return [], 0  # no work was left once its turn came
        batch, total = former.form()
        self._executing += len(batch)
        if queue:  # more than one batch waits: another worker takes the rest
            workers.wake_one()
        return batch, total

    def _fill_ahead(self) -> list[Sent]:
        """Batches for the busy process instances to run next (lock held; ahead.py)."""
        sent = self._ahead.fill(self._workers, self._former)
        for batch, _total, _lane, _token in sent:
            self._executing += len(batch)
            if log.isEnabledFor(logging.DEBUG):  # (what a test waits for)
                log.debug(
                    "model '%s' version %s: request '%s' sent ahead to a busy instance",
                    self._model_name,
                    self._model_version,
                    batch[0].id,
                )
        return sent

    def _is_stopping(self) -> bool:
        return self._stopping

    def _drain(self) -> None:
        """Inline mode, on the loop: execute what is queued, one batch per loop iteration."""
        inline = self._inline
        inline.drain_scheduled = False
        batch: list[InferRequest] | None = None
        former = self._former
        with self._lock:
            if not inline.active or self._stopping:
                self._workers.wake_all()
                return
            expired = former.take_expired() if former.policy_queue is not None else None
            if (
                not self._executing and self._queue
            ):  # else a worker finishing its last threaded batch reschedules us
                batch, total = former.form()
                self._executing += len(batch)
        if expired:
            self._runner.reject(expired, on_loop=True)
        if batch is None:
            return
        try:
            self._runner.run(self._workers.instances[self._workers.first][1], batch, total, inline=True)
        except InlineOverrun:  # the loop guard interrupted it (inline.py)
            self._overran(batch, total)
        finally:
            with self._lock:
                self._executing -= len(batch)
                again = bool(self._queue)
        if again and not inline.drain_scheduled:
            inline.drain_scheduled = True
            self._loop.call_soon(self._drain)

    def _overran(self, batch: list[InferRequest], total: int) -> None:
        """An inline execute ran away and was interrupted: its batch fails, the pool leaves the loop."""
        error = UnavailableError(
            f"model '{self._model_name}' version {self._model_version}: the execute ran longer than "
            f"{OVERRUN_S:g} s on the event loop (inline mode, where only executes measured short run) and "
            "was interrupted; the model's executes run in threads from now on"
        )
        log.error("%s", error.message)
        self._stats.record_failed_execution(total, int(OVERRUN_S * 1e9))
        self._inline.give_up()
        self._runner.fail_all(batch, error, inline=True)

    # -- the execute watchdog -------------------------------------------------------------------------
    @property
    def execute_timeout_ns(self) -> int:
        return self._watch.timeout_ns

    def check_overdue(self, now_ns: int) -> None:
        """The watchdog's look: fail the batches executing longer than the timeout, stop what can be."""
        self._watch.check_overdue(now_ns, self._queue, self._runner.fail_all)


LOOP_GUARD.marks.add(InstancePool._drain.__code__)  # its frame on the loop's stack: an inline execute
