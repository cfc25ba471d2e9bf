"""The trace extension on gRPC: the TraceSetting RPC, and the gRPC side of a traced inference
(``GRPC_WAITREAD_*`` when its message was read, ``GRPC_SEND_*`` around each answer)."""

from __future__ import annotations

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
    for k, v in metadata or ():
        if k == "traceparent":
            parent = v if isinstance(v, str) else v.decode("latin-1")
            break
    trace = tracing.sample(model, parent)
    if trace is not None:
        trace.stamp("GRPC_WAITREAD_START", at)
        trace.stamp("GRPC_WAITREAD_END", at)
        request.trace = trace
    return trace


def traced(trace: Trace, callback: Callback) -> Callback:
    """A stream callback with the trace's timestamps around each answer, ending the trace after the
    last one."""

    def on_response(r: InferResponse | None, final: bool) -> None:
        trace.stamp("INFER_RESPONSE_COMPLETE")
        trace.stamp("GRPC_SEND_START")
        callback(r, final)
        trace.stamp("GRPC_SEND_END")
        if final:
            trace.finish()

    return on_response
