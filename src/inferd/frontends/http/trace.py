"""The trace extension on HTTP: ``/v2/trace/setting``, ``/v2/models/{m}/trace/setting``, and the
HTTP side of a traced /infer (``HTTP_RECV_*`` when it came in, ``HTTP_SEND_*`` around its answer).

``app.py`` calls ``received`` only while tracing is on (``Tracing.on``), and the rest only for a
request that was sampled.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from inferd.core.request import InferRequest
from inferd.errors import InferdError, UnavailableError
from inferd.frontends.http.errors import JSON, send_error
from inferd.frontends.http.jsonparse import parse_json
from inferd.frontends.http.protocol import HttpRequest, Responder
from inferd.frontends.http.responder import ExtraHeaders
from inferd.trace import Trace, Tracing
from inferd.trace.protocol import http_answer, http_update, unknown_model

if TYPE_CHECKING:
    from inferd.engine.facade import Core

_NOT_ALLOWED = b'{"error":"Method Not Allowed"}'


def trace_settings(
    core: Core, tracing: Tracing | None, req: HttpRequest, resp: Responder, model: str, body: Any
) -> None:
    """GET or POST the global (``model`` "") or a model's trace settings. ``body``: a callable that
    returns the request body, inflated (read only for a POST, after the model check)."""
    if req.method not in ("GET", "POST"):
        resp.send(405, _NOT_ALLOWED, JSON)
        return
    try:
        if tracing is None:
            raise UnavailableError("the server does not support trace")
        if model and not core.model_ready(model):
            raise unknown_model(model)
        if req.method == "POST":
            tracing.update(model, http_update(parse_json(body())))
        resp.send(200, http_answer(tracing.describe(model)), JSON)
    except InferdError as e:
        send_error(resp, e)


def received(resp: Any) -> tuple[int, int]:
    """(HTTP_RECV_START, HTTP_RECV_END) of the request being handled: when its first bytes came
    (the connection's, while its handler runs) and now."""
    now = time.monotonic_ns()
    conn = getattr(resp, "_conn", None)
    began = getattr(conn, "reading_since", None)
    return (min(now, int(began * 1e9)) if began else now), now


def start_trace(
    tracing: Tracing, model: str, request: InferRequest, req: HttpRequest, at: tuple[int, int]
) -> Trace | None:
    """Sample a request; a sampled one gets its trace and its receive timestamps."""
    # (only OpenTelemetry reads the caller's context: the headers stay undecoded otherwise)
    trace = tracing.sample(model, req.headers.get("traceparent") if tracing.otel is not None else None)
    if trace is not None:
        trace.stamps = ["HTTP_RECV_START", at[0], "HTTP_RECV_END", at[1]]
        request.trace = trace
    return trace


class TracedResponder:
    """A responder that stamps HTTP_SEND_START/END around the answer and then ends the trace."""

    __slots__ = ("_resp", "_trace")

    def __init__(self, resp: Any, trace: Trace) -> None:
        self._resp = resp
        self._trace = trace

    @property
    def closed(self) -> bool:
        return bool(self._resp.closed)

    def send(
        self,
        status: int,
        body: bytes | list[bytes | memoryview],
        content_type: str = "application/json",
        extra_headers: ExtraHeaders = None,
    ) -> None:
        start = time.monotonic_ns()
        self._resp.send(status, body, content_type, extra_headers)
        trace = self._trace
        trace.stamps += ("HTTP_SEND_START", start, "HTTP_SEND_END", time.monotonic_ns())
        trace.finish()
