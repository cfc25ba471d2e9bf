"""The executes a process instance sent its worker, or is about to (``Executes``), and the requests
they hold.

An execute is registered (its requests get keys the worker answers by), sent in an order the worker
keeps (it runs what it reads, one after the other), and ended by its end message, or by the worker's
death. The pool may reserve an instance's next batch while one runs (scheduling/ahead.py): the
instance sends it at once, and the pool's execute() of the same requests adopts it rather than
sending it again. When the worker dies, the first execute sent that is still pending is the one it
ran (or was about to); the others it never began: they end ``NotRun``, their requests are not
failed, and execute() sends them to the restarted worker, so a death fails only what it ran.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from inferd.backends.process.ipc import Channel, ChannelClosed, ShmNames, pack_request
from inferd.core.request import InferRequest
from inferd.core.response import InferResponse
from inferd.errors import InferdError, UnavailableError


class NotRun(UnavailableError):
    """The worker died before it began this execute (a batch sent ahead behind the one it ran): the
    pool's execute sends it again to the restarted worker."""


#: sends of one batch to workers that died before beginning it (each death ran another batch)
NOT_RUN_TRIES = 3


@dataclass(slots=True)
class Pending:
    """An execute sent to the worker (or about to be): its requests, and its end when it comes."""

    exec_id: int
    requests: list[InferRequest]
    keys: list[int]
    #: the channel it goes to (a worker that died before it was sent never gets it; None: none ran)
    chan: Channel | None
    packed: list[Any] = field(default_factory=list)
    #: the order it went to the worker, which runs what it reads in that order (0: not sent)
    seq: int = 0
    done: threading.Event = field(default_factory=threading.Event)
    responses: list[InferResponse] | None = None
    timings: tuple[int, int, int] | None = None
    error: InferdError | None = None
    #: the positions of the requests the backend reported failed (a C backend's ReportStatistics)
    failed: tuple[int, ...] = ()


class Executes:
    """One process instance's executes and open requests; guarded by the instance's lock (``lock``),
    held by the caller where a method says so."""

    __slots__ = ("_exec_ids", "_keys", "_send_lock", "_seqs", "ahead", "current", "lock", "open", "pendings")

    def __init__(self, lock: threading.Lock) -> None:
        self.lock = lock
        self._keys = itertools.count(1)
        self._exec_ids = itertools.count(1)
        #: the order executes go to the worker (``Pending.seq``), taken with the send
        self._seqs = itertools.count(1)
        self._send_lock = threading.Lock()
        #: requests sent to the worker whose final response has not come back: key -> request
        self.open: dict[int, InferRequest] = {}
        #: the executes sent (or reserved) whose end has not come: exec id -> pending
        self.pendings: dict[int, Pending] = {}
        #: the execute an execute() call waits for now
        self.current: Pending | None = None
        #: the pool's next batches, sent ahead while the current one runs, each until the pool's
        #: execute() of it adopts it or the pool forgets it
        self.ahead: list[Pending] = []

    def key(self) -> int:
        """A fresh id (requests' keys and readiness asks share the sequence)."""
        return next(self._keys)

    def register(
        self, requests: list[InferRequest], chan: Channel | None, cancel: Callable[[Channel, int, str], None]
    ) -> Pending:
        """A new execute's keys and pending (lock held); a request's cancellation goes to ``chan``."""
        keys = []
        for r in requests:
            key = next(self._keys)
            self.open[key] = r
            keys.append(key)
            if r.stream is not None and chan is not None:
                r.stream.on_cancel = partial(cancel, chan, key)
        pending = Pending(next(self._exec_ids), requests, keys, chan)
        self.pendings[pending.exec_id] = pending
        return pending

    def adopt(self, requests: list[InferRequest]) -> Pending | None:
        """The execute sent ahead for these very requests, now the pool's to wait for."""
        with self.lock:
            for ahead in self.ahead:
                if len(ahead.requests) == len(requests) and all(
                    a is b for a, b in zip(ahead.requests, requests, strict=True)
                ):
                    self.ahead.remove(ahead)
                    return ahead
        return None

    def forget(self, pending: Pending) -> None:
        """Nobody adopts it (the runner dropped its cancelled requests): its end is dropped."""
        with self.lock:
            if pending in self.ahead:
                self.ahead.remove(pending)

    def send(self, pending: Pending, shm: ShmNames) -> None:
        """To its worker, numbered in the order the worker reads it (a dead channel: the reader sees
        the death and ends it)."""
        if pending.chan is None:
            return
        pending.packed = [
            pack_request(k, r, shm) for k, r in zip(pending.keys, pending.requests, strict=True)
        ]
        with self._send_lock:
            pending.seq = next(self._seqs)
            try:
                pending.chan.send(("exec", pending.exec_id, pending.packed))
            except ChannelClosed:
                pass

    def pop(self, exec_id: int, answered: bool) -> Pending | None:
        """An execute's end came (lock held): its pending, if still waited for; ``answered``: its
        responses came back with it, so nothing more comes for its requests."""
        pending = self.pendings.pop(exec_id, None)
        if pending is not None and answered:
            for key in pending.keys:
                self.open.pop(key, None)
        return pending

    def after_death(self) -> tuple[Pending | None, list[Pending]]:
        """The worker died (lock held): the execute it ran, and those it never began, whose
        requests leave ``open`` (they are not failed: they run again)."""
        pendings = sorted(self.pendings.values(), key=lambda p: (p.seq == 0, p.seq))
        ran = pendings[0] if pendings and pendings[0].seq else None
        not_run = [p for p in pendings if p is not ran]
        for p in not_run:
            for key in p.keys:
                self.open.pop(key, None)
        return ran, not_run

    def unanswered(self) -> bool:
        """Requests wait for responses after their execute ended (decoupled models, response
        senders), not counting those of the batches sent ahead (their execute() reads their end)."""
        return self.current is None and len(self.open) > sum(len(p.keys) for p in self.ahead)

    def take_open(self) -> list[InferRequest]:
        """Every open request, now nobody's (lock held)."""
        requests, self.open = list(self.open.values()), {}
        return requests


def not_running(who: str) -> UnavailableError:
    return UnavailableError(f"the process of {who} is not running")
