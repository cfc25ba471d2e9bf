"""An InstancePool's instances and their worker threads: one worker per instance, woken one at a time.

Each instance has a worker thread and an index, its place in the per-worker lists (here, and the
watchdog's and auto mode's beside them); indices are never reused. An ``instance_group`` update
(engine/instance_update.py) appends workers for the instances it adds and retires those it removes:
a retired worker takes nothing new, finishes the batch it runs, and its thread ends; then its
instance unloads (the pool's ``remove_instances`` returns once that is done, as the reference's load
answers after the removed instances finalized). The other workers go on serving throughout.

``execution_mode: auto`` (scheduling/execution_mode.py) swaps each thread instance for a process
instance when its worker is idle: ``replacements`` holds the new ones by index until taken over.

Idle workers wait last-in, first-out, lowest instance first: the instance still in the CPU's caches
(and the one a backend may make widest) takes the next request (BENCHMARKS.md, DenseNet at c1).
Every worker waits on its own condition over the pool's one lock, so that the pool picks whom to wake.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from inferd.backends.base import BackendInstance

log = logging.getLogger("inferd.scheduling")


class Workers:
    """The instances, a worker thread and condition each, and who waits (the pool's lock guards it)."""

    __slots__ = (
        "conds",
        "first",
        "holding",
        "idle",
        "instances",
        "live",
        "lock",
        "rank",
        "replacements",
        "retired",
        "threads",
    )

    def __init__(self, lock: threading.Lock, instances: list[tuple[str, BackendInstance]]) -> None:
        self.lock = lock
        self.instances = list(instances)
        self.threads: list[threading.Thread] = []
        self.conds: list[threading.Condition] = []
        #: each worker's condition -> its instance's index (the lowest idle one is woken first)
        self.rank: dict[threading.Condition, int] = {}
        self.idle: list[threading.Condition] = []  # a stack: the last worker to go idle is woken first
        self.holding: list[threading.Condition] = []  # workers holding a batch open for more requests
        #: workers retired by an instance_group update, the others' count, the lowest of them
        self.retired: set[int] = set()
        self.live = len(instances)
        self.first = 0
        #: instances that take over from ``instances`` (by index) once their worker is idle
        self.replacements: list[BackendInstance] | None = None

    def start(self, name: str, target: Callable[[int, threading.Condition], None]) -> threading.Thread:
        """A worker (not started yet) for the instance just appended to ``instances`` (lock held)."""
        index = len(self.threads)
        cond = threading.Condition(self.lock)
        self.conds.append(cond)
        self.rank[cond] = index
        thread = threading.Thread(target=target, args=(index, cond), name=f"inferd-{name}", daemon=True)
        self.threads.append(thread)
        return thread

    def wake_one(self) -> None:
        """A request came (lock held): tell a worker holding a batch open, else the first idle one.

        The first: the lowest instance, so that one request at a time always meets the same one,
        which a backend may make the widest (ONNX Runtime gives its first instance every core).
        """
        if self.holding:
            self.holding[-1].notify()
        elif self.idle:
            idle = self.idle
            cond = min(idle, key=self.rank.__getitem__) if len(idle) > 1 else idle[0]
            idle.remove(cond)
            cond.notify()

    def wake_all(self) -> None:
        """Stopping, or switching modes (lock held): every worker looks again."""
        self.idle.clear()
        for cond in self.conds:
            cond.notify()

    def retire(self, indices: list[int], queued: bool) -> None:
        """Retire the workers at ``indices`` (lock held); ``queued``: requests wait (others are woken
        for those one of them may have been woken for)."""
        for i in indices:
            self.retired.add(i)
            cond = self.conds[i]
            if cond in self.idle:  # (one holding a batch open runs that batch, then goes)
                self.idle.remove(cond)
            cond.notify()
        self.live -= len(indices)
        self.first = min((i for i in range(len(self.instances)) if i not in self.retired), default=0)
        if queued:
            for _ in indices:
                self.wake_one()

    def join_retired(self, indices: list[int], timeout_s: float) -> None:
        """Wait for the retired workers' threads (up to ``timeout_s``), then unload their instances."""
        for i in indices:
            self.threads[i].join(timeout=max(timeout_s, 0.001))
        for i in indices:
            with self.lock:
                name, inst = self.instances[i]
                spare = self.replacements[i] if self.replacements is not None else inst
            for one in (inst, spare) if spare is not inst else (inst,):
                _unload(name, one)

    def take_over(self, index: int, old: BackendInstance) -> BackendInstance:
        """This worker is idle: its instance becomes the process instance; the thread one finalizes."""
        assert self.replacements is not None
        new = self.replacements[index]
        with self.lock:
            self.instances[index] = (self.instances[index][0], new)
        _unload(self.instances[index][0], old)
        return new

    def join(self, threads: list[threading.Thread] | None = None) -> None:
        """Wait for the workers' threads (up to 5 s each) once the pool stopped."""
        for t in self.threads if threads is None else threads:
            t.join(timeout=5)

    def unload_all(self) -> None:
        """The pool stopped: unload every instance (and the process instances of
        ``execution_mode: auto`` no worker took over yet)."""
        with self.lock:
            live = [pair for i, pair in enumerate(self.instances) if i not in self.retired]
            current = [inst for _, inst in self.instances]
            spare = [
                inst
                for i, inst in enumerate(self.replacements or ())
                if i not in self.retired and all(inst is not c for c in current)
            ]
        for name, inst in [*live, *(("(not taken over)", i) for i in spare)]:
            _unload(name, inst)


def _unload(name: str, instance: BackendInstance) -> None:
    try:
        instance.unload()
    except Exception:
        log.exception("unloading instance %s failed", name)
