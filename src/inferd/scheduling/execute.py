"""One batch executed on one instance, and its requests answered: an InstancePool's execute step.

The pool forms the batch (scheduling/batching.py) and picks where it runs (a worker thread, or the
event loop in inline mode); ``BatchRunner.run`` skips the requests cancelled while they waited,
executes, records the execution's statistics, tells the execution strategies what it measured
(inline mode's switch, ``execution_mode: auto``) and hands the responses back: at once on the loop
(inline), else into the worker's ``out`` list, which crosses to the loop once per batch after the
pool's count dropped (``send_back``). A failure of the whole batch answers every request with it.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import time
from collections.abc import Callable

from inferd.backends.base import BackendInstance
from inferd.core.request import InferRequest
from inferd.core.response import InferResponse
from inferd.core.stats import ModelStats
from inferd.errors import InferdError, InternalError, RequestCancelledError, UnavailableError
from inferd.scheduling.execution_mode import AutoPromotion
from inferd.scheduling.inline import LOOP_GUARD, SMALL_NS, InlineSwitch
from inferd.scheduling.queue import TIMEOUT_EXPIRED
from inferd.scheduling.watchdog import log_late

log = logging.getLogger("inferd.scheduling")

#: a worker's answers, crossed to the loop after its batch: (requests, their responses) pairs
Out = list[tuple[list[InferRequest], list[InferResponse]]]


class BatchRunner:
    """Executes a batch and answers its requests (see the module docstring)."""

    __slots__ = (
        "_abandoned",
        "_auto",
        "_clock",
        "_loop",
        "_model_name",
        "_model_version",
        "_stats",
        "_timing",
    )

    def __init__(
        self,
        model_name: str,
        model_version: str,
        stats: ModelStats,
        loop: asyncio.AbstractEventLoop,
        clock: Callable[[], int],
        inline: InlineSwitch,
        auto: AutoPromotion | None,
        abandoned: set[int],
    ) -> None:
        """``abandoned``: the workers whose execute the watchdog answered (what they return is dropped)."""
        self._model_name = model_name
        self._model_version = model_version
        self._stats = stats
        self._loop = loop
        self._clock = clock
        self._timing = inline  # not _inline: mypyc names it __inline in C, a GCC keyword
        self._auto = auto
        self._abandoned = abandoned

    def run(
        self,
        instance: BackendInstance,
        batch: list[InferRequest],
        total: int,
        inline: bool,
        out: Out | None = None,
        worker: int = -1,
    ) -> None:
        """Run one batch. Answers go to ``deliver`` now (inline) or to ``out`` for the worker."""
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
        counted = not inline and worker >= 0 and auto is not None and auto.sampling  # AutoMode's sample
        # inline: after a run of short executes the next are not timed (inline.py, UNTIMED_AFTER)
        untimed = inline and self._timing.mode.untimed
        if inline and not untimed:  # the loop thread's context switches (its CPU from the clock below)
            r0 = resource.getrusage(resource.RUSAGE_THREAD)
            turns0 = LOOP_GUARD.turns
        if (inline and not untimed) or counted:
            c0 = time.thread_time_ns()
        if counted and auto is not None:
            auto.begin(worker, t0)
        queue_ns = []  # (a loop: a comprehension over t0 made it a cell, and was a function call more)
        for r in batch:
            queue_ns.append(t0 - r.t_queue_ns)
        abandoned = self._abandoned
        try:
            responses = instance.execute(batch)
        except InferdError as e:
            if worker in abandoned:
                log_late(self._model_name, self._model_version, f"failed: {e.message}", clock() - t0)
                return
            self._stats.record_failed_execution(total, clock() - t0)
            self.fail_all(batch, e, inline, out)
            return
        except Exception as e:  # a backend bug: answer, log, keep serving
            if worker in abandoned:
                log_late(
                    self._model_name, self._model_version, f"failed: {type(e).__name__}: {e}", clock() - t0
                )
                return
            log.exception("execute failed for model '%s'", self._model_name)
            self._stats.record_failed_execution(total, clock() - t0)
            self.fail_all(batch, InternalError(f"{type(e).__name__}: {e}"), inline, out)
            return
        finally:
            if counted and auto is not None:
                auto.end(worker)
        t3 = clock()
        if worker in abandoned:  # the watchdog answered its batch: what it returned is dropped
            log_late(self._model_name, self._model_version, "returned", clock() - t0)
            return
        if inline:
            if untimed or t3 - t0 <= SMALL_NS:
                # a wait shorter than a thread hand-off is not worth leaving the loop for: an execute
                # this short cannot have blocked for longer (no second system call; its wall time
                # stands in for its CPU); untimed, a long one's too (the next ones are timed again)
                self._timing.observe(instance, t3 - t0, False, True)
            else:
                # the CPU from the thread's CPU clock, not getrusage: a thread's rusage times are
                # split from scheduler ticks and can jump by a whole tick (4 ms at HZ=250) across a
                # 100 us execute (measured under load), and three such in a row sent a pool of
                # 50 us executes back to threads
                cpu = time.thread_time_ns() - c0
                r1 = resource.getrusage(resource.RUSAGE_THREAD)
                blocked = r1.ru_nvcsw != r0.ru_nvcsw and t3 - t0 - cpu > SMALL_NS
                # the loop guard's turn on the interpreter lock in it: maybe a wait for the guard,
                # not for the model (inline.py, BLOCKED_WINDOW)
                self._timing.observe(instance, cpu, blocked, True, LOOP_GUARD.turns != turns0)
        else:
            self._timing.observe(instance, t3 - t0, False, False)  # threaded: wall time
            if counted and auto is not None:
                auto.observe(worker, t0, t3, time.thread_time_ns() - c0)
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

    # -- answers -------------------------------------------------------------------------------------
    def send_back(self, out: Out) -> None:
        """A worker's answers to the loop: one hand-off per batch."""
        for answered, responses in out:
            self._loop.call_soon_threadsafe(deliver, answered, responses)

    def _hand_back(
        self, batch: list[InferRequest], responses: list[InferResponse], inline: bool, out: Out | None
    ) -> None:
        if inline:
            deliver(batch, responses)
        elif out is not None:
            out.append((batch, responses))
        else:
            self._loop.call_soon_threadsafe(deliver, batch, responses)

    def fail_all(
        self, batch: list[InferRequest], error: InferdError, inline: bool, out: Out | None = None
    ) -> None:
        """Answer every request of ``batch`` with ``error`` (each a failure in the statistics)."""
        now = self._clock()
        for r in batch:
            self._stats.record_request(False, now - r.t_start_ns)
        self._hand_back(batch, [self.error_response(r, error) for r in batch], inline, out)

    def _drop_cancelled(
        self, batch: list[InferRequest], inline: bool, out: Out | None
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
        responses = [self.error_response(r, RequestCancelledError("Request was cancelled")) for r in gone]
        self._hand_back(gone, responses, inline, out)
        return keep, sum(r.batch_size for r in keep)

    def reject(self, rejected: list[InferRequest], on_loop: bool) -> None:
        """Answer the requests whose queue timeout passed (REJECTED in the statistics)."""
        if not rejected:
            return
        now = self._clock()
        for r in rejected:
            self._stats.record_request(False, now - r.t_start_ns, "REJECTED")
        responses = [self.error_response(r, UnavailableError(TIMEOUT_EXPIRED)) for r in rejected]
        if on_loop:
            deliver(rejected, responses)
        else:
            self._loop.call_soon_threadsafe(deliver, rejected, responses)

    def fail(self, request: InferRequest, error: InferdError) -> None:
        """On the loop: answer one request never executed with ``error``."""
        if request.stream is not None:
            request.stream.deliver(self.error_response(request, error), True)

    def error_response(self, request: InferRequest, error: InferdError) -> InferResponse:
        return InferResponse(self._model_name, self._model_version, request.id, error=error)


def deliver(batch: list[InferRequest], responses: list[InferResponse]) -> None:
    """On the loop: hand each request its final response."""
    # (zip's default is strict=False: spelled out, it was a keyword parse of 1,000 instructions a batch)
    for r, resp in zip(batch, responses):  # noqa: B905
        s = r.stream
        if s is not None:
            s.deliver(resp, True)
