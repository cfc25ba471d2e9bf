"""The execute watchdog: a request whose execute never ends fails; the server does not wait with it.

A model's ``execute_timeout_secs`` parameter (``parameters { key: "execute_timeout_secs" value:
{ string_value: "30" } }``), else the server's ``--model-execute-timeout-secs`` (0: none, as the
reference, which has no such limit), bounds one execute. One thread per server (its Runtime's ``Watchdog``) looks at
every watched pool a few times per timeout (``InstancePool.check_overdue``): an execute running
longer fails its batch UNAVAILABLE, naming the model and the limit. Then:

- a process instance (``execution_mode: process``) is killed, and its next execute starts a new
  worker process (``initialize`` again), as after a crash;
- a thread cannot be killed: the instance stays busy until its execute returns (whatever it
  returns then is dropped, and logged), and the other instances go on serving. When every instance
  of the model is stuck, queued and new requests fail at once instead of waiting behind them.

A watched pool never executes on the event loop (inline mode): an execute that hangs there would
hang the server, watchdog included.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from typing import Protocol, runtime_checkable

from inferd.errors import UnavailableError

log = logging.getLogger("inferd.scheduling")

#: the model config parameter that sets a model's own limit
EXECUTE_TIMEOUT_PARAM = "execute_timeout_secs"

#: the watchdog looks this many times per timeout (a late answer comes at most 1/4 past it)
CHECKS_PER_TIMEOUT = 4
MIN_INTERVAL_S = 0.01
MAX_INTERVAL_S = 1.0


@runtime_checkable
class Abortable(Protocol):
    """An instance whose execute can be stopped from outside (a process instance)."""

    def abort(self, reason: str) -> None:
        """Stop the execute in flight (its batch was already answered with ``reason``)."""
        ...


class Watched(Protocol):
    """A pool with an execute timeout (``InstancePool``)."""

    @property
    def execute_timeout_ns(self) -> int: ...

    def check_overdue(self, now_ns: int) -> None: ...


class Watchdog:
    """One daemon thread that checks every watched pool of one server (its Runtime's: two servers
    in one process have one each), started by the first pool watched, ended by ``close``."""

    def __init__(self) -> None:
        self._pools: weakref.WeakSet[Watched] = weakref.WeakSet()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False

    def watch(self, pool: Watched) -> None:
        with self._cond:
            self._pools.add(pool)
            if self._thread is None:
                self._closed = False
                self._thread = threading.Thread(target=self._run, name="inferd-watchdog", daemon=True)
                self._thread.start()
            self._cond.notify()

    def forget(self, pool: Watched) -> None:
        with self._cond:
            self._pools.discard(pool)

    def close(self) -> None:
        """The server stopped: the thread ends (a pool watched later starts a new one)."""
        with self._cond:
            self._closed = True
            self._thread = None
            self._cond.notify()

    def running(self) -> bool:
        """Whether its thread is started (what a test looks at)."""
        with self._cond:
            return self._thread is not None

    def _interval_s(self) -> float | None:
        """How long to wait before the next look (lock held); None: nothing to watch."""
        if not self._pools:
            return None
        shortest = min(p.execute_timeout_ns for p in self._pools) / 1e9
        return min(MAX_INTERVAL_S, max(MIN_INTERVAL_S, shortest / CHECKS_PER_TIMEOUT))

    def _run(self) -> None:
        me = threading.current_thread()
        while True:
            with self._cond:
                self._cond.wait(self._interval_s())
                if self._closed or self._thread is not me:  # closed (and maybe started again)
                    return
                pools = list(self._pools)
            now = time.monotonic_ns()
            for pool in pools:
                try:
                    pool.check_overdue(now)
                except Exception:  # a bug here must not end the watchdog for every other model
                    log.exception("the execute watchdog failed to check a model")


def all_stuck(model: str, version: str, timeout_ns: int) -> UnavailableError:
    """What a request meets when every instance of the model is stuck in an execute."""
    return UnavailableError(
        f"model '{model}' version {version}: every instance is stuck in an execute "
        f"longer than {timeout_ns / 1e9:g} s (execute_timeout_secs)"
    )


def log_late(model: str, version: str, how: str, after_ns: int) -> None:
    """An execute the watchdog gave up on ended: its answers were already sent."""
    log.warning(
        "model '%s' version %s: an execute given up on %s after %.1f s; dropped",
        model,
        version,
        how,
        after_ns / 1e9,
    )
