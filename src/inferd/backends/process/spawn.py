"""Starting a worker process (``python -m inferd.backends.process.worker <fd>``) and reading its
first answers within a deadline and a memory limit.

Every worker is started by one long-lived thread (``_SPAWNER``): ``PR_SET_PDEATHSIG``, which kills a
worker when the server dies, is tied to the *thread* that forked it, not to the server process, so a
worker started by a thread that ends (a load, a restart, ``execution_mode: auto`` moving instances)
would be killed when it did.

What a worker does before its first answer (a Python model's import and ``initialize``, a native
backend reading its model file, an auto-complete) is the model's own code or parser at work on
files that may have come from a client: ``Starting`` holds it to the load's deadline and to the
memory limit while it runs, killing the worker past either.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from inferd.backends.process.ipc import Channel
from inferd.backends.process.memory import WATCH, over_limit, rss_bytes

#: starts every worker process: PR_SET_PDEATHSIG kills a child when the thread that forked it ends
_SPAWNER = ThreadPoolExecutor(1, thread_name_prefix="inferd-spawner")
WORKER_MODULE = "inferd.backends.process.worker"


def how_it_ended(code: int | None) -> str:
    """How a process ended, from its return code: ``signal 11 (SIGSEGV)``, ``exit status 3``."""
    if code is None:
        return "it stopped answering"
    if code < 0:
        try:
            return f"signal {-code} ({signal.Signals(-code).name})"
        except ValueError:
            return f"signal {-code}"
    return f"exit status {code}"


def _popen(cmd: list[str], fd: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(cmd, pass_fds=(fd,), stdin=subprocess.DEVNULL)


def start_worker() -> tuple[subprocess.Popen[bytes], Channel]:
    """A new worker process and the server's end of its channel (nothing sent yet)."""
    ours, theirs = socket.socketpair()
    cmd = [sys.executable, "-m", WORKER_MODULE, str(theirs.fileno())]
    try:
        proc = _SPAWNER.submit(_popen, cmd, theirs.fileno()).result()
    except BaseException:
        ours.close()
        raise
    finally:
        theirs.close()
    return proc, Channel(ours)


class Starting:
    """A worker until its first answer: ``recv`` reads within the deadline (monotonic seconds; None:
    none), and the memory watch kills the worker once its resident memory passes ``memory_limit``
    (bytes; 0: none), ``reason`` then saying why. A context manager: the watch ends with it."""

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        chan: Channel,
        deadline: float | None,
        memory_limit: int = 0,
        limit_name: str = "memory_limit_bytes",
    ) -> None:
        self.proc = proc
        self.chan = chan
        self.deadline = deadline
        self.memory_limit = memory_limit
        self.limit_name = limit_name
        #: why the watch killed the worker ("" while it did not)
        self.reason = ""

    def __enter__(self) -> Starting:
        if self.memory_limit:
            WATCH.add(self)
        return self

    def __exit__(self, *exc: object) -> None:
        WATCH.discard(self)
        self.chan.sock.settimeout(None)

    def recv(self) -> Any:
        """The worker's next message; TimeoutError once the deadline passed (also within a message)."""
        if self.deadline is not None:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            self.chan.sock.settimeout(left)
        return self.chan.recv()

    def check_memory(self) -> None:
        """The memory watch's look (memory.py): kill the worker past its limit."""
        used = rss_bytes(self.proc.pid)
        if used > self.memory_limit and not self.reason:
            self.reason = over_limit(used, self.memory_limit, self.limit_name, starting=True)
            self.proc.kill()
