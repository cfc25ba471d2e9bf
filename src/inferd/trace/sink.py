"""Where finished traces go: Triton's trace files, written by one thread off the event loop.

A ``TraceFile`` is the reference's: the main file is one JSON array that every setting naming it
appends to (``[`` on the first write, ``,`` between writes); an indexed file ``<file>.<n>`` is a whole
array of its own (``log_frequency`` traces, or the traces of a ``count`` that ran out). The main file
here stays a valid array after every write (its ``]`` is rewritten), so it can be read while the
server runs; the reference adds ``]`` at exit. A file that cannot be written is logged once and the
requests go on.

The ``Writer`` thread takes finished traces from the loop (a list append under a lock: no wake-up per
trace), serializes them and writes, in batches every ``FLUSH_S``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger("inferd.trace")

#: how long finished traces wait before the writer thread takes them (one wake-up per batch)
FLUSH_S = 0.05


class TraceFile:
    """One trace file name: its main array and its indexed files."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.index = 0
        self._fh: Any = None
        self._failed = False

    def append(self, text: str) -> None:
        """Add records to the main array (writer thread)."""
        if not self.name or self._failed:
            return
        try:
            if self._fh is None:
                self._fh = open(self.name, "w+b")  # noqa: SIM115  (kept open: one array, appended to)
                self._fh.write(b"[" + text.encode() + b"]")
            else:
                self._fh.seek(-1, 2)
                self._fh.write(b"," + text.encode() + b"]")
            self._fh.flush()
        except OSError as e:
            self._fail(e)

    def write_index(self, text: str) -> None:
        """A whole array to ``<name>.<index>`` (writer thread)."""
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
        if self._fh is not None:
            try:
                self._fh.close()
            except OSError as e:
                log.error("failed closing trace file %s: %s", self.name, e)
            self._fh = None


class Writer:
    """The writer thread: runs jobs handed over from any thread, a batch every ``FLUSH_S``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: list[Callable[[], None]] = []
        self._armed = False
        self._wake = threading.Event()
        self._hurry = threading.Event()  # flush() or close(): no pause
        self._idle = threading.Event()
        self._idle.set()
        self._closed = False
        self._files: set[TraceFile] = set()
        self._thread: threading.Thread | None = None

    def submit(self, job: Callable[[], None]) -> None:
        """Run ``job`` on the writer thread soon (started on first use)."""
        with self._lock:
            self._jobs.append(job)
            if self._armed:
                return
            self._armed = True
            self._idle.clear()
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="inferd-trace", daemon=True)
                self._thread.start()
        self._wake.set()

    # called on the writer thread, by the jobs
    def append(self, file: TraceFile, text: str) -> None:
        self._files.add(file)
        file.append(text)

    def write_index(self, file: TraceFile, text: str) -> None:
        file.write_index(text)

    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            if not self._closed:
                self._hurry.wait(FLUSH_S)  # a short pause lets a batch gather
            self._hurry.clear()
            self._drain()
            if self._closed:
                return

    def _drain(self) -> None:
        while True:
            with self._lock:
                jobs, self._jobs = self._jobs, []
                if not jobs:
                    self._armed = False
                    self._idle.set()
                    return
            for job in jobs:
                try:
                    job()
                except Exception:
                    log.exception("writing a trace failed")

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until every job handed over so far ran (False: not within ``timeout``)."""
        with self._lock:
            if not self._armed:
                return True
        self._hurry.set()
        self._wake.set()
        return self._idle.wait(timeout)

    def close(self, timeout: float = 5.0) -> None:
        """Run what is left, stop the thread, close the files."""
        self._closed = True
        self._hurry.set()
        self._wake.set()
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
        else:
            self._drain()
        for f in self._files:
            f.close()
