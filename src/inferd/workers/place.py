"""What one process of ``inferd serve --workers N`` knows of its place: read from its environment.

The supervisor (``supervisor.py``) starts every process with the same command line and these
variables; a process without them is a server on its own.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
from dataclasses import dataclass
from pathlib import Path

#: the folder (mode 0700, the supervisor's) holding every process's peer socket
ENV_DIR = "INFERD_WORKERS_DIR"
#: this process's number, 0 to N-1
ENV_INDEX = "INFERD_WORKER_INDEX"
#: the pipe's end on which the process tells the supervisor that it serves
ENV_READY_FD = "INFERD_WORKER_READY_FD"
#: the supervisor's pid: a process whose parent is another one was orphaned before it could tell
ENV_SUPERVISOR = "INFERD_WORKERS_SUPERVISOR"
_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True, slots=True)
class WorkerPlace:
    """One process of N: its number and the folder of the peer sockets."""

    directory: Path
    index: int
    ready_fd: int | None = None

    @classmethod
    def from_env(cls) -> WorkerPlace | None:
        """This process's place, or None when it is not one of ``--workers``."""
        directory = os.environ.get(ENV_DIR)
        if not directory:
            return None
        fd = os.environ.get(ENV_READY_FD)
        return cls(Path(directory), int(os.environ.get(ENV_INDEX, "0")), int(fd) if fd else None)

    def socket_path(self, index: int | None = None) -> Path:
        """The peer socket of process ``index`` (this one's by default)."""
        return self.directory / f"peer-{self.index if index is None else index}.sock"

    def peer_paths(self) -> list[Path]:
        """The other processes' peer sockets, as they are now (a process restarting has none)."""
        own = self.socket_path()
        return [p for p in sorted(self.directory.glob("peer-*.sock")) if p != own]

    def announce_ready(self) -> None:
        """Tell the supervisor that this process serves (once; later calls do nothing)."""
        fd = self.ready_fd
        if fd is None:
            return
        with contextlib.suppress(OSError):
            os.write(fd, b"1")
            os.close(fd)
        object.__setattr__(self, "ready_fd", None)


def die_with_supervisor() -> None:
    """SIGTERM (drain, then exit) when the supervisor dies, also by SIGKILL; exit now when it
    already has."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux: the process outlives a killed supervisor
    expected = os.environ.get(ENV_SUPERVISOR)
    if expected and os.getppid() != int(expected):
        os._exit(1)
