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
from inferd.trace.rows import EARLY, FIXED, Key, compute_stamps, format_rows, header

if TYPE_CHECKING:
    from inferd.trace.settings import TraceSetting

#: trace ids: 1 up, shared by every trace of the process (0 means "no parent")
_ids = itertools.count(1)
#: shared empty lists (never appended to: replaced)
_NO_TRACES: list[Trace] = []
_NO_TENSORS: list[Tensor] = []


class Trace:
    """A sampled request's trace (``root`` is itself) or a child's (``root`` is the sampled one's).

    No ``__slots__``: most fields keep their class default for the whole of a common trace, and a
    constructor that sets only what each trace has was twice as fast as one filling 23 slots (a
    trace is made for every sampled request, on the loop)."""

    #: the parent trace (a child's), None for the sampled request's own
    parent: Trace | None = None
    #: (lists made when needed, never appended to: replaced; the empty ones are shared)
    children: list[Trace] = _NO_TRACES
    #: the request while the core has it (its timestamps and id are copied out when it ends:
    #: request and trace refer to each other, and a cycle would wait for the cyclic GC)
    request: InferRequest | None = None
    attached = False
    t_request = 0
    t_queue = 0
    request_id = ""
    inputs: list[Tensor] = _NO_TENSORS
    model_name = ""
    model_version = ""
    #: the execute that answered: (start, end, the backend's split or None), as reported
    execute: tuple[int, int, tuple[int, int, int] | None] | None = None
    outputs: list[Tensor] = _NO_TENSORS
    start_ns = 0  # (OpenTelemetry's; Triton's records start at REQUEST_START)
    finish_ns = 0
    #: OpenTelemetry: (trace id, parent span id, flags) of a propagated context, the trace's ids
    traceparent: tuple[int, int, int] | None = None
    trace_id = 0
    span_id = 0
    on_finish: Callable[[Trace], None] | None = None

    def __init__(
        self,
        setting: TraceSetting,
        parent: Trace | None = None,
        on_finish: Callable[[Trace], None] | None = None,
        traceparent: tuple[int, int, int] | None = None,
    ) -> None:
        self.id = next(_ids)
        self.setting = setting
        #: the front end's timestamps and REQUEST_END, flat: name, ns, name, ns... (no tuple per
        #: timestamp: fewer objects for the cyclic GC)
        self.stamps: list[str | int] = []
        self.on_finish = on_finish
        if parent is not None:
            self.parent = parent
        if setting.mode != "triton":
            self.start_ns = time.monotonic_ns()
            self.traceparent = traceparent
            self.span_id = random.getrandbits(64) or 1
            if parent is not None:
                self.trace_id = parent.root.trace_id
            elif traceparent is not None:
                self.trace_id = traceparent[0]
            else:
                self.trace_id = random.getrandbits(128) or 1

    @property
    def root(self) -> Trace:
        """The sampled request's trace (itself, or a child's ancestor). Not an attribute: a trace that
        referred to itself would be a reference cycle, each one left to the cyclic GC."""
        t = self
        while t.parent is not None:
            t = t.parent
        return t

    # -- the front end's side ------------------------------------------------------------------
    def stamp(self, name: str, ns: int = 0) -> None:
        """A timestamp of the front end (``ns`` 0: now)."""
        self.stamps += (name, ns or time.monotonic_ns())

    def finish(self) -> None:
        """The last answer went out: the trace (and its children) can be written."""
        if self.finish_ns:
            return
        self.finish_ns = time.monotonic_ns()
        if self.request is not None:
            self._capture()
        cb = self.on_finish
        if cb is not None:
            self.on_finish = None
            cb(self)

    # -- the core's side (core.request.RequestTrace) -------------------------------------------
    def attach(self, request: InferRequest, model_name: str, model_version: str) -> None:
        """The request was looked up, validated and is about to be queued; its response path
        (core/response_path.py) ends with ``ended`` and copies outputs with ``output_capture``."""
        self.request = request
        self.attached = True
        self.model_name = model_name
        self.model_version = model_version

    def ended(self, stream: ResponseStream) -> None:
        """The response path's end: the final response passed; what is written is copied out of the
        request (``_capture``)."""
        self.stamps += ("REQUEST_END", time.monotonic_ns())
        self._capture()

    @property
    def output_capture(self) -> Callable[[InferResponse], None] | None:
        """The response path's stage that copies the outputs (None: tensors are not traced)."""
        return self._outputs if self.setting.tensors else None

    def _capture(self) -> None:
        """Copy what is written out of the request, and let go of it."""
        req = self.request
        if req is None:
            return
        self.request = None
        self.t_request = req.t_start_ns
        self.t_queue = req.t_queue_ns
        self.request_id = req.id
        if self.setting.tensors:
            self.inputs = list(req.inputs.values())

    def _outputs(self, response: InferResponse) -> None:
        self.outputs = [*self.outputs, *response.outputs]  # the backend's, before classification

    def computed(self, start_ns: int, end_ns: int, timings: tuple[int, int, int] | None) -> None:
        """The execute that answered the request: its start and end, and the backend's split
        (input, infer, output nanoseconds) when it reports one. Kept as reported: the four COMPUTE_*
        stamps are worked out when written (``compute``; rows.py for a whole batch at once)."""
        self.execute = (start_ns, end_ns, timings)

    @property
    def compute(self) -> tuple[int, int, int, int] | None:
        """COMPUTE_START, COMPUTE_INPUT_END, COMPUTE_OUTPUT_START, COMPUTE_END (None: no execute)."""
        e = self.execute
        return None if e is None else compute_stamps(*e)

    def child(self) -> Trace:
        """A child trace (an ensemble step, a BLS request made with this request's trace)."""
        c = Trace(self.setting, self)
        root = self.root
        root.children = [*root.children, c]  # (a new list: the empty one is shared)
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

    # -- writing -------------------------------------------------------------------------------
    def pairs(self) -> list[tuple[str, int]]:
        """The front end's timestamps (and REQUEST_END) as (name, ns)."""
        s = self.stamps
        return list(zip(s[0::2], s[1::2], strict=True))  # type: ignore[arg-type]

    def timestamps(self) -> list[tuple[str, int]]:
        """Every timestamp of this trace (not its children), in time order, REQUEST_START first."""
        self._capture()
        out: list[tuple[str, int]] = []
        if self.attached:
            out.append(("REQUEST_START", self.t_request))
            if self.t_queue:
                out.append(("QUEUE_START", self.t_queue))
        c = self.compute
        if c is not None:
            out += [
                ("COMPUTE_START", c[0]),
                ("COMPUTE_INPUT_END", c[1]),
                ("COMPUTE_OUTPUT_START", c[2]),
                ("COMPUTE_END", c[3]),
            ]
        out += self.pairs()
        out.sort(key=_ns)
        return out

    def records(self) -> str:
        """Triton's JSON records of this trace and its children (comma-separated, no brackets)."""
        if not self.children:
            return self._records()
        parts = [t._records() for t in reversed(self.children) if t.attached]
        parts.append(self._records())
        return ",".join(p for p in parts if p)

    def _records(self) -> str:
        """This trace's records (the hot part of writing: formatted directly, in a fixed order)."""
        self._capture()
        setting = self.setting
        tid = self.id
        pre = f'{{"id":{tid},"timestamps":[{{"name":"'
        out: list[str] = []
        attached = self.attached
        late: list[str] = []
        if setting.timestamps:
            st = self.stamps
            for name, ns in zip(st[0::2], st[1::2], strict=True):
                (out if name in EARLY else late).append(f'{pre}{name}","ns":{ns}}}]}}')
            out.append(self._header())
            if attached:
                out.append(f'{pre}REQUEST_START","ns":{self.t_request}}}]}}')
                if self.t_queue:
                    out.append(f'{pre}QUEUE_START","ns":{self.t_queue}}}]}}')
        if setting.tensors and attached:
            out += [_tensor(tid, "TENSOR_QUEUE_INPUT", t) for t in self.inputs]
            out += [_tensor(tid, "TENSOR_BACKEND_OUTPUT", t) for t in self.outputs]
        c = self.compute
        if setting.timestamps and c is not None:
            out.append(
                f'{pre}COMPUTE_START","ns":{c[0]}}}]}},{pre}COMPUTE_INPUT_END","ns":{c[1]}}}]}},'
                f'{pre}COMPUTE_OUTPUT_START","ns":{c[2]}}}]}},{pre}COMPUTE_END","ns":{c[3]}}}]}}'
            )
        out += late
        return ",".join(out)

    def _header(self) -> str:
        head = header(str(self.id), self.model_name, self.model_version)
        if not self.request_id and self.parent is None:
            return head
        head = head[:-1]  # (the same object, with the request's id and its parent's added)
        if self.request_id:
            head += f',"request_id":{orjson.dumps(self.request_id).decode()}'
        if self.parent is not None:
            head += f',"parent_id":{self.parent.id}'
        return head + "}"

    def release(self) -> None:
        """Written: let go of the request, its tensors and the children (they refer to each other)."""
        for t in self.children:
            t.request = None
            t.outputs = t.inputs = _NO_TENSORS
        self.children = _NO_TRACES
        self.request = None
        self.outputs = self.inputs = _NO_TENSORS


class RowTrace(Trace):
    """A trace sampled under a setting whose traces become rows (``TraceSetting.rows``: Triton's file,
    TIMESTAMPS alone, written as traces end): the request path's one record. It carries no callback
    and ends in one step, into its file's pending list; whether it is a row, text (a request id, a
    child) or nothing (never attached) is decided at the flush (sink.py), off the request path."""

    def __init__(self, setting: TraceSetting) -> None:
        self.id = next(_ids)
        self.setting = setting
        self.stamps = []

    @property
    def output_capture(self) -> Callable[[InferResponse], None] | None:
        """TIMESTAMPS alone: no outputs are copied."""
        return None

    def finish(self) -> None:
        if self.finish_ns:
            return
        self.finish_ns = 1  # (ended; no clock read: a row writes no finish time)
        file = self.setting.file
        file.pending.append(self)
        writer = file.writer
        if writer is not None and writer.timer is None:
            writer.arm()


def _ns(stamp: tuple[str, int]) -> int:
    return stamp[1]


def row_runs(traces: list[Trace]) -> list[tuple[Key, list[int], int]]:
    """Common traces (``pending_parts`` picks them at the flush) as rows of numbers (rows.py's columns),
    each run of consecutive traces with one key as (key, their rows flat, how many): made at the flush,
    many in one loop, not on each request's way out. A trace whose stamps' names, model and columns are
    the last one's (the common case: compared name by name, no key built) joins its run."""
    runs: list[tuple[Key, list[int]]] = []
    values: list[int] = []
    last: list[Any] = []
    model_name = model_version = ""
    has_queue = has_compute = False
    for t in traces:
        st: list[Any] = t.stamps
        e = t.execute
        queue = t.t_queue
        same = (
            len(st) == len(last)
            and has_queue == (queue != 0)
            and has_compute == (e is not None)
            and t.model_name == model_name
            and t.model_version == model_version
            and bool(runs)
        )
        if same:
            for j in range(0, len(st), 2):
                if st[j] != last[j]:
                    same = False
                    break
        if not same:
            model_name, model_version = t.model_name, t.model_version
            has_queue, has_compute = queue != 0, e is not None
            values = []
            runs.append(((tuple(st[0::2]), model_name, model_version, has_queue, has_compute), values))
        last = st
        if e is None:
            values += (t.id, t.t_request, queue, 0, 0, 0, 0)
        else:
            start, end, timings = e
            if timings is None:
                values += (t.id, t.t_request, queue, start, 0, end - start, end)
            else:
                values += (t.id, t.t_request, queue, start, timings[0], timings[1], end)
        for j in range(1, len(st), 2):
            values.append(st[j])
    return [(key, values, len(values) // (FIXED + len(key[0]))) for key, values in runs]


def pending_parts(items: list[str | Trace]) -> list[bytes | memoryview]:
    """A trace file's new records (``sink.Writer``'s flush), in the order they came: text as it is,
    each run of common traces through rows.py, other traces (``RowTrace``s that turned out to have a
    request id or children) as their text. Compiled with the rest of this module: it looks at every
    trace of the flush."""
    out: list[bytes | memoryview] = []
    traces: list[Trace] = []
    for item in items:
        if isinstance(item, str):
            text = item
        elif not item.attached:  # refused before it was queued: nothing to write
            continue
        elif item.request is None and not item.request_id and not item.children:
            traces.append(item)  # (the common trace: ``ended`` copied the request out)
            continue
        else:
            text = item.records() if item.children else item._records()
            item.release()
        if traces:
            out += _rows(traces)
            traces = []
        if text:
            out.append(text.encode())
    if traces:
        out += _rows(traces)
    return out


def _rows(traces: list[Trace]) -> list[bytes | memoryview]:
    return [format_rows(key, values, n) for key, values, n in row_runs(traces)]


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
