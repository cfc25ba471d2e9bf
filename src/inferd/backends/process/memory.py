"""Memory limits of process instances: ``memory_limit_bytes``, a worker restarted past it.

A model that leaks in a worker process grows it without bound, and the kernel's OOM killer may then
pick the server. With a limit (the model's ``memory_limit_bytes`` parameter, or the server-wide
``--backend-config=python,memory-limit-bytes=N``), each of its workers' resident memory (RSS) is
read after every execute and every ``CHECK_S`` by one thread for the whole server; a worker past
its limit is killed as the execute watchdog kills one (``ProcessInstance.abort``): the requests it
held fail with UNAVAILABLE saying why, the event is logged and counted, and its next request starts
a new worker. RSS rather than an address-space limit (``RLIMIT_AS``): numpy, BLAS and PyTorch
reserve far more address space than they use, and an allocation refused inside an extension may
crash rather than raise. A thread instance shares the server's memory and cannot be limited alone.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Protocol

from inferd.backends.base import LoadContext
from inferd.errors import InvalidArgumentError

log = logging.getLogger("inferd.process")

#: how often the watch thread reads every limited worker's RSS
CHECK_S = 0.1
try:
    _PAGE = os.sysconf("SC_PAGE_SIZE")
except (ValueError, OSError, AttributeError):
    _PAGE = 4096
_MIB = 1 << 20


def rss_bytes(pid: int) -> int:
    """Resident memory of process ``pid`` (0 where ``/proc`` cannot tell)."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return 0


def memory_limit(ctx: LoadContext) -> int:
    """The model's ``memory_limit_bytes`` parameter, else the server's ``--backend-config=python,
    memory-limit-bytes=N``: bytes, 0 for none."""
    param = ctx.config.parameters.get("memory_limit_bytes")
    text = param.string_value if param is not None else ctx.backend_config.get("memory-limit-bytes", "0")
    try:
        value = int(text.strip() or "0")
    except ValueError:
        value = -1
    if value < 0:
        raise InvalidArgumentError(
            f"memory_limit_bytes of model '{ctx.model_name}' must be a number of bytes (0: no limit), "
            f"got '{text}'"
        )
    return value


def over_limit(used: int, limit: int, name: str = "memory_limit_bytes", starting: bool = False) -> str:
    """Why a worker using ``used`` bytes is killed (the clients' error and the log say it); ``name``:
    the setting that set the limit; ``starting``: it had not answered yet (a load, not a request)."""
    if starting:
        return f"it used {used / _MIB:.1f} MiB of memory while it started, more than its {name} of {limit / _MIB:.1f} MiB"
    return (
        f"it used {used / _MIB:.1f} MiB of memory, more than its {name} of {limit / _MIB:.1f} "
        "MiB; it restarts on its next request"
    )


class Limited(Protocol):
    """What the watch asks of a process instance."""

    def check_memory(self) -> None: ...


class MemoryWatch:
    """One daemon thread for the server: reads the RSS of every limited worker every ``CHECK_S``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._instances: set[Limited] = set()
        self._thread: threading.Thread | None = None

    def add(self, instance: Limited) -> None:
        with self._lock:
            self._instances.add(instance)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="inferd-memory-watch", daemon=True)
                self._thread.start()

    def discard(self, instance: Limited) -> None:
        with self._lock:
            self._instances.discard(instance)

    def _run(self) -> None:
        while True:
            time.sleep(CHECK_S)
            with self._lock:
                instances = list(self._instances)
            for instance in instances:
                try:
                    instance.check_memory()
                except Exception:  # a bug here must not end the watch for the others
                    log.exception("checking the memory of a worker process failed")


#: the server's one watch
WATCH = MemoryWatch()
