"""When an instance pool runs its executes on the event loop (inline mode), and when it goes back.

A backend whose instances hold the GIL anyway (Python models) gains nothing from a worker thread,
whose hand-off costs more than a small ``execute``. After ``INLINE_AFTER`` warm-up executions in
threads (none using BLS) averaging under ``INLINE_MAX_NS`` the pool tries batches on the event loop,
and goes back to threads when an execute blocks (a voluntary context switch longer than
``SMALL_NS``; one with the loop guard's turn on the interpreter lock in it only when another block
follows within ``BLOCKED_WINDOW`` inline executes) or ``SLOW_RUN`` executes in a row take more than
``INLINE_MAX_NS`` of CPU, trying again
``PROBE_EVERY_NS`` later (the measurements and why: ARCHITECTURE.md, "Inline mode for short executes").
After ``UNTIMED_AFTER`` inline executes in a row no longer than ``SMALL_NS`` the next ones are not
timed (``InlineMode.untimed``: no CPU clock and no getrusage around them, two system calls a batch).
An inline execute that runs away is interrupted (``LoopGuard``).
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from inferd.backends.base import BackendInstance

log = logging.getLogger("inferd.scheduling")

INLINE_AFTER = 4
INLINE_MAX_NS = 2_000_000
SLOW_RUN = 3
SMALL_NS = 50_000  # a wait this short costs less than a thread hand-off
#: a block while the loop guard took its turn on the interpreter lock (``LoopGuard.turns``) sends the
#: pool back to threads only when another follows within this many inline executes. Such a block is
#: most often the loop waiting for the guard, not the model: the guard (10 beats a second) takes the
#: lock from the busy loop after the switch interval, and the loop waits off-CPU until the guard is
#: scheduled and lets go (0.7 to 207 ms measured at a load of 5 to 9 on the 2 cores; every block
#: logged under perf_analyzer had a guard turn in it). Leaving on it sent a pool of 20 us executes to
#: threads for PROBE_EVERY_NS every few seconds: the ensemble's CPU per request was bimodal across
#: runs (109-121 us inline, 140-176 us with add_sub threaded). Not discounted outright: a model that
#: sleeps a beat (100 ms) or longer has a guard turn in every execute; it leaves at its second block
BLOCKED_WINDOW = 32
PROBE_EVERY_NS = 10_000_000_000
#: inline executes in a row no longer than SMALL_NS after which the next ones are not timed: their
#: wall time stands in for their CPU, as for any short one, and the system calls that time an
#: execute (the thread's CPU clock and getrusage, 3,100 instructions and two kernel entries a batch:
#: 2% of what inferd spends over the floor on an add_sub request) are left out. A long execute among
#: them counts its wall time as CPU, not as blocked, and has the next ones timed again: a model that
#: blocks again is caught one execute later, one that blocks once in a while no longer sends the pool
#: to threads for PROBE_EVERY_NS (a block is seen only after it held the loop, either way)
UNTIMED_AFTER = 16


class InlineMode:
    """The measurements behind the switch; ``observe`` says when to switch (the pool switches)."""

    __slots__ = (
        "_clock",
        "_execs",
        "_inline_execs",
        "_last_blocked",
        "_next_probe_ns",
        "_short_run",
        "_slow_run",
        "_thread_ewma_ns",
        "ewma_ns",
        "untimed",
    )

    def __init__(self, clock: Callable[[], int]) -> None:
        self._clock = clock
        self.ewma_ns = 0.0  # inline executes: the loop thread's CPU
        self._thread_ewma_ns = 0.0  # threaded executes: wall time
        self._slow_run = 0
        self._execs = 0  # threaded executions since the last switch
        self._inline_execs = 0
        self._next_probe_ns = 0
        self._short_run = 0  # inline executes in a row no longer than SMALL_NS
        self._last_blocked = -BLOCKED_WINDOW - 1  # the inline execute (its count) that last blocked
        #: the next inline execute is not timed (``UNTIMED_AFTER``)
        self.untimed = False

    def reset(self) -> None:
        """The pool switched: count afresh."""
        self._execs = 0
        self._inline_execs = 0
        self._slow_run = 0
        self._short_run = 0
        self._last_blocked = -BLOCKED_WINDOW - 1
        self.untimed = False

    def observe(
        self, ns: int, blocked: bool, inline: bool, inline_now: bool, guarded: bool = False
    ) -> bool | None:
        """One execute (inline: its CPU time, whether it blocked, whether the loop guard took a turn
        on the interpreter lock during it; threaded: its wall time). Returns True to go inline, False
        to go back to threads, None to stay as it is."""
        if inline:
            short = self._short_run + 1 if ns <= SMALL_NS else 0
            self._short_run = short
            self.untimed = short >= UNTIMED_AFTER
            self._inline_execs += 1
            self.ewma_ns = float(ns) if self._inline_execs == 1 else 0.8 * self.ewma_ns + 0.2 * ns
            # one long execute may be a GC pause: only a run of them counts
            self._slow_run = self._slow_run + 1 if ns > INLINE_MAX_NS else 0
            if blocked:  # while the guard took its turn: maybe a wait for it (BLOCKED_WINDOW)
                again = self._inline_execs - self._last_blocked <= BLOCKED_WINDOW
                self._last_blocked = self._inline_execs
                blocked = again or not guarded
            if blocked or self._slow_run >= SLOW_RUN:
                self._next_probe_ns = self._clock() + PROBE_EVERY_NS
                return False
            return None
        self._execs += 1
        # wall time in a thread over-states a GIL-bound execute, never under-states one: a model
        # whose threaded executes are long (a big graph, a sleep) is not worth a probe
        self._thread_ewma_ns = float(ns) if self._execs == 1 else 0.8 * self._thread_ewma_ns + 0.2 * ns
        if (
            self._execs >= INLINE_AFTER
            and not inline_now
            and self._thread_ewma_ns < INLINE_MAX_NS
            and self._clock() >= self._next_probe_ns
        ):
            return True
        return None


# -- the guard: an inline execute that runs away ---------------------------------------------------
#: an inline execute running this long on the event loop is interrupted (LoopGuard)
OVERRUN_S = 1.0
#: how often a guarded loop beats, and the guard looks
BEAT_S = 0.1


class InlineOverrun(BaseException):
    """Raised in the event loop's thread, inside an inline execute that ran past ``OVERRUN_S``.

    A BaseException: a model's ``except Exception`` does not swallow it (as KeyboardInterrupt)."""


class _Beat:
    """One event loop with pools inline: its heartbeat, and its thread (known once it beat)."""

    __slots__ = ("last", "loop", "pools", "struck", "tid")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.pools: set[int] = set()
        self.tid = 0
        self.last = time.monotonic()
        self.struck = 0.0

    def begin(self) -> None:
        """On the loop: its thread, and the first beat."""
        self.tid = threading.get_ident()
        self.beat()

    def beat(self) -> None:
        self.last = time.monotonic()
        if self.pools:
            self.loop.call_later(BEAT_S, self.beat)


class LoopGuard:
    """The one thread that keeps a runaway inline execute from holding an event loop.

    Inline mode runs an execute on the loop because it was measured short (``InlineMode``); nothing
    says the next one is. One that never ends (a model looping, recursing) holds the loop: no request
    of any model is read, and no health check answered. While a pool runs inline, its loop beats
    every ``BEAT_S`` (a timer; nothing is added to a request's path); when a beat is ``OVERRUN_S``
    late and the loop's thread is inside an inline execute (``InstancePool._drain``'s frame on its
    stack), ``InlineOverrun`` is raised in that thread (``PyThreadState_SetAsyncExc``), at the
    model's next Python instruction: its batch fails UNAVAILABLE and the pool runs in threads from
    then on. An execute blocked in native code (a sleep, one long numpy call) is interrupted only
    when it comes back to Python.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._beats: dict[asyncio.AbstractEventLoop, _Beat] = {}
        self._watcher: threading.Thread | None = None  # not _thread: mypyc writes __thread, a GCC keyword
        #: the code objects whose frame on the loop's stack means "in an inline execute"
        self.marks: set[object] = set()
        #: how many times the guard's thread took the interpreter lock (each beat it looks): an inline
        #: execute that blocked while this moved may have waited for the guard's turn on the lock,
        #: not for its model (BLOCKED_WINDOW)
        self.turns = 0

    def watch(self, loop: asyncio.AbstractEventLoop, pool: object) -> None:
        """``pool`` runs inline on ``loop`` from now on (any thread)."""
        with self._lock:
            beat = self._beats.get(loop)
            new = beat is None
            if beat is None:
                beat = self._beats[loop] = _Beat(loop)
            beat.pools.add(id(pool))
            if self._watcher is None:
                self._watcher = threading.Thread(target=self._run, name="inferd-loop-guard", daemon=True)
                self._watcher.start()
        if new:
            loop.call_soon_threadsafe(beat.begin)

    def unwatch(self, loop: asyncio.AbstractEventLoop, pool: object) -> None:
        """``pool`` no longer runs inline (its beat stops with the loop's last such pool)."""
        with self._lock:
            beat = self._beats.get(loop)
            if beat is not None:
                beat.pools.discard(id(pool))
                if not beat.pools:  # its pending beat finds nothing to beat for and stops
                    del self._beats[loop]

    def _run(self) -> None:
        while True:
            time.sleep(BEAT_S)
            self.turns += 1
            with self._lock:
                beats = [b for b in self._beats.values() if b.pools and b.tid]
            now = time.monotonic()
            for beat in beats:
                if now - beat.last > OVERRUN_S and now - beat.struck > OVERRUN_S and self._inline(beat.tid):
                    beat.struck = now
                    _raise_in(beat.tid)

    def _inline(self, tid: int) -> bool:
        frame = sys._current_frames().get(tid)
        while frame is not None:
            if frame.f_code in self.marks:
                return True
            frame = frame.f_back
        return False


def _raise_in(tid: int) -> None:
    """``InlineOverrun`` in thread ``tid`` at its next Python instruction."""
    import ctypes

    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(tid), ctypes.py_object(InlineOverrun))


#: the server's one guard
LOOP_GUARD = LoopGuard()


class InlineSwitch:
    """A pool's inline strategy: whether it may run executes on the loop (``capable``), whether it
    does now (``active``), and the switch between the two (``InlineMode`` measures, this switches).

    The pool's lock guards ``active`` and ``drain_scheduled``; ``observe`` runs after every execute.
    """

    __slots__ = (
        "_lock",
        "_loop",
        "_model",
        "_owner",
        "_wake_all",
        "active",
        "capable",
        "drain_scheduled",
        "mode",
    )

    def __init__(
        self,
        capable: bool,
        clock: Callable[[], int],
        loop: asyncio.AbstractEventLoop,
        lock: threading.Lock,
        wake_all: Callable[[], None],
        owner: object,
        model: str,
    ) -> None:
        """``capable``: every instance may run on the loop and nothing must block it (no queue delay,
        no execute timeout, no rate limiter); ``owner``: the pool the loop guard watches."""
        self.capable = capable
        self.active = False
        self.drain_scheduled = False
        self.mode = InlineMode(clock)
        self._loop = loop
        self._lock = lock
        self._wake_all = wake_all
        self._owner = owner
        self._model = model  # "model 'm' version 1", for the log

    def observe(
        self, instance: BackendInstance, ns: int, blocked: bool, inline: bool, guarded: bool = False
    ) -> None:
        """Track ``instance``'s execute time (inline: the loop thread's CPU; threaded: wall); switch
        modes. ``guarded``: the loop guard took a turn on the interpreter lock during the execute."""
        if not self.capable:
            return
        if instance.uses_bls:
            self.capable = False
            self.set(False)
            return
        switch = self.mode.observe(ns, blocked, inline, self.active, guarded)
        if switch is not None:
            self.set(switch)

    def give_up(self) -> None:
        """Never inline again (an execute overran the loop)."""
        self.capable = False
        self.set(False)

    def set(self, inline: bool) -> None:
        log.debug(
            "%s: %s (average inline execute %.0f us of CPU)",
            self._model,
            "executing inline" if inline else "executing in threads",
            self.mode.ewma_ns / 1000,
        )
        with self._lock:
            self.active = inline
            self.mode.reset()
            self._wake_all()
        (LOOP_GUARD.watch if inline else LOOP_GUARD.unwatch)(self._loop, self._owner)
