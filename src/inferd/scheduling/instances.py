"""Instance pool: one worker thread per model instance, pulling batches from one shared queue.

The default scheduler and the dynamic batcher are the same pool with a different BatchPolicy
(scheduling/queue.py): one request per execute, or as many queued requests as fit in
``max_batch_size`` (waiting up to ``max_queue_delay`` for more). Results cross back to the event
loop once per batch.

Inline mode: short executes of a GIL-bound backend run on the event loop (scheduling/inline.py).
The rate limiter (scheduling/rate_limiter.py), when on, grants each worker its turn before it takes
a batch; preserve_ordering (scheduling/ordering.py) reserves each request's place as its batch forms.

Idle workers wait last-in, first-out, lowest instance first: the instance still in the CPU's caches
(and the one a backend may make widest) takes the next request (BENCHMARKS.md, DenseNet at c1).

Instances added and retired while the pool serves (an ``instance_group`` update), and the move of
``execution_mode: auto`` to worker processes, are ``pool_members.py``'s.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import resource
import threading
import time
from collections.abc import Callable

from inferd.backends.base import BackendInstance
from inferd.core.request import InferRequest
from inferd.core.response import InferResponse
from inferd.core.stats import ModelStats
from inferd.errors import InferdError, InternalError, RequestCancelledError, UnavailableError
from inferd.scheduling.execution_mode import AutoMode, overlap
from inferd.scheduling.inline import LOOP_GUARD, OVERRUN_S, SMALL_NS, InlineMode, InlineOverrun
from inferd.scheduling.ordering import OrderedResponses
from inferd.scheduling.pool_members import PoolMembers
from inferd.scheduling.queue import (
    TIMEOUT_EXPIRED,
    BatchPolicy,
    PolicyQueue,
    RequestQueue,
    form_batch,
    next_batch,
)
from inferd.scheduling.rate_limiter import Gate
from inferd.scheduling.watchdog import Abortable, Watchdog, all_stuck, log_late

log = logging.getLogger("inferd.scheduling")

Clock = Callable[[], int]


class InstancePool(PoolMembers):
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
        self._policy = policy
        self._stats = stats
        self._loop = loop
        self._clock = clock
        self._policy_queue = queue
        self._queue: RequestQueue = collections.deque() if queue is None else queue
        self._lock = threading.Lock()
        # each worker waits on its own condition (on the one lock) so that the pool picks whom to wake
        self._idle: list[threading.Condition] = []  # a stack: the last worker to go idle is woken first
        self._holding: list[threading.Condition] = []  # workers holding a batch open for more requests
        self._conds: list[threading.Condition] = []
        self._executing = 0
        self._stopping = False
        self._instances = list(instances)
        #: workers retired by an instance_group update (pool_members.py), the others' count, the lowest
        self._retired: set[int] = set()
        self._live = len(instances)
        self._first = 0
        # inline mode (see the module docstring)
        # a queue delay means waiting for more requests: that needs a thread that may block
        self._inline_capable = (
            policy.max_queue_delay_ns == 0
            and not execute_timeout_ns  # an execute that hangs on the loop hangs the watchdog too
            and gate is None  # the loop must never wait for the rate limiter's grant
            and all(inst.inline_ok for _, inst in instances)
        )
        self._inline = False
        self._drain_scheduled = False
        self._inline_mode = InlineMode(clock)
        self._gate = gate
        #: preserve_ordering: each request's place, reserved as its batch forms (None: off)
        self._ordered = OrderedResponses() if policy.preserve_ordering else None
        #: instances that take over from ``_instances`` (by index) once their worker is idle
        self._replacements: list[BackendInstance] | None = None
        self._promote = promote
        self._auto: AutoMode | None = None
        if promote is not None and len(instances) >= 2:
            self._auto = AutoMode(model_name, self._decided)
        #: for AutoMode: when each worker's execute began (0: idle) and its last one's span
        self._busy_since: list[int] = []
        self._last_span: list[tuple[int, int]] = []
        self._threads: list[threading.Thread] = []
        #: each worker's condition -> its instance's index (the lowest idle one is woken first)
        self._rank: dict[threading.Condition, int] = {}
        #: the watchdog's view: each worker's execute in flight (start, batch) and those given up on
        self._execute_timeout_ns = execute_timeout_ns
        self._running: list[tuple[int, list[InferRequest]] | None] = []
        self._abandoned: set[int] = set()
        threads = [self._start_worker(name) for name, _inst in instances]
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
        deadline = 0
        with self._lock:
            if self._stopping:
                raise UnavailableError("Server is stopping")
            if self._abandoned and len(self._abandoned - self._retired) >= self._live:
                raise all_stuck(self._model_name, self._model_version, self._execute_timeout_ns)
            if self._policy_queue is None:
                self._queue.append(request)
            else:
                deadline = self._policy_queue.admit(request, now)
            if not self._inline:
                self._wake_one()
        if deadline:  # on the loop: reject (or delay) it then if it still waits
            self._loop.call_later((deadline - now) / 1e9, self._expire, deadline)
        if not self._inline:
            return
        if not self._drain_scheduled:
            self._drain_scheduled = True
            self._loop.call_soon(self._drain)

    def inflight(self) -> int:
        return len(self._queue) + self._executing

    def stats(self) -> dict[str, int]:
        return {"queued": len(self._queue), "executing": self._executing}

    def idle_workers(self) -> int:
        """Workers waiting for a request (what a test waits for instead of sleeping)."""
        with self._lock:
            return len(self._idle)

    def holding_workers(self) -> int:
        """Workers holding a short batch open for more requests (max_queue_delay)."""
        with self._lock:
            return len(self._holding)

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
            self._wake_all()
        if self._gate is not None:  # workers waiting for a turn: nothing is left to take
            self._gate.withdraw()
        for r in leftover:
            self._fail(r, UnavailableError("Server is stopping"))
        await asyncio.to_thread(self._join_and_unload)

    def halt(self, threads: list[threading.Thread] | None = None) -> None:
        """End the workers at once (a load that fails after this pool started): nothing is queued
        yet, nothing is unloaded (the load does that)."""
        with self._lock:
            self._stopping = True
            self._wake_all()
        for t in self._threads if threads is None else threads:
            t.join(timeout=5)

    def _join_and_unload(self) -> None:
        for t in self._threads:
            t.join(timeout=5)
        if self._gate is not None:
            self._gate.close()
        with self._lock:  # execution_mode auto: process instances no worker took over yet go too
            live = [pair for i, pair in enumerate(self._instances) if i not in self._retired]
            current = [inst for _, inst in self._instances]
            spare = [
                inst
                for i, inst in enumerate(self._replacements or ())
                if i not in self._retired and all(inst is not c for c in current)
            ]
        for name, inst in [*live, *(("(not taken over)", i) for i in spare)]:
            try:
                inst.unload()
            except Exception:
                log.exception("unloading instance %s failed", name)

    # -- worker side ---------------------------------------------------------------------------
    def _wake_one(self) -> None:
        """A request came (lock held): tell a worker holding a batch open, else the first idle one.

        The first: the lowest instance, so that one request at a time always meets the same one,
        which a backend may make the widest (ONNX Runtime gives its first instance every core).
        """
        if self._holding:
            self._holding[-1].notify()
        elif self._idle:
            idle = self._idle
            cond = min(idle, key=self._rank.__getitem__) if len(idle) > 1 else idle[0]
            idle.remove(cond)
            cond.notify()

    def _wake_all(self) -> None:
        """Stopping, or switching modes (lock held): every worker looks again."""
        self._idle.clear()
        for cond in self._conds:
            cond.notify()

    def _worker(self, index: int, cond: threading.Condition) -> None:
        queue = self._queue
        policy = self._policy
        idle = self._idle
        instance = self._instances[index][1]
        gate = self._gate
        retired = self._retired
        while True:
            if self._replacements is not None and self._replacements[index] is not instance:
                instance = self._take_over(index, instance)
            with cond:
                while not queue or self._inline:
                    if self._stopping or index in retired:
                        return
                    if self._replacements is not None and self._replacements[index] is not instance:
                        break  # take over first, then look again
                    if gate is not None:  # no work after all: out of the rate limiter's order
                        gate.unstage(index)
                    idle.append(cond)
                    cond.wait()
                    if cond in idle:  # woken by a wake-all, or never popped: not idle any more
                        idle.remove(cond)
                if not queue or self._inline:
                    continue
                if retired and index in retired:  # an instance_group update removed its instance
                    return
                if policy.batching and policy.max_queue_delay_ns > 0:
                    self._wait_for_batch(cond)
                    if not queue:  # stop() failed the queue, or another worker took it meanwhile
                        continue
                expired = self._take_expired()
                if expired:
                    self._reject(expired, on_loop=False)
                    if not queue:
                        continue
                if gate is not None and not gate.turn(
                    index, self._lock, lambda: bool(queue) and not self._stopping
                ):
                    continue  # no work was left once its turn came
                batch, total = form_batch(queue, policy, self._clock)
                if self._ordered is not None:
                    self._ordered.reserve(batch)
                self._executing += len(batch)
                if queue:  # more than one batch waits: another worker takes the rest
                    self._wake_one()
            out: list[tuple[list[InferRequest], list[InferResponse]]] = []
            watched = self._execute_timeout_ns > 0
            if watched:
                with self._lock:
                    self._running[index] = (self._clock(), batch)
            try:
                self._execute(instance, batch, total, inline=False, out=out, worker=index)
            finally:
                if gate is not None:  # before the answers go; with more queued, it stays in the order
                    gate.release(index, again=bool(queue))
                with self._lock:
                    self._executing -= len(batch)
                    if watched:
                        self._running[index] = None
                        self._abandoned.discard(index)
                    if self._inline and queue and not self._drain_scheduled:
                        self._drain_scheduled = True
                        self._loop.call_soon_threadsafe(self._drain)
                # answers cross back after the count dropped: a caller that sees its answer sees it
                self._send_back(out)
                # an idle worker holds nothing: the last batch's tensors may be views over a client's
                # shared memory, which cannot be unregistered while they live
                del batch, out

    def _send_back(self, out: list[tuple[list[InferRequest], list[InferResponse]]]) -> None:
        for answered, responses in out:
            self._loop.call_soon_threadsafe(_deliver, answered, responses)

    def _drain(self) -> None:
        """Inline mode, on the loop: execute what is queued, one batch per loop iteration."""
        self._drain_scheduled = False
        batch: list[InferRequest] | None = None
        pq = self._policy_queue
        with self._lock:
            if not self._inline or self._stopping:
                self._wake_all()
                return
            expired = self._take_expired() if pq is not None else None
            if (
                not self._executing and self._queue
            ):  # else a worker finishing its last threaded batch reschedules us
                batch, total = form_batch(self._queue, self._policy, self._clock)
                if self._ordered is not None:
                    self._ordered.reserve(batch)
                self._executing += len(batch)
        if expired:
            self._reject(expired, on_loop=True)
        if batch is None:
            return
        try:
            self._execute(self._instances[self._first][1], batch, total, inline=True)
        except InlineOverrun:  # the loop guard interrupted it (inline.py)
            self._overran(batch, total)
        finally:
            with self._lock:
                self._executing -= len(batch)
                again = bool(self._queue)
        if again and not self._drain_scheduled:
            self._drain_scheduled = True
            self._loop.call_soon(self._drain)

    def _observe(self, instance: BackendInstance, ns: int, blocked: bool, inline: bool) -> None:
        """Track execute time (inline: the loop thread's CPU; threaded: wall); switch modes (inline.py)."""
        if not self._inline_capable:
            return
        if instance.uses_bls:
            self._inline_capable = False
            self._set_inline(False)
            return
        switch = self._inline_mode.observe(ns, blocked, inline, self._inline)
        if switch is not None:
            self._set_inline(switch)

    def _overran(self, batch: list[InferRequest], total: int) -> None:
        """An inline execute ran away and was interrupted: its batch fails, the pool leaves the loop."""
        error = UnavailableError(
            f"model '{self._model_name}' version {self._model_version}: the execute ran longer than "
            f"{OVERRUN_S:g} s on the event loop (inline mode, where only executes measured short run) and "
            "was interrupted; the model's executes run in threads from now on"
        )
        log.error("%s", error.message)
        self._stats.record_failed_execution(total, int(OVERRUN_S * 1e9))
        self._inline_capable = False
        self._set_inline(False)
        self._fail_all(batch, error, inline=True)

    def _set_inline(self, inline: bool) -> None:
        log.debug(
            "model '%s' version %s: %s (average inline execute %.0f us of CPU)",
            self._model_name,
            self._model_version,
            "executing inline" if inline else "executing in threads",
            self._inline_mode.ewma_ns / 1000,
        )
        with self._lock:
            self._inline = inline
            self._inline_mode.reset()
            self._wake_all()
        (LOOP_GUARD.watch if inline else LOOP_GUARD.unwatch)(self._loop, self)

    def _wait_for_batch(self, cond: threading.Condition) -> None:
        """Hold the oldest request up to max_queue_delay while the batch is short (lock held): until
        a batch is complete (``queue.next_batch``: a preferred size met, the largest passed, a
        request with other inputs behind it), or
        the batch reaches ``hold_for`` (else ``max_batch_size``) where no size is preferred."""
        policy = self._policy
        target = policy.hold_for or policy.max_batch_size
        deadline = self._queue[0].t_queue_ns + policy.max_queue_delay_ns
        while True:
            left = deadline - self._clock()
            if policy.preferred_batch_size or policy.optional_inputs:
                ready = next_batch(self._queue, policy, False)[1]
            else:
                ready = sum(r.batch_size for r in self._queue) >= target
            if ready or left <= 0 or self._stopping:
                return
            self._holding.append(cond)
            try:
                cond.wait(left / 1e9)
            finally:
                self._holding.remove(cond)

    def _execute(
        self,
        instance: BackendInstance,
        batch: list[InferRequest],
        total: int,
        inline: bool,
        out: list[tuple[list[InferRequest], list[InferResponse]]] | None = None,
        worker: int = -1,
    ) -> None:
        """Run one batch. Answers go to ``_deliver`` now (inline) or to ``out`` for the worker."""
        for r in batch:
            s = r.stream
            if s is not None and s.cancelled:  # the client went away while it waited: skip it
                batch, total = self._drop_cancelled(batch, inline, out)
                if not batch:
                    return
                break
        clock = self._clock
        t0 = clock()
        auto = self._auto
        counted = not inline and worker >= 0 and auto is not None and not auto.done  # AutoMode's sample
        if inline:  # the loop thread's context switches (its CPU from the clock below)
            r0 = resource.getrusage(resource.RUSAGE_THREAD)
        if inline or counted:
            c0 = time.thread_time_ns()
        if counted:
            self._busy_since[worker] = t0
        queue_ns = [t0 - r.t_queue_ns for r in batch]
        try:
            responses = instance.execute(batch)
        except InferdError as e:
            if worker in self._abandoned:
                log_late(self._model_name, self._model_version, f"failed: {e.message}", self._clock() - t0)
                return
            self._stats.record_failed_execution(total, clock() - t0)
            self._fail_all(batch, e, inline, out)
            return
        except Exception as e:  # a backend bug: answer, log, keep serving
            if worker in self._abandoned:
                log_late(
                    self._model_name,
                    self._model_version,
                    f"failed: {type(e).__name__}: {e}",
                    self._clock() - t0,
                )
                return
            log.exception("execute failed for model '%s'", self._model_name)
            self._stats.record_failed_execution(total, clock() - t0)
            self._fail_all(batch, InternalError(f"{type(e).__name__}: {e}"), inline, out)
            return
        finally:
            if counted:
                self._busy_since[worker] = 0
        t3 = clock()
        if worker in self._abandoned:  # the watchdog answered its batch: what it returned is dropped
            log_late(self._model_name, self._model_version, "returned", self._clock() - t0)
            return
        if inline:
            if t3 - t0 <= SMALL_NS:
                # a wait shorter than a thread hand-off is not worth leaving the loop for: an execute
                # this short cannot have blocked for longer (no second system call; its wall time
                # stands in for its CPU)
                self._observe(instance, t3 - t0, False, True)
            else:
                # the CPU from the thread's CPU clock, not getrusage: a thread's rusage times are
                # split from scheduler ticks and can jump by a whole tick (4 ms at HZ=250) across a
                # 100 us execute (measured under load), and three such in a row sent a pool of
                # 50 us executes back to threads
                cpu = time.thread_time_ns() - c0
                r1 = resource.getrusage(resource.RUSAGE_THREAD)
                blocked = r1.ru_nvcsw != r0.ru_nvcsw and t3 - t0 - cpu > SMALL_NS
                self._observe(instance, cpu, blocked, True)
        else:
            self._observe(instance, t3 - t0, False, False)  # threaded: wall time
            if counted and auto is not None:
                self._last_span[worker] = (t0, t3)
                auto.observe(
                    t3 - t0,
                    time.thread_time_ns() - c0,
                    overlap(self._busy_since, self._last_span, worker, t0, t3),
                )
        timings = instance.last_timings
        in_ns, infer_ns, out_ns = timings if timings is not None else (0, t3 - t0, 0)
        # requests the backend itself reported failed (a C backend's ReportStatistics) count as failures
        failed: tuple[int, ...] = getattr(instance, "last_failed", ())
        request_ns = []
        for i, r in enumerate(batch):
            if failed and i in failed:
                self._stats.record_request(False, t3 - r.t_start_ns)
            else:
                request_ns.append(t3 - r.t_start_ns)
            if r.trace is not None:
                r.trace.computed(t0, t3, timings)
        self._stats.record_execution(total, len(request_ns), queue_ns, in_ns, infer_ns, out_ns, request_ns)
        if responses is None:
            return  # the backend answers through the request streams (decoupled models)
        self._hand_back(batch, responses, inline, out)

    # -- queue policy and the execute watchdog -------------------------------------------------------
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
            rejected = self._take_expired()
        self._reject(rejected, on_loop=True)

    def _take_expired(self) -> list[InferRequest]:
        """The queued requests past their deadline, taken off the queue (lock held). Also checked
        as a batch forms, as the reference does: an idle instance must not outrun the timer."""
        pq = self._policy_queue
        return pq.expire(self._clock()) if pq is not None and pq.has_deadlines else []

    def _reject(self, rejected: list[InferRequest], on_loop: bool) -> None:
        if not rejected:
            return
        now = self._clock()
        for r in rejected:
            self._stats.record_request(False, now - r.t_start_ns, "REJECTED")
        responses = [self._error_response(r, UnavailableError(TIMEOUT_EXPIRED)) for r in rejected]
        if on_loop:
            _deliver(rejected, responses)
        else:
            self._loop.call_soon_threadsafe(_deliver, rejected, responses)

    @property
    def execute_timeout_ns(self) -> int:
        return self._execute_timeout_ns

    def check_overdue(self, now_ns: int) -> None:
        """The watchdog's look: fail the batches executing longer than the timeout, stop what can be."""
        limit = self._execute_timeout_ns
        with self._lock:
            overdue = [
                (i, run)
                for i, run in enumerate(self._running)
                if run is not None and i not in self._abandoned and now_ns - run[0] > limit
            ]
            self._abandoned.update(i for i, _ in overdue)
            stuck = [] if len(self._abandoned - self._retired) < self._live else list(self._queue)
            if stuck:
                self._queue.clear()
        for index, (t0, batch) in overdue:
            if self._gate is not None:  # its resources go back: a hung execute must not hold other models
                self._gate.release(index)
            name, instance = self._instances[index]
            abortable = isinstance(instance, Abortable)
            what = (
                "its process is killed and restarts"
                if abortable
                else "the instance stays busy until it returns"
            )
            error = UnavailableError(
                f"model '{self._model_name}' version {self._model_version}: the execute did not finish within "
                f"{limit / 1e9:g} s (execute_timeout_secs); {what}"
            )
            log.error("%s (instance %s)", error.message, name)
            self._stats.record_failed_execution(sum(r.batch_size for r in batch), now_ns - t0)
            self._fail_all(batch, error, inline=False)
            if isinstance(instance, Abortable):
                instance.abort(error.message)
        if stuck:
            self._fail_all(
                stuck,
                all_stuck(self._model_name, self._model_version, self._execute_timeout_ns),
                inline=False,
            )

    def _hand_back(
        self,
        batch: list[InferRequest],
        responses: list[InferResponse],
        inline: bool,
        out: list[tuple[list[InferRequest], list[InferResponse]]] | None,
    ) -> None:
        if inline:
            _deliver(batch, responses)
        elif out is not None:
            out.append((batch, responses))
        else:
            self._loop.call_soon_threadsafe(_deliver, batch, responses)

    def _fail_all(
        self,
        batch: list[InferRequest],
        error: InferdError,
        inline: bool,
        out: list[tuple[list[InferRequest], list[InferResponse]]] | None = None,
    ) -> None:
        now = self._clock()
        for r in batch:
            self._stats.record_request(False, now - r.t_start_ns)
        self._hand_back(batch, [self._error_response(r, error) for r in batch], inline, out)

    def _drop_cancelled(
        self,
        batch: list[InferRequest],
        inline: bool,
        out: list[tuple[list[InferRequest], list[InferResponse]]] | None = None,
    ) -> tuple[list[InferRequest], int]:
        """Answer the cancelled requests of ``batch`` CANCELLED; the others and their batch size."""
        keep: list[InferRequest] = []
        gone: list[InferRequest] = []
        for r in batch:
            s = r.stream
            (gone if s is not None and s.cancelled else keep).append(r)
        now = self._clock()
        for r in gone:
            self._stats.record_request(False, now - r.t_start_ns, "CANCELED")
        responses = [self._error_response(r, RequestCancelledError("Request was cancelled")) for r in gone]
        self._hand_back(gone, responses, inline, out)
        return keep, sum(r.batch_size for r in keep)

    def _fail(self, request: InferRequest, error: InferdError) -> None:
        if request.stream is not None:
            request.stream.deliver(self._error_response(request, error), True)

    def _error_response(self, request: InferRequest, error: InferdError) -> InferResponse:
        return InferResponse(self._model_name, self._model_version, request.id, error=error)


LOOP_GUARD.marks.add(InstancePool._drain.__code__)  # its frame on the loop's stack: an inline execute


def _deliver(batch: list[InferRequest], responses: list[InferResponse]) -> None:
    """On the loop: hand each request its final response."""
    for r, resp in zip(batch, responses, strict=False):
        s = r.stream
        if s is not None:
            s.deliver(resp, True)
