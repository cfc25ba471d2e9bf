"""Where finished traces go: Triton's trace files, written in batches.

A ``TraceFile`` is the reference's: the main file is one JSON array that every setting naming it
appends to (``[`` on the first write, ``,`` between writes); an indexed file ``<file>.<n>`` is a whole
array of its own (``log_frequency`` traces, or the traces of a ``count`` that ran out). The main file
here stays a valid array after every write (its ``]`` is rewritten), so it can be read while the
server runs; the reference adds ``]`` at exit. A file that cannot be written is logged once and the
requests go on.

The ``Writer`` writes what waits in each file's ``pending`` list every ``FLUSH_S``, on the loop:
records as text, or traces as they ended (``record.RowTrace``), whose records are made there
(``record.pending_parts``, compiled: each run of one key formatted in one go by rows.py).
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

from inferd.trace.record import Trace, pending_parts

log = logging.getLogger("inferd.trace")

#: how long finished traces wait to be written together: numpy's share of a flush is fixed (some 600k
#: instructions), so longer runs cost less a trace (callgrind, compiled, an add_sub HTTP trace:
#: 13.8k instructions in flushes of 200, 11.5k of 800); 0.1 s is ~400 traces at c8 full speed, and
#: holds the loop ~1.5 ms a flush
FLUSH_S = 0.1
#: the most buffers one writev takes (POSIX guarantees 16; Linux takes 1024)
_IOV_MAX = os.sysconf("SC_IOV_MAX") if "SC_IOV_MAX" in getattr(os, "sysconf_names", {}) else 16


class TraceFile:
    """One trace file name: its main array and its indexed files."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.index = 0
        self._fh: Any = None
        self._failed = False
        self._closed = False  # at exit: what comes later must not reopen (and so truncate) the file
        #: what waits for the writer's flush, in the order written: records as text, and traces
        #: (``record.RowTrace`` puts itself here as it ends)
        self.pending: list[str | Trace] = []
        #: the writer that flushes ``pending`` (``Writer.add``; None: a file no writer flushes)
        self.writer: Writer | None = None

    def append(self, parts: list[bytes | memoryview]) -> None:
        """Add records to the main array: ``parts``, each comma-separated records (UTF-8 JSON),
        written as they are (no copy joins them)."""
        if not self.name or self._failed or self._closed or not parts:
            return
        try:
            if self._fh is None:
                self._fh = open(self.name, "w+b", buffering=0)  # noqa: SIM115  (kept open: one array, appended to)
                _write_all(self._fh.fileno(), [b"[", *_commas(parts), b"]"])
            else:
                self._fh.seek(-1, 2)
                _write_all(self._fh.fileno(), [b",", *_commas(parts), b"]"])
        except OSError as e:
            self._fail(e)

    def write_index(self, text: str) -> None:
        """A whole array to ``<name>.<index>``."""
        if not self.name:
            return
        path = f"{self.name}.{self.index}"
        self.index += 1
        try:
            with open(path, "wb") as f:
                f.write(b"[" + text.encode() + b"]")
        except OSError as e:
            log.error("failed creating trace file: %s", e)

    def _fail(self, e: OSError) -> None:
        self._failed = True
        log.error("failed creating trace file: %s (no more traces are written to %s)", e, self.name)

    def close(self) -> None:
        self._closed = True
        if self._fh is not None:
            try:
                self._fh.close()
            except OSError as e:
                log.error("failed closing trace file %s: %s", self.name, e)
            self._fh = None


def _commas(parts: list[bytes | memoryview]) -> list[bytes | memoryview]:
    out: list[bytes | memoryview] = [b","] * (2 * len(parts) - 1)
    out[0::2] = parts
    return out


def _write_all(fd: int, parts: list[bytes | memoryview]) -> None:
    """All of ``parts`` at the file's position, in as few system calls as the kernel allows."""
    if not hasattr(os, "writev"):  # (Windows)
        for part in parts:
            view = memoryview(part)
            while view:
                view = view[os.write(fd, view) :]
        return
    while parts:
        n = os.writev(fd, parts[:_IOV_MAX])
        while parts and n >= len(parts[0]):
            n -= len(parts[0])
            parts = parts[1:]
        if n:
            parts[0] = parts[0][n:]


class Writer:
    """Writes what the settings and traces leave in their files' ``pending`` lists in one go every
    ``FLUSH_S`` (a timer on the event loop; with no loop running, at once). Everything happens on the
    loop's thread: a writer thread competing for the interpreter lock made the instance pool's inline
    executes look blocked (measured: add_sub left inline mode, CPU per request +60%)."""

    def __init__(self) -> None:
        self._indexed: list[tuple[TraceFile, str]] = []
        self._files: set[TraceFile] = set()
        #: the flush armed (None: nothing waits)
        self.timer: asyncio.TimerHandle | None = None

    def add(self, file: TraceFile) -> None:
        """A file this writer flushes (and closes)."""
        file.writer = self
        self._files.add(file)

    def append(self, file: TraceFile, text: str) -> None:
        """Records for ``file``'s main array."""
        self.append_trace(file, text)

    def append_trace(self, file: TraceFile, trace: Trace | str) -> None:
        """A common trace for ``file``'s main array (its records are made at the flush)."""
        if file.writer is not self:
            self.add(file)
        file.pending.append(trace)
        if self.timer is None:
            self.arm()

    def write_index(self, file: TraceFile, text: str) -> None:
        """A whole array for ``file``'s next indexed file."""
        self._indexed.append((file, text))
        if self.timer is None:
            self.arm()

    def arm(self) -> None:
        """Flush in ``FLUSH_S`` (now, with no event loop running here)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no event loop here: write now
            self.flush()
            return
        self.timer = loop.call_later(FLUSH_S, self.flush)

    def flush(self) -> bool:
        """Write what is pending now."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        indexed, self._indexed = self._indexed, []
        for file in self._files:
            items = file.pending
            if items:
                file.pending = []
                file.append(pending_parts(items))
        for file, text in indexed:
            file.write_index(text)
        return True

    def close(self) -> None:
        """Write what is left and close the files."""
        self.flush()
        for f in self._files:
            f.close()
