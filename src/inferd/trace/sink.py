"""Where finished traces go: Triton's trace files, written in batches.

A ``TraceFile`` is the reference's: the main file is one JSON array that every setting naming it
appends to (``[`` on the first write, ``,`` between writes); an indexed file ``<file>.<n>`` is a whole
array of its own (``log_frequency`` traces, or the traces of a ``count`` that ran out). The main file
here stays a valid array after every write (its ``]`` is rewritten), so it can be read while the
server runs; the reference adds ``]`` at exit. A file that cannot be written is logged once and the
requests go on.

The ``Writer`` buffers the records of finished traces and writes them every ``FLUSH_S``, on the loop.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

log = logging.getLogger("inferd.trace")

#: how long finished traces wait to be written together
FLUSH_S = 0.05


class TraceFile:
    """One trace file name: its main array and its indexed files."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.index = 0
        self._fh: Any = None
        self._failed = False
        self._closed = False  # at exit: what comes later must not reopen (and so truncate) the file

    def append(self, text: str) -> None:
        """Add records to the main array."""
        if not self.name or self._failed or self._closed:
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


class Writer:
    """Buffers what the settings write and writes it in one go every ``FLUSH_S`` (a timer on the
    event loop; with no loop running, at once). Everything happens on the loop's thread: a writer
    thread competing for the interpreter lock made the instance pool's inline executes look blocked
    (measured: add_sub left inline mode, CPU per request +60%)."""

    def __init__(self) -> None:
        self._appends: dict[TraceFile, list[str]] = {}
        self._indexed: list[tuple[TraceFile, str]] = []
        self._files: set[TraceFile] = set()
        self._timer: asyncio.TimerHandle | None = None

    def append(self, file: TraceFile, text: str) -> None:
        """Records for ``file``'s main array."""
        self._files.add(file)
        texts = self._appends.get(file)
        if texts is None:
            self._appends[file] = [text]
        else:
            texts.append(text)
        if self._timer is None:
            self._arm()

    def write_index(self, file: TraceFile, text: str) -> None:
        """A whole array for ``file``'s next indexed file."""
        self._indexed.append((file, text))
        if self._timer is None:
            self._arm()

    def _arm(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no event loop here: write now
            self.flush()
            return
        self._timer = loop.call_later(FLUSH_S, self.flush)

    def flush(self) -> bool:
        """Write what is buffered now."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        appends, self._appends = self._appends, {}
        indexed, self._indexed = self._indexed, []
        for file, texts in appends.items():
            file.append(",".join(texts))
        for file, text in indexed:
            file.write_index(text)
        return True

    def close(self) -> None:
        """Write what is left and close the files."""
        self.flush()
        for f in self._files:
            f.close()
