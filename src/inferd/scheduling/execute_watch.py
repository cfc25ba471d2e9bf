"""An InstancePool's executes as the execute watchdog sees them (scheduling/watchdog.py).

Each worker's execute in flight (its start and batch) while the model has an ``execute_timeout_secs``;
the watchdog's thread calls ``check_overdue`` a few times per timeout: a batch executing longer is
answered UNAVAILABLE, its worker is abandoned (what its execute returns later is dropped, and it
takes nothing new until it returns), its rate limiter slot goes back, and an instance that can be
stopped (a worker process) is. Once every live worker is abandoned, what waits in the queue fails too
and new requests are refused (``all_stuck``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from inferd.core.request import InferRequest
from inferd.core.stats import ModelStats
from inferd.errors import InferdError, UnavailableError
from inferd.scheduling.queue import RequestQueue
from inferd.scheduling.rate_limiter import Gate
from inferd.scheduling.watchdog import Abortable, all_stuck
from inferd.scheduling.workers import Workers

log = logging.getLogger("inferd.scheduling")

#: how the watch answers a batch: BatchRunner.fail_all
FailAll = Callable[[list[InferRequest], InferdError, bool], None]


class ExecuteWatch:
    """Executes in flight and the workers given up on (the pool's lock guards both)."""

    __slots__ = ("_gate", "_model", "_stats", "_version", "_workers", "abandoned", "running", "timeout_ns")

    def __init__(
        self,
        model: str,
        version: str,
        timeout_ns: int,
        workers: Workers,
        gate: Gate | None,
        stats: ModelStats,
    ) -> None:
        self._model = model
        self._version = version
        self.timeout_ns = timeout_ns
        self._workers = workers
        self._gate = gate
        self._stats = stats
        #: each worker's execute in flight (start, batch), by worker index
        self.running: list[tuple[int, list[InferRequest]] | None] = [None] * len(workers.threads)
        self.abandoned: set[int] = set()

    def added(self) -> None:
        """A worker was added (lock held)."""
        self.running.append(None)

    def all_stuck(self) -> bool:
        """Every live worker is abandoned (lock held): nothing can serve a request."""
        return len(self.abandoned - self._workers.retired) >= self._workers.live

    def stuck_error(self) -> UnavailableError:
        return all_stuck(self._model, self._version, self.timeout_ns)

    def check_overdue(self, now_ns: int, queue: RequestQueue, fail_all: FailAll) -> None:
        """Fail the batches executing longer than the timeout, stop what can be."""
        limit = self.timeout_ns
        workers = self._workers
        with workers.lock:
            overdue = [
                (i, run)
                for i, run in enumerate(self.running)
                if run is not None and i not in self.abandoned and now_ns - run[0] > limit
            ]
            self.abandoned.update(i for i, _ in overdue)
            stuck = list(queue) if self.all_stuck() else []
            if stuck:
                queue.clear()
        for index, (t0, batch) in overdue:
            if self._gate is not None:  # its resources go back: a hung execute must not hold other models
                self._gate.release(index)
            name, instance = workers.instances[index]
            abortable = isinstance(instance, Abortable)
            what = (
                "its process is killed and restarts"
                if abortable
                else "the instance stays busy until it returns"
            )
            error = UnavailableError(
                f"model '{self._model}' version {self._version}: the execute did not finish within "
                f"{limit / 1e9:g} s (execute_timeout_secs); {what}"
            )
            log.error("%s (instance %s)", error.message, name)
            self._stats.record_failed_execution(sum(r.batch_size for r in batch), now_ns - t0)
            fail_all(batch, error, False)
            if isinstance(instance, Abortable):
                instance.abort(error.message)
        if stuck:
            fail_all(stuck, self.stuck_error(), False)
