"""One sampled request's trace, and its children (ensemble steps, BLS requests).

The front end that sampled it stamps its own activities (``HTTP_RECV_START`` ... ``HTTP_SEND_END``,
``GRPC_*``, ``INFER_RESPONSE_COMPLETE``) and calls ``finish`` after the last answer; the core attaches
it when the request is queued (``attach``: the model, ``REQUEST_END`` on the final response, the
outputs at the TENSORS level), the instance pool reports the execute (``computed``), and ensembles and
BLS spawn children (``child``). ``REQUEST_START`` and ``QUEUE_START`` are read off the request
(``t_start_ns``, ``t_queue_ns``) when the trace is written: the hot path keeps no extra timestamps.

``records`` writes Triton's JSON (``src/tracer.cc``): per trace id a header (model, version,
request id, parent id), one object per timestamp, one per tensor; children first, as the reference
groups them. Timestamps are ``CLOCK_MONOTONIC`` nanoseconds, the reference's steady clock.
"""

from __future__ import annotations

import itertools
import random
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson

from inferd.core.request import InferRequest
from inferd.core.response import InferResponse, ResponseStream
from inferd.core.tensor import Tensor

if TYPE_CHECKING:
    from inferd.trace.settings import TraceSetting

#: trace ids: 1 up, shared by every trace of the process (0 means "no parent")
_ids = itertools.count(1)
#: stamps written before the header, as the reference captures them before the request starts
_EARLY = ("HTTP_RECV_START", "HTTP_RECV_END")


class Trace:
    """A sampled request's trace (``root`` is itself) or a child's (``root`` is the sampled one's)."""

    __slots__ = (
        "_prev_final",
        "_prev_post",
        "children",
        "compute",
        "finish_ns",
        "id",
        "model_name",
        "model_version",
        "on_finish",
        "outputs",
        "parent",
        "request",
        "root",
        "setting",
        "span_id",
        "stamps",
        "start_ns",
        "trace_id",
        "traceparent",
    )

    def __init__(
        self,
        setting: TraceSetting,
        parent: Trace | None = None,
        on_finish: Callable[[Trace], None] | None = None,
        traceparent: tuple[int, int, int] | None = None,
    ) -> None:
        self.id = next(_ids)
        self.setting = setting
        self.parent = parent
        self.root: Trace = self if parent is None else parent.root
        self.children: list[Trace] = []
        self.stamps: list[tuple[str, int]] = []
        self.request: InferRequest | None = None
        self.model_name = ""
        self.model_version = ""
        self.compute: tuple[int, int, int, int] | None = None
        self.outputs: list[Tensor] = []
        self.on_finish = on_finish
        self.start_ns = time.monotonic_ns()
        self.finish_ns = 0
        #: OpenTelemetry: (trace id, parent span id, flags) of a propagated context
        self.traceparent = traceparent
        self.trace_id = 0
        self.span_id = 0
        if setting.mode != "triton":
            self.span_id = random.getrandbits(64) or 1
            if parent is not None:
                self.trace_id = parent.root.trace_id
            elif traceparent is not None:
                self.trace_id = traceparent[0]
            else:
                self.trace_id = random.getrandbits(128) or 1
        self._prev_final: Callable[[ResponseStream], None] | None = None
        self._prev_post: Callable[[InferResponse], None] | None = None

    # -- the front end's side ------------------------------------------------------------------
    def stamp(self, name: str, ns: int = 0) -> None:
        """A timestamp of the front end (``ns`` 0: now)."""
        self.stamps.append((name, ns or time.monotonic_ns()))

    def finish(self) -> None:
        """The last answer went out: the trace (and its children) can be written."""
        if self.finish_ns:
            return
        self.finish_ns = time.monotonic_ns()
        cb = self.on_finish
        if cb is not None:
            self.on_finish = None
            cb(self)

    # -- the core's side (core.request.RequestTrace) -------------------------------------------
    def attach(
        self, request: InferRequest, model_name: str, model_version: str, stream: ResponseStream
    ) -> None:
        """The request was looked up, validated and is about to be queued on ``stream``."""
        self.request = request
        self.model_name = model_name
        self.model_version = model_version
        self._prev_final = stream.on_final
        stream.on_final = self._final
        if self.setting.tensors:
            self._prev_post = stream.postprocess
            stream.postprocess = self._outputs

    def _final(self, stream: ResponseStream) -> None:
        self.stamps.append(("REQUEST_END", time.monotonic_ns()))
        prev = self._prev_final
        if prev is not None:
            self._prev_final = None
            prev(stream)

    def _outputs(self, response: InferResponse) -> None:
        self.outputs.extend(response.outputs)  # the backend's, before classification
        prev = self._prev_post
        if prev is not None:
            prev(response)

    def computed(self, start_ns: int, end_ns: int, timings: tuple[int, int, int] | None) -> None:
        """The execute that answered the request: its start and end, and the backend's split
        (input, infer, output nanoseconds) when it reports one."""
        in_ns, infer_ns = (0, end_ns - start_ns) if timings is None else timings[:2]
        input_end = min(end_ns, start_ns + max(0, in_ns))
        output_start = max(input_end, min(end_ns, input_end + max(0, infer_ns)))
        self.compute = (start_ns, input_end, output_start, end_ns)

    def child(self) -> Trace:
        """A child trace (an ensemble step, a BLS request made with this request's trace)."""
        c = Trace(self.setting, self)
        self.root.children.append(c)
        return c

    def context(self) -> str | None:
        """The W3C context a model may pass on (``pb_utils.InferenceTrace.get_context``): the
        request's span in OpenTelemetry mode, None in Triton mode (as the reference)."""
        if not self.span_id:
            return None
        flags = self.root.traceparent[2] if self.root.traceparent is not None else 1
        return orjson.dumps(
            {"traceparent": f"00-{self.trace_id:032x}-{self.span_id:016x}-{flags:02x}"}
        ).decode()

    # -- writing (the writer thread) -----------------------------------------------------------
    def timestamps(self) -> list[tuple[str, int]]:
        """Every timestamp of this trace (not its children), in time order, REQUEST_START first."""
        out: list[tuple[str, int]] = []
        req = self.request
        if req is not None:
            out.append(("REQUEST_START", req.t_start_ns))
            if req.t_queue_ns:
                out.append(("QUEUE_START", req.t_queue_ns))
        c = self.compute
        if c is not None:
            out += [
                ("COMPUTE_START", c[0]),
                ("COMPUTE_INPUT_END", c[1]),
                ("COMPUTE_OUTPUT_START", c[2]),
                ("COMPUTE_END", c[3]),
            ]
        out += self.stamps
        out.sort(key=_ns)
        return out

    def records(self) -> str:
        """Triton's JSON records of this trace and its children (comma-separated, no brackets)."""
        parts = [t._records() for t in reversed(self.children) if t.request is not None]
        parts.append(self._records())
        return ",".join(p for p in parts if p)

    def _records(self) -> str:
        setting = self.setting
        tid = self.id
        out: list[str] = []
        stamps = self.timestamps() if setting.timestamps else []
        if setting.timestamps:
            out += [_stamp(tid, name, ns) for name, ns in stamps if name in _EARLY]
            out.append(self._header())
        late = [s for s in stamps if s[0] not in _EARLY]
        # the request's own start and queueing come before its tensors, as in the reference
        head = [s for s in late if s[0] in ("REQUEST_START", "QUEUE_START")]
        out += [_stamp(tid, name, ns) for name, ns in head]
        if setting.tensors and self.request is not None:
            out += [_tensor(tid, "TENSOR_QUEUE_INPUT", t) for t in self.request.inputs.values()]
            out += [_tensor(tid, "TENSOR_BACKEND_OUTPUT", t) for t in self.outputs]
        out += [_stamp(tid, name, ns) for name, ns in late if name not in ("REQUEST_START", "QUEUE_START")]
        return ",".join(out)

    def _header(self) -> str:
        doc: dict[str, Any] = {"id": self.id, "model_name": self.model_name}
        doc["model_version"] = int(self.model_version) if self.model_version.isdigit() else -1
        req = self.request
        if req is not None and req.id:
            doc["request_id"] = req.id
        if self.parent is not None:
            doc["parent_id"] = self.parent.id
        return orjson.dumps(doc).decode()


def _ns(stamp: tuple[str, int]) -> int:
    return stamp[1]


def _stamp(tid: int, name: str, ns: int) -> str:
    return f'{{"id":{tid},"timestamps":[{{"name":"{name}","ns":{ns}}}]}}'


def _tensor(tid: int, activity: str, t: Tensor) -> str:
    doc = {
        "id": tid,
        "activity": activity,
        "tensor": {
            "name": t.name,
            "data": tensor_data(t),
            "shape": ",".join(str(d) for d in t.shape),
            "dtype": t.datatype.wire,
        },
    }
    return orjson.dumps(doc).decode()


def tensor_data(t: Tensor) -> str:
    """A tensor's elements as the reference prints them (C++ ``ostream``: six significant digits for
    floats, 1/0 for booleans, one character per 8-bit integer, quoted strings; nothing for FP16/BF16)."""
    wire = t.datatype.wire
    if wire in ("FP16", "BF16"):
        return ""
    try:
        flat = t.array.reshape(-1)
    except (ValueError, TypeError):
        return ""
    if wire in ("FP32", "FP64"):
        return ",".join(f"{v:g}" for v in flat.tolist())
    if wire == "BOOL":
        return ",".join("1" if v else "0" for v in flat.tolist())
    if wire in ("UINT8", "INT8"):
        return ",".join(chr(int(v) & 0xFF) for v in flat.tolist())
    if wire == "BYTES":
        return ",".join(
            '"' + (v if isinstance(v, str) else bytes(v).decode("utf-8", "backslashreplace")) + '"'
            for v in flat.tolist()
        )
    return ",".join(str(int(v)) for v in flat.tolist())
