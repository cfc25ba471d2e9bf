"""A tiny OTLP/HTTP trace receiver for the tests: ``POST /v1/traces`` with a protobuf
``ExportTraceServiceRequest``, as the OpenTelemetry SDK's exporter (and Triton's) sends it.

It decodes with ``opentelemetry-proto`` (the ``inferd[otel]`` extra installs it) and keeps every span
it got, flattened: what a test asserts on (names, ids, parents, attributes, events, the resource).
"""

from __future__ import annotations

import base64
import gzip
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from waiting import wait_until


@dataclass
class Span:
    """One received span, its ids as lower-case hex."""

    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    start_ns: int
    end_ns: int
    kind: int
    attributes: dict[str, Any]
    events: list[tuple[str, int]]
    resource: dict[str, Any] = field(default_factory=dict)
    scope: str = ""


def _value(v: Any) -> Any:
    which = v.WhichOneof("value")
    return None if which is None else getattr(v, which)


def _attributes(kvs: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in kvs}


class OtlpReceiver:
    """Listens on 127.0.0.1 (a free port); ``spans`` grows as exports arrive."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.requests = 0
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                if self.headers.get("content-encoding") == "gzip":
                    body = gzip.decompress(body)
                receiver._take(body, self.headers.get("content-type", ""))
                out = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet: the tests read what was received, not the request log."""

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1/traces"

    def start(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _take(self, body: bytes, content_type: str) -> None:
        req = trace_service_pb2.ExportTraceServiceRequest()
        if content_type.startswith("application/json"):  # OTLP/JSON: ids are hex, not base64
            doc = json.loads(body)
            for rs in doc.get("resourceSpans", ()):
                for ss in rs.get("scopeSpans", ()):
                    for s in ss.get("spans", ()):
                        for key in ("traceId", "spanId", "parentSpanId"):
                            if s.get(key):
                                s[key] = base64.b64encode(bytes.fromhex(s[key])).decode()
            json_format.ParseDict(doc, req, ignore_unknown_fields=True)
        else:
            req.ParseFromString(body)
        got: list[Span] = []
        for rs in req.resource_spans:
            resource = _attributes(rs.resource.attributes)
            for ss in rs.scope_spans:
                for s in ss.spans:
                    got.append(
                        Span(
                            s.name,
                            s.trace_id.hex(),
                            s.span_id.hex(),
                            s.parent_span_id.hex(),
                            s.start_time_unix_nano,
                            s.end_time_unix_nano,
                            s.kind,
                            _attributes(s.attributes),
                            [(e.name, e.time_unix_nano) for e in s.events],
                            resource,
                            ss.scope.name,
                        )
                    )
        with self._lock:
            self.requests += 1
            self.spans.extend(got)

    def wait_for(self, condition: Callable[[list[Span]], bool], timeout: float = 20.0) -> list[Span]:
        """The spans once ``condition(spans)`` holds (polled), else WaitTimeout with what came."""

        def spans() -> list[Span]:
            with self._lock:
                return list(self.spans)

        # (a 1-tuple: true also when the spans that satisfy the condition are none)
        found = wait_until(
            lambda: (got,) if condition(got := spans()) else None,
            "such spans",
            timeout,
            detail=lambda: f"got {spans()}",
        )
        return found[0]
