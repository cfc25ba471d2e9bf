"""Trace settings, global and per model, as Triton's TraceManager keeps them (``src/tracer.cc``).

A setting is never changed, only replaced: an update builds a new one from the fallback (the global
setting for a model, the start-up setting for the global one) and the fields specified so far; the
setting it replaces keeps the traces sampled under it and writes them out when its last one ends.
A model setting with no field specified is dropped (the model follows the global one); one with some
fields specified follows the global setting's other fields as they change. Sampling counts requests:
every ``rate``-th is traced while ``count`` (-1: no limit) lasts.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

from inferd.errors import InvalidArgumentError
from inferd.trace.config import LEVEL_OFF, MODE_TRITON, TENSORS, TIMESTAMPS, TraceConfig
from inferd.trace.sink import TraceFile, Writer

#: an unset field of an update (``None`` clears a field: back to the fallback's value)
UNSET: object = object()


@dataclass(slots=True)
class NewSetting:
    """An update: each field a new value, None to clear it, or UNSET to leave it."""

    level: object = UNSET  # int, None (clear) or UNSET
    rate: object = UNSET  # int, None (clear) or UNSET
    count: object = UNSET  # int, None (clear) or UNSET
    log_frequency: object = UNSET  # int, None (clear) or UNSET


class TraceSetting:
    """One immutable setting (but its remaining ``count``) with its sampling counters and the traces
    collected under it that are not written yet."""

    def __init__(
        self,
        level: int,
        rate: int,
        count: int,
        log_frequency: int,
        file: TraceFile,
        config: TraceConfig,
        specified: frozenset[str] = frozenset(),
    ) -> None:
        self.level = level
        self.rate = rate
        self.count = count
        self.log_frequency = log_frequency
        self.file = file
        self.mode = config.mode
        self.config = config
        self.specified = specified
        self.reason = ""
        if level == LEVEL_OFF:
            self.reason = "tracing is disabled"
        elif rate == 0:
            self.reason = "sample rate must be non-zero"
        elif self.mode == MODE_TRITON and not file.name:
            self.reason = "trace file name is not given"
        self.timestamps = bool(level & TIMESTAMPS)
        self.tensors = bool(level & TENSORS)
        self._lock = threading.Lock()
        self._sampled = 0  # requests counted toward the rate
        self._collected = 0
        self._in_stream = 0
        self._stream: list[str] = []
        #: traces sampled (the loop counts them) and written or dropped: kept by a setting that holds
        #: traces until they are written; a direct one (below) holds none and does not count them
        self._started = 0
        self._ended = 0
        self._retired = False
        #: the main file takes each trace as it ends (what would only go there, at the end, anyway)
        self._direct = count < 0 and log_frequency == 0
        #: and a common trace goes to it as it is, its records made at the flush (record.row_runs):
        #: its requests are sampled by ``rate`` alone, into a ``record.RowTrace``
        self.rows = self._direct and self.mode == MODE_TRITON and level == TIMESTAMPS and not self.reason

    @property
    def valid(self) -> bool:
        return not self.reason and self.count != 0

    def sample(self, force: bool = False) -> bool:
        """Whether this request is traced (``force``: a propagated OpenTelemetry context). Front ends
        sample on the event loop only: the counters take no lock."""
        hit = False
        if self.rate != 0:
            if not force and (self.reason or self.count == 0):
                return False
            self._sampled += 1
            hit = self._sampled % self.rate == 0
            if hit:
                if self.count > 0:
                    self.count -= 1
                elif self.count == 0:
                    hit = False
        if hit or force:
            self._started += 1
            return True
        return False

    def write(self, text: str, writer: Writer) -> None:
        """A finished trace's records: kept, or written to an indexed file when
        ``log_frequency`` traces were collected or ``count`` ran out, as the reference does."""
        if self._direct:
            writer.append(self.file, text)
            return
        with self._lock:
            self._collected += 1
            self._ended += 1
            self._in_stream += 1
            self._stream.append(text)
            flush = (self.count == 0 and self._collected == self._sampled) or (
                self.log_frequency != 0 and self._in_stream >= self.log_frequency
            )
            chunk: list[str] = []
            if flush:
                chunk, self._stream, self._in_stream = self._stream, [], 0
            retire = self._retired and self._started <= self._ended
        if chunk:
            writer.write_index(self.file, ",".join(chunk))
        if retire:
            self._flush(writer)

    def abandon(self) -> None:
        """A sampled trace that will never be written (its request was refused before it ran)."""
        with self._lock:
            self._ended += 1

    def retire(self, writer: Writer) -> None:
        """Replaced: what it still holds goes out once its last trace ends (now, if none is open)."""
        with self._lock:
            self._retired = True
            now = self._direct or self._started <= self._ended
        if now:
            self._flush(writer)

    def _flush(self, writer: Writer) -> None:
        """The reference's destructor: what is left goes to the main file (indexed with log_frequency)."""
        with self._lock:
            chunk, self._stream, self._in_stream = self._stream, [], 0
        if not chunk or self.mode != MODE_TRITON:
            return
        if self.log_frequency != 0:
            writer.write_index(self.file, ",".join(chunk))
        else:
            writer.append(self.file, ",".join(chunk))


def check_writable(path: str) -> str:
    """Why a trace file cannot be written there ("" when it can)."""
    if os.path.isdir(path):
        return "it is a directory"
    if os.path.exists(path):
        return "" if os.access(path, os.W_OK) else "permission denied"
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        return f"the directory '{parent}' does not exist"
    return "" if os.access(parent, os.W_OK | os.X_OK) else f"the directory '{parent}' is not writable"


class Settings:
    """The global setting, the model settings and the files they write (TraceManager's half that
    holds settings; ``Tracing`` adds sampling and writing)."""

    def __init__(self, config: TraceConfig, writer: Writer) -> None:
        self.config = config
        self.writer = writer
        self._files: dict[str, TraceFile] = {}
        file = self._file(config.file)
        args = (config.level, config.rate, config.count, config.log_frequency, file, config)
        self.default = TraceSetting(*args)
        self.global_setting = TraceSetting(*args)
        self.models: dict[str, TraceSetting] = {}
        self.fallback_models: set[str] = set()
        self._lock = threading.Lock()

    def _file(self, name: str) -> TraceFile:
        f = self._files.get(name)
        if f is None:
            f = self._files[name] = TraceFile(name)
            self.writer.add(f)
        return f

    def get(self, model: str = "") -> TraceSetting:
        if model:
            s = self.models.get(model)
            if s is not None:
                return s
        return self.global_setting

    def any_on(self) -> bool:
        return self.global_setting.level != LEVEL_OFF or any(
            s.level != LEVEL_OFF for s in self.models.values()
        )

    def update(self, model: str, new: NewSetting) -> None:
        """Apply an update (InvalidArgumentError: the reference's text; the settings stay as they were
        up to the failing step, as in the reference)."""
        with self._lock:
            self._update(model, new)
            if not model:  # models following the global setting follow its change
                for name in sorted(self.fallback_models):
                    self._update(name, NewSetting())

    def _update(self, model: str, new: NewSetting) -> None:
        current = self.models.get(model) if model else self.global_setting
        fallback = self.global_setting if model else self.default
        values = {
            "level": fallback.level,
            "rate": fallback.rate,
            "count": fallback.count,
            "log_frequency": fallback.log_frequency,
        }
        specified: set[str] = set()
        for key in values:
            given = getattr(new, key)
            if given is None:  # cleared
                continue
            if given is not UNSET:
                values[key] = given
                specified.add(key)
            elif current is not None and key in current.specified:
                values[key] = getattr(current, key)
                specified.add(key)
        file_specified = current is not None and "file" in current.specified
        file = current.file if file_specified and current is not None else fallback.file
        if model:
            if len(specified) == 4 and file_specified:
                self.fallback_models.discard(model)
            elif not specified and not file_specified:
                old = self.models.pop(model, None)
                self.fallback_models.discard(model)
                if old is not None:
                    old.retire(self.writer)
                return
            else:
                self.fallback_models.add(model)
        setting = TraceSetting(
            values["level"],
            values["rate"],
            values["count"],
            values["log_frequency"],
            file,
            self.config,
            frozenset(specified | ({"file"} if file_specified else set())),
        )
        if not setting.valid and setting.level != LEVEL_OFF:
            raise InvalidArgumentError(f"Attempting to set invalid trace setting :{setting.reason}")
        if setting.level != LEVEL_OFF and setting.mode == MODE_TRITON:
            why = check_writable(file.name)
            if why:  # beyond the reference, which fails every write later and says nothing
                raise InvalidArgumentError(
                    f"Attempting to set invalid trace setting :trace file '{file.name}' can not be written: {why}"
                )
        old_setting = current
        if model:
            self.models[model] = setting
        else:
            self.global_setting = setting
        if old_setting is not None:
            old_setting.retire(self.writer)

    def close(self) -> None:
        """Shutting down: every setting writes what it holds."""
        for s in (self.global_setting, *self.models.values()):
            s._flush(self.writer)
