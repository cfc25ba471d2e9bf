"""``Tracing``: the trace extension's state for one server (Triton's TraceManager).

Front ends ask ``on`` (one attribute, False while every setting is OFF: what tracing costs a request
then) and, when it is on, ``sample`` a request once its model is known. Finished traces are written
on the loop (sink.py batches the file writes): Triton's trace file, or OpenTelemetry spans over
OTLP/HTTP (``inferd[otel]``).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from typing import Any

from inferd.errors import InvalidArgumentError
from inferd.trace.config import (
    LEVEL_OFF,
    MODE_OPENTELEMETRY,
    MODE_TRITON,
    TENSORS,
    TIMESTAMPS,
    TraceConfig,
    parse_trace_config,
)
from inferd.trace.record import RowTrace, Trace
from inferd.trace.settings import UNSET, NewSetting, Settings, TraceSetting, check_writable
from inferd.trace.sink import Writer

log = logging.getLogger("inferd.trace")

#: a W3C traceparent: version 00, trace id, parent span id, flags (all-zero ids are invalid)
_TRACEPARENT = re.compile(r"^\s*([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")


def parse_traceparent(value: str | None) -> tuple[int, int, int] | None:
    """(trace id, span id, flags) of a valid ``traceparent`` header, else None."""
    if not value:
        return None
    m = _TRACEPARENT.match(value.lower())
    if m is None or m.group(1) == "ff":
        return None
    trace_id, span_id = int(m.group(2), 16), int(m.group(3), 16)
    if not trace_id or not span_id:
        return None
    return trace_id, span_id, int(m.group(4), 16)


class Tracing:
    """Trace settings, sampling and the writing of finished traces for one server."""

    def __init__(self, config: TraceConfig | None = None) -> None:
        self.config = config if config is not None else TraceConfig()
        self.writer = Writer()
        self.settings = Settings(self.config, self.writer)
        self.otel: Any = None
        if self.config.mode == MODE_OPENTELEMETRY:
            try:
                from inferd.trace.otel import OtelExport  # the opentelemetry SDK: inferd[otel]
            except ImportError as e:
                raise InvalidArgumentError(
                    f"--trace-config mode=opentelemetry needs the OpenTelemetry SDK (pip install 'inferd[otel]'): {e}"
                ) from e
            self.otel = OtelExport(self.config)
        #: whether any setting traces at all (the front ends' one check per request)
        self.on = self.settings.any_on()
        self._tensor_warned = False
        self._on_finish = self._finished  # (one bound method, not one per trace)
        #: ``--workers``: sends a settings update to the other serving processes (None: one process)
        self.propagate: Callable[..., None] | None = None

    @classmethod
    def from_flags(cls, flags: Sequence[str], file_suffix: str = "") -> Tracing:
        """From ``--trace-config`` flags (InvalidArgumentError: the reference's text, or a trace file
        that cannot be written while tracing is on); ``file_suffix`` ends the trace file's name (each
        ``--workers`` process writes its own file)."""
        config = parse_trace_config(flags)
        if config.file:
            config.file += file_suffix
        if config.level != LEVEL_OFF and config.mode == MODE_TRITON and config.file:
            why = check_writable(config.file)
            if why:
                raise InvalidArgumentError(
                    f"--trace-config: trace file '{config.file}' can not be written: {why}"
                )
        return cls(config)

    # -- sampling (the event loop) ---------------------------------------------------------------
    def sample(self, model_name: str, traceparent: str | None = None) -> Trace | None:
        """A trace for this request of ``model_name``, or None when it is not sampled."""
        settings = self.settings  # (Settings.get, inline: this runs for every request while on)
        setting = settings.models.get(model_name) or settings.global_setting
        if setting.rows:  # (TraceSetting.sample, inline: no count, no OpenTelemetry context)
            n = setting._sampled = setting._sampled + 1
            return None if n % setting.rate else RowTrace(setting)
        if setting.level == LEVEL_OFF:
            return None
        parent = None
        if setting.mode == MODE_OPENTELEMETRY:
            parent = parse_traceparent(traceparent)
        if not setting.sample(parent is not None):
            return None
        return Trace(setting, None, self._on_finish, parent)

    def _finished(self, trace: Trace) -> None:
        setting = trace.setting
        if not trace.attached:  # refused before it was queued: nothing to write
            setting.abandon()
        elif setting.rows and not trace.request_id and not trace.children:
            # the common case, kept short: the trace waits for the flush as it is (record.row_runs)
            self.writer.append_trace(setting.file, trace)
        elif setting.mode == MODE_TRITON and not trace.children:
            setting.write(trace._records(), self.writer)
            trace.request = None
        else:
            self._write(trace)

    def _write(self, trace: Trace) -> None:
        setting = trace.setting
        try:
            if setting.mode == MODE_TRITON:
                setting.write(trace.records(), self.writer)
                return
            setting.abandon()
            if setting.tensors and not self._tensor_warned:
                self._tensor_warned = True
                log.error("Tensor level tracing is not supported by the mode: opentelemetry")
            if self.otel is not None and setting.timestamps:
                self.otel.export(trace)
        finally:
            trace.release()

    # -- the settings endpoints -------------------------------------------------------------------
    def update(self, model: str, new: NewSetting, share: bool = True) -> None:
        """Apply a settings update (and, with ``share``, send it to the other ``--workers`` processes)."""
        try:
            self.settings.update(model, new)
        finally:
            self.on = self.settings.any_on()
        if share and self.propagate is not None:
            fields = {
                f: getattr(new, f) for f in NewSetting.__dataclass_fields__ if getattr(new, f) is not UNSET
            }
            self.propagate("trace_update", model, fields)

    def describe(self, model: str = "") -> list[tuple[str, str | list[str]]]:
        """The settings answer, in the reference's order: the standard fields, then the mode's own
        settings (a key given twice is listed twice, as the reference's JSON does)."""
        s: TraceSetting = self.settings.get(model)
        levels = (
            []
            if s.level == LEVEL_OFF
            else [n for b, n in ((TIMESTAMPS, "TIMESTAMPS"), (TENSORS, "TENSORS")) if s.level & b]
        )
        out: list[tuple[str, str | list[str]]] = [
            ("trace_level", levels or ["OFF"]),
            ("trace_rate", str(s.rate)),
            ("trace_count", str(s.count)),
        ]
        if s.mode == MODE_TRITON:
            out += [("log_frequency", str(s.log_frequency)), ("trace_file", s.file.name)]
        out.append(("trace_mode", s.mode))
        out += self.config.shown
        return out

    # -- shutdown -----------------------------------------------------------------------------------
    def flush(self) -> bool:
        """Write every finished trace now."""
        return self.writer.flush()

    def close(self) -> None:
        """Write what every setting holds, close the files, export the last spans."""
        self.settings.close()
        self.writer.close()
        if self.otel is not None:
            self.otel.shutdown()
