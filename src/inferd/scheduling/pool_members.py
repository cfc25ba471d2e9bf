"""The instances of an InstancePool changing while it serves: ``execution_mode: auto``'s move to
worker processes, and ``instance_group`` updates made in place (engine/instance_update.py).

Each instance has a worker thread and an index, its place in the pool's per-worker lists; indices
are never reused. An update appends workers for the instances it adds and retires those it removes:
a retired worker takes nothing new, finishes the batch it runs, and its thread ends; then its
instance unloads (``remove_instances`` returns once that is done, as the reference's load answers
after the removed instances finalized). The other workers go on serving throughout.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable

from inferd.backends.base import BackendInstance
from inferd.core.request import InferRequest
from inferd.scheduling.execution_mode import AutoMode
from inferd.scheduling.queue import RequestQueue
from inferd.scheduling.rate_limiter import Gate

log = logging.getLogger("inferd.scheduling")


class PoolMembers:
    """InstancePool's part that adds, retires and replaces instances (see the module docstring)."""

    # what it shares with InstancePool (instances.py), which sets them up
    _model_name: str
    _lock: threading.Lock
    _instances: list[tuple[str, BackendInstance]]
    _threads: list[threading.Thread]
    _conds: list[threading.Condition]
    _rank: dict[threading.Condition, int]
    _idle: list[threading.Condition]
    _busy_since: list[int]
    _last_span: list[tuple[int, int]]
    _running: list[tuple[int, list[InferRequest]] | None]
    _retired: set[int]
    _live: int
    _first: int
    _stopping: bool
    _inline: bool
    _inline_capable: bool
    _replacements: list[BackendInstance] | None
    _promote: Callable[[], dict[int, BackendInstance]] | None
    _auto: AutoMode | None
    _queue: RequestQueue
    _gate: Gate | None
    # and the methods of InstancePool it calls
    _worker: Callable[[int, threading.Condition], None]
    _wake_one: Callable[[], None]
    _wake_all: Callable[[], None]

    # -- instance_group updates ----------------------------------------------------------------------
    @property
    def promoted(self) -> bool:
        """Whether the instances moved (or are moving) to worker processes."""
        return self._replacements is not None

    def _start_worker(self, name: str) -> threading.Thread:
        """A worker for the instance just appended to ``_instances`` (lock held)."""
        index = len(self._threads)
        cond = threading.Condition(self._lock)
        self._conds.append(cond)
        self._rank[cond] = index
        self._busy_since.append(0)
        self._last_span.append((0, 0))
        self._running.append(None)
        thread = threading.Thread(target=self._worker, args=(index, cond), name=f"inferd-{name}", daemon=True)
        self._threads.append(thread)
        return thread

    def add_instances(
        self, instances: list[tuple[str, BackendInstance]], gate: Gate | None = None
    ) -> list[int]:
        """Serve on ``instances`` too; their worker indices. ``gate``: their rate limiter slots."""
        started = []
        with self._lock:
            if self._stopping:
                raise RuntimeError("the pool stopped")
            if self._gate is not None and gate is not None:  # slot i is worker i's
                self._gate.extend(gate)
            first = len(self._instances)
            for name, inst in instances:
                self._instances.append((name, inst))
                if self._replacements is not None:  # already moved: made as processes by the caller
                    self._replacements.append(inst)
                started.append(self._start_worker(name))
                self._inline_capable = self._inline_capable and inst.inline_ok
            self._live += len(instances)
            if not self._inline_capable:
                self._inline = False
            if self._promote is not None and self._auto is None and self._live >= 2:
                self._auto = AutoMode(self._model_name, self._decided)
        for t in started:
            t.start()
        return list(range(first, first + len(instances)))

    async def remove_instances(self, indices: list[int], timeout_s: float) -> None:
        """Retire the workers at ``indices``; returns once each finished its batch (up to
        ``timeout_s``) and its instance unloaded."""
        with self._lock:
            if self._gate is not None:  # one waiting for its turn stops waiting
                self._gate.retire(indices)
            for i in indices:
                self._retired.add(i)
                cond = self._conds[i]
                if cond in self._idle:  # (one holding a batch open runs that batch, then goes)
                    self._idle.remove(cond)
                cond.notify()
            self._live -= len(indices)
            self._first = min((i for i in range(len(self._instances)) if i not in self._retired), default=0)
            if self._queue:  # one of them may have been woken for a request it will not take now
                for _ in indices:
                    self._wake_one()
        await asyncio.to_thread(self._join_retired, indices, timeout_s)

    def _join_retired(self, indices: list[int], timeout_s: float) -> None:
        for i in indices:
            self._threads[i].join(timeout=max(timeout_s, 0.001))
        for i in indices:
            with self._lock:
                name, inst = self._instances[i]
                spare = self._replacements[i] if self._replacements is not None else inst
            for one in (inst, spare) if spare is not inst else (inst,):
                try:
                    one.unload()
                except Exception:
                    log.exception("unloading instance %s failed", name)
        if self._gate is not None:
            self._gate.leave(indices)

    # -- execution_mode auto ---------------------------------------------------------------------
    def _decided(self, to_processes: bool) -> None:
        if to_processes:  # the processes start off the execute's thread (initialize may take long)
            threading.Thread(target=self._promote_now, daemon=True).start()

    def _promote_now(self) -> None:
        assert self._promote is not None  # AutoMode exists only with it
        try:
            made = self._promote()
        except Exception:
            log.exception(
                "model '%s': its worker processes did not start; it stays in threads", self._model_name
            )
            return
        with self._lock:
            stopping = self._stopping
            if not stopping:
                self._inline_capable = False
                self._inline = False
                # instances added or retired while the processes started keep what they have
                self._replacements = [
                    made.pop(i) if i in made and i not in self._retired else inst
                    for i, (_, inst) in enumerate(self._instances)
                ]
                self._wake_all()
        for inst in made.values():  # the pool stopped, or their workers went: nobody takes them over
            inst.unload()

    def _take_over(self, index: int, old: BackendInstance) -> BackendInstance:
        """This worker is idle: its instance becomes the process instance; the thread one finalizes."""
        assert self._replacements is not None
        new = self._replacements[index]
        with self._lock:
            self._instances[index] = (self._instances[index][0], new)
        try:
            old.unload()
        except Exception:
            log.exception("unloading instance %s failed", self._instances[index][0])
        return new
