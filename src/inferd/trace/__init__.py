"""The trace extension: settings, sampling, Triton's trace files and OpenTelemetry spans.

``Tracing`` (tracing.py) is one server's state; front ends sample requests with it and stamp their
own activities, the core and the schedulers report the rest through ``core.request.RequestTrace``.
"""

from inferd.trace.config import TraceConfig, parse_trace_config
from inferd.trace.record import Trace
from inferd.trace.settings import NewSetting
from inferd.trace.tracing import Tracing, parse_traceparent

__all__ = ["NewSetting", "Trace", "TraceConfig", "Tracing", "parse_trace_config", "parse_traceparent"]
