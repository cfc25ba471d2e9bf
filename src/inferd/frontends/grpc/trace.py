"""The trace extension on gRPC: the TraceSetting RPC, and the gRPC side of a traced inference
(``GRPC_WAITREAD_*`` when its message was read, ``GRPC_SEND_*`` around each answer)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from inferd.core.request import InferRequest
from inferd.core.response import InferResponse
from inferd.errors import UnavailableError
from inferd.frontends.grpc._pb import pb
from inferd.trace import Trace, Tracing
from inferd.trace.protocol import grpc_answer, grpc_update, unknown_model

if TYPE_CHECKING:
    from inferd.engine.facade import Core

Metadata = Any
Callback = Callable[[InferResponse | None, bool], None]


def trace_setting(
    core: Core, tracing: Tracing | None, request: pb.TraceSettingRequest
) -> pb.TraceSettingResponse:
    """TraceSetting: the model check, the update (when settings are given), the current settings."""
    if tracing is None:
        raise UnavailableError("the server does not support trace")
    model = request.model_name
    if model and not core.model_ready(model):
        raise unknown_model(model)
    if request.settings:
        tracing.update(model, grpc_update({k: list(v.value) for k, v in request.settings.items()}))
    resp = pb.TraceSettingResponse()
    for key, values in grpc_answer(tracing.describe(model)).items():
        resp.settings[key].value.extend(values)
    return resp


def start_trace(
    tracing: Tracing, model: str, request: InferRequest, metadata: Metadata, at: int
) -> Trace | None:
    """Sample a request read at ``at``; a sampled one gets its trace and its read timestamps."""
    parent = None
    if tracing.otel is not None:  # (only OpenTelemetry reads the caller's context)
        for k, v in metadata or ():
            if k == "traceparent":
                parent = v if isinstance(v, str) else v.decode("latin-1")
                break
    trace = tracing.sample(model, parent)
    if trace is not None:
        trace.stamps = ["GRPC_WAITREAD_START", at, "GRPC_WAITREAD_END", at]
        request.trace = trace
    return trace


def traced(trace: Trace, callback: Callback) -> Callback:
    """A stream callback with the trace's timestamps around each answer, ending the trace after the
    last one."""

    def on_response(r: InferResponse | None, final: bool) -> None:
        # (the response completes and its send starts at one instant here: one clock read for both;
        # the stamps go in with one list extend after the send, in their order)
        at = time.monotonic_ns()
        callback(r, final)
        trace.stamps += (
            "INFER_RESPONSE_COMPLETE",
            at,
            "GRPC_SEND_START",
            at,
            "GRPC_SEND_END",
            time.monotonic_ns(),
        )
        if final:
            trace.finish()

    return on_response
