"""OpenTelemetry mode: a finished trace as the reference's spans, exported over OTLP/HTTP.

Needs the ``inferd[otel]`` extra (``opentelemetry-sdk``, ``opentelemetry-exporter-otlp-proto-http``),
imported only in this mode. The spans are the reference's (``src/tracer.cc``), all of kind SERVER
from the ``triton-server`` scope:

- ``InferRequest``: the front end's span, child of the caller's span when the request carried a W3C
  ``traceparent`` (so it joins the caller's trace), with the front end's timestamps as events;
- one span per model request, named after the model (``triton.model_name``, ``triton.model_version``,
  ``triton.trace_id``, ``triton.trace_parent_id``, ``triton.request_id``), with REQUEST_START,
  QUEUE_START and REQUEST_END; an ensemble step's or a BLS request's span is the child of its
  caller's model span;
- ``compute`` under each executed model span, with the four COMPUTE_* events.

Spans are built when the request has finished, with the ids the trace chose when it started (so a
model can pass its context on), and handed to the SDK's batch span processor, which exports them
from its own thread. Timestamps move from the monotonic clock to the epoch by one offset taken at start, as
the reference does.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, TraceFlags

from inferd.trace.config import DEFAULT_OTLP_URL, TraceConfig, stoi
from inferd.trace.record import Trace

log = logging.getLogger("inferd.trace")

SCOPE = InstrumentationScope("triton-server")
_MODEL_EVENTS = ("REQUEST_START", "QUEUE_START", "REQUEST_END")
_COMPUTE_EVENTS = ("COMPUTE_START", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START", "COMPUTE_END")


def otlp_url(value: str) -> str:
    """The reference takes ``host:port/path``; the SDK wants a URL."""
    return value if "://" in value else f"http://{value}"


class OtelExport:
    """The exporter and batch span processor of one server, from its ``opentelemetry,`` settings."""

    def __init__(self, config: TraceConfig) -> None:
        attributes: dict[str, Any] = {"service.name": "triton-inference-server"}
        for item in config.otel_setting("resource"):
            key, _, value = item.partition("=")
            attributes[key] = value
        self.resource = Resource.create(attributes)
        urls = config.otel_setting("url")
        self.url = otlp_url(urls[-1]) if urls else DEFAULT_OTLP_URL

        def bsp(key: str) -> int:
            values = config.otel_setting(key)
            return stoi(values[-1]) if values else 0

        queue = max(1, bsp("bsp_max_queue_size"))
        batch = min(queue, max(1, bsp("bsp_max_export_batch_size")))
        delay = max(1, bsp("bsp_schedule_delay"))  # the SDK wants a positive delay; 0 means "at once"
        self.processor = BatchSpanProcessor(
            OTLPSpanExporter(endpoint=self.url),
            max_queue_size=queue,
            schedule_delay_millis=delay,
            max_export_batch_size=batch,
        )
        #: monotonic ns -> epoch ns (the reference's time_offset_)
        self.offset = time.time_ns() - time.monotonic_ns()

    def export(self, root: Trace) -> None:
        """The spans of a finished trace and its children."""
        off = self.offset
        flags = TraceFlags(TraceFlags.SAMPLED)
        trace_id = root.trace_id
        parent = None
        if root.traceparent is not None:
            pid, pspan, pflags = root.traceparent
            parent = SpanContext(pid, pspan, is_remote=True, trace_flags=TraceFlags(pflags))
        front = SpanContext(trace_id, _front_span_id(root), is_remote=False, trace_flags=flags)
        end = root.finish_ns or time.monotonic_ns()
        events = [
            Event(name, timestamp=ns + off)
            for name, ns in sorted(root.pairs(), key=_ns)
            if name != "REQUEST_END"
        ]
        spans = [
            ReadableSpan(
                "InferRequest",
                front,
                parent,
                self.resource,
                {},
                events,
                kind=SpanKind.SERVER,
                start_time=min([root.start_ns, *(e[1] for e in root.pairs())]) + off,
                end_time=end + off,
                instrumentation_scope=SCOPE,
            )
        ]
        for t in (root, *root.children):
            if not t.attached:
                continue
            parent_ctx = front if t.parent is None else _context(t.parent, flags)
            spans += self._model_spans(t, parent_ctx, flags, end)
        for s in spans:
            self.processor.on_end(s)

    def _model_spans(
        self, t: Trace, parent: SpanContext, flags: TraceFlags, end_ns: int
    ) -> list[ReadableSpan]:
        off = self.offset
        stamps = dict(t.timestamps())
        ctx = _context(t, flags)
        attributes: dict[str, Any] = {
            "triton.model_name": t.model_name,
            "triton.model_version": int(t.model_version) if t.model_version.isdigit() else -1,
            "triton.trace_id": t.id,
            "triton.trace_parent_id": t.parent.id if t.parent is not None else 0,
        }
        if t.request_id:
            attributes["triton.request_id"] = t.request_id
        start = stamps.get("REQUEST_START", t.start_ns)
        out = [
            ReadableSpan(
                t.model_name,
                ctx,
                parent,
                self.resource,
                attributes,
                [Event(n, timestamp=stamps[n] + off) for n in _MODEL_EVENTS if n in stamps],
                kind=SpanKind.SERVER,
                start_time=start + off,
                end_time=stamps.get("REQUEST_END", end_ns) + off,
                instrumentation_scope=SCOPE,
            )
        ]
        c = t.compute
        if c is not None:
            compute = SpanContext(t.trace_id, _compute_span_id(t), is_remote=False, trace_flags=flags)
            out.append(
                ReadableSpan(
                    "compute",
                    compute,
                    ctx,
                    self.resource,
                    {},
                    [Event(n, timestamp=ns + off) for n, ns in zip(_COMPUTE_EVENTS, c, strict=True)],
                    kind=SpanKind.SERVER,
                    start_time=c[0] + off,
                    end_time=c[3] + off,
                    instrumentation_scope=SCOPE,
                )
            )
        return out

    def flush(self, timeout_ms: int = 5000) -> bool:
        return bool(self.processor.force_flush(timeout_ms))

    def shutdown(self, timeout_s: float = 2.0) -> None:
        """Export what is left, waiting at most ``timeout_s`` (a collector that cannot be reached
        must not hold the server's exit)."""

        def run() -> None:
            try:
                self.processor.shutdown()  # type: ignore[no-untyped-call]
            except Exception:
                log.exception("the OpenTelemetry exporter did not shut down cleanly")

        t = threading.Thread(target=run, name="inferd-otel-shutdown", daemon=True)
        t.start()
        t.join(timeout_s)


def _ns(stamp: tuple[str, int]) -> int:
    return stamp[1]


def _context(t: Trace, flags: TraceFlags) -> SpanContext:
    return SpanContext(t.trace_id, t.span_id, is_remote=False, trace_flags=flags)


def _front_span_id(t: Trace) -> int:
    """The InferRequest span's id: derived from the model span's, so that the trace keeps one id."""
    return (t.span_id ^ 0x5A5A5A5A5A5A5A5A) or 1


def _compute_span_id(t: Trace) -> int:
    return (t.span_id ^ 0xA5A5A5A5A5A5A5A5) or 1
