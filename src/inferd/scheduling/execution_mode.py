"""``execution_mode: auto``: threads, or worker processes when the model's executes hold the GIL.

A Python model with several instances gains nothing from them while its executes are Python work:
the instances are threads under one interpreter lock. Worker processes (``process.py``) give each
instance a core, at the cost of a round trip to another process per execute (about 0.1 ms here) and
the copies of large tensors. So ``auto`` starts a model in threads and measures its executes while
it serves, each one's wall time and the CPU time of the thread that ran it:

- a short execute (median under ``LONG_EXECUTE_NS``) is not worth a round trip: threads (and inline
  runs on the loop, which the pool decides on its own);
- when instances execute at once and their executes hold the interpreter lock, they take turns:
  ``k`` executes that overlap fully each take ``k`` times their CPU time, so an execute's wait,
  ``wall - cpu``, is ``(k - 1) / k`` of the time others executed beside it (a half for two
  instances); when the executes let go of the lock (numpy, a native library) they run side by side
  and the wait is near 0. The pool measures, per execute, wall time, the CPU time of its thread and
  that overlap; the sum of ``wall - cpu`` over the sum of overlaps is the figure. Measured on the
  2-core machine: 0.45 to 0.54 for two instances of pure-Python work on an idle machine, 0.22 to 0.26
  with the test suite running beside it (the event loop takes its turns too, and requests arrive
  late), and 0.07 for two instances of numpy matrix products (300x300), hence ``HELD_SHARE``.
  Executes that mostly wait (I/O, sleep) use little CPU: threads serve them well.

Once ``SAMPLES_NEEDED`` executes overlapped others for at least half their time, it decides, once:
a median CPU time of at least ``LONG_EXECUTE_NS`` and waits of at least ``HELD_SHARE`` of the
overlaps move the model's instances to processes; anything else keeps threads. A model that never has two executes at once
is never moved (processes would not make it faster). The decision and its figures are logged; the
pool swaps each thread instance for a process instance when its worker is idle.
"""

from __future__ import annotations

import logging
import statistics
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from inferd.backends.base import BackendInstance

if TYPE_CHECKING:
    from inferd.scheduling.workers import Workers

log = logging.getLogger("inferd.scheduling")

SAMPLES_NEEDED = 20
LONG_EXECUTE_NS = 500_000
#: (wall - cpu) / overlap: about a half when two executes take turns on the lock, near 0 side by side
HELD_SHARE = 0.15
#: executes of a model too short to consider: past this many, the model is looked at no more
SHORT_EXECUTES_ENOUGH = 200


class AutoMode:
    """Decides, once, whether a model's thread instances move to worker processes."""

    def __init__(self, model: str, decide: Callable[[bool], None]) -> None:
        """``decide(to_processes)`` is called once, from the thread of the execute that settled it."""
        self._model = model
        self._decide = decide
        self._lock = threading.Lock()
        self._short = 0
        self._samples: list[tuple[int, int, int]] = []  # (wall, cpu, overlap) ns of overlapped executes
        self.done = False

    def observe(self, wall_ns: int, cpu_ns: int, overlap_ns: int) -> None:
        """A threaded execute took ``wall_ns`` (``cpu_ns`` of its thread's CPU), while other instances
        executed for ``overlap_ns`` of it."""
        with self._lock:
            if self.done:
                return
            if wall_ns < LONG_EXECUTE_NS:
                self._short += 1
                if self._short >= SHORT_EXECUTES_ENOUGH and len(self._samples) < SAMPLES_NEEDED // 2:
                    self.done = True
            elif overlap_ns * 2 >= wall_ns:
                self._samples.append((wall_ns, cpu_ns, overlap_ns))
                if len(self._samples) >= SAMPLES_NEEDED:
                    self.done = True
            if not self.done:
                return
            samples = self._samples
        cpu = statistics.median(c for _, c, _ in samples) if samples else 0
        # summed, not a median of ratios: when two executes take turns, one may get the lock first and
        # wait not at all while the other waits its whole time; together they waited half the overlap
        share = sum(w - c for w, c, _ in samples) / max(1, sum(o for _, _, o in samples))
        to_processes = len(samples) >= SAMPLES_NEEDED and cpu >= LONG_EXECUTE_NS and share >= HELD_SHARE
        log.info(
            "model '%s' (execution_mode auto): %s; executes that overlapped others took %.2f ms of CPU "
            "(median of %d) and waited %.0f%% of the overlap (a held interpreter lock: about (k-1)/k for k at once); %d "
            "executes were shorter than %.1f ms",
            self._model,
            "moving its instances to worker processes"
            if to_processes
            else "keeping its instances in threads",
            cpu / 1e6,
            len(samples),
            share * 100,
            self._short,
            LONG_EXECUTE_NS / 1e6,
        )
        self._decide(to_processes)


def overlap(busy_since: list[int], last_span: list[tuple[int, int]], worker: int, t0: int, t3: int) -> int:
    """How long other workers executed during [t0, t3] (ns; more than one counted once each): a
    worker still busy since ``busy_since[j]``, else its last span."""
    total = 0
    for j, since in enumerate(busy_since):
        if j == worker:
            continue
        a, b = (since, t3) if since else last_span[j]
        total += max(0, min(b, t3) - max(a, t0))
    return total


class AutoPromotion:
    """A pool's ``execution_mode: auto``: measures its threaded executes (``AutoMode``, once two
    instances serve) and, once decided, makes the process instances that take over from the
    threads (``Workers.replacements``, each swapped in when its worker is idle)."""

    def __init__(
        self,
        model_name: str,
        promote: Callable[[], dict[int, BackendInstance]],
        workers: Workers,
        leave_threads: Callable[[], bool],
    ) -> None:
        """``promote``: makes the process instances, by worker index; ``leave_threads`` (lock held):
        False when the pool stops, else the pool leaves inline mode for good and returns True."""
        self._model_name = model_name
        self._promote = promote
        self._workers = workers
        self._leave_threads = leave_threads
        self.mode: AutoMode | None = None
        #: when each worker's execute began (0: idle) and its last one's span
        self.busy_since: list[int] = [0] * len(workers.threads)
        self.last_span: list[tuple[int, int]] = [(0, 0)] * len(workers.threads)
        self.grew()

    def added(self) -> None:
        """A worker was added (lock held)."""
        self.busy_since.append(0)
        self.last_span.append((0, 0))

    def grew(self) -> None:
        """The live instances changed (lock held): with two or more, the measures start."""
        if self.mode is None and self._workers.live >= 2:
            self.mode = AutoMode(self._model_name, self._decided)

    @property
    def sampling(self) -> bool:
        """Whether threaded executes are still measured."""
        mode = self.mode
        return mode is not None and not mode.done

    def begin(self, worker: int, t0: int) -> None:
        self.busy_since[worker] = t0

    def end(self, worker: int) -> None:
        self.busy_since[worker] = 0

    def observe(self, worker: int, t0: int, t3: int, cpu_ns: int) -> None:
        """A threaded execute of ``worker`` ran from ``t0`` to ``t3``, ``cpu_ns`` of its thread's CPU."""
        mode = self.mode
        assert mode is not None
        self.last_span[worker] = (t0, t3)
        mode.observe(t3 - t0, cpu_ns, overlap(self.busy_since, self.last_span, worker, t0, t3))

    def _decided(self, to_processes: bool) -> None:
        if to_processes:  # the processes start off the execute's thread (initialize may take long)
            threading.Thread(target=self._promote_now, daemon=True).start()

    def _promote_now(self) -> None:
        workers = self._workers
        try:
            made = self._promote()
        except Exception:
            log.exception(
                "model '%s': its worker processes did not start; it stays in threads", self._model_name
            )
            return
        with workers.lock:
            if self._leave_threads():
                # instances added or retired while the processes started keep what they have
                workers.replacements = [
                    made.pop(i) if i in made and i not in workers.retired else inst
                    for i, (_, inst) in enumerate(workers.instances)
                ]
                workers.wake_all()
        for inst in made.values():  # the pool stopped, or their workers went: nobody takes them over
            inst.unload()
