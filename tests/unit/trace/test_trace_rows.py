"""Common traces written as rows (rows.py): the same bytes as each trace's own records, whatever the
numbers' widths, the stamps' names and order, the model; and which traces take that path."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferd.core.request import InferRequest
from inferd.core.response import ResponseStream
from inferd.trace import Trace, Tracing, parse_trace_config
from inferd.trace.record import RowTrace, row_runs
from inferd.trace.rows import format_few, format_many, format_rows
from inferd.trace.settings import TraceSetting
from inferd.trace.sink import TraceFile

FRONT_END = [
    "HTTP_RECV_START",
    "HTTP_RECV_END",
    "GRPC_WAITREAD_START",
    "GRPC_WAITREAD_END",
    "REQUEST_END",
    "INFER_RESPONSE_COMPLETE",
    "HTTP_SEND_START",
    "HTTP_SEND_END",
    "GRPC_SEND_START",
    "GRPC_SEND_END",
]

#: numbers around every width a row can hold, 0 and the int64 edge included
NUMBERS = st.one_of(
    st.integers(0, 20),
    st.integers(0, 2**63 - 1),
    st.sampled_from([9, 10, 99, 100, 9_999, 10_000, 99_999_999, 10**13 - 1, 10**13, 10**18, 2**63 - 1]),
)


def setting(tmp_path: Path, *flags: str) -> TraceSetting:
    t = Tracing(
        parse_trace_config([f"triton,file={tmp_path / 't.json'}", "level=TIMESTAMPS", "rate=1", *flags])
    )
    return t.settings.get("")


def make_trace(
    s: TraceSetting,
    tid: int,
    names: list[str],
    numbers: list[int],
    model: tuple[str, str],
    queue: int,
    compute: tuple[int, int, int, int] | None,
    rid: str = "",
) -> Trace:
    trace = Trace(s)
    trace.id = tid
    req = InferRequest(model[0], {}, id=rid)
    req.t_start_ns = numbers[0]
    req.t_queue_ns = queue
    trace.attach(req, model[0], model[1])
    if compute is not None:
        trace.computed(compute[0], compute[3], (compute[1], compute[2], 0))
    trace.stamps = [x for pair in zip(names, numbers[1:], strict=False) for x in pair]
    trace.finish()  # (no callback: what it copies out of the request is kept)
    return trace


traces = st.tuples(
    st.lists(st.sampled_from(FRONT_END), min_size=0, max_size=6),
    st.sampled_from([("add_sub", "1"), ('q"u\\ote', "12"), ("ünï", ""), ("m", "latest")]),
    st.booleans(),
    st.booleans(),
)


@settings(max_examples=150, deadline=None)
@given(shape=traces, ids=st.lists(NUMBERS, min_size=1, max_size=8), numbers=st.data())
def test_rows_write_what_the_records_write(
    tmp_path_factory: pytest.TempPathFactory,
    shape: tuple[list[str], tuple[str, str], bool, bool],
    ids: list[int],
    numbers: st.DataObject,
) -> None:
    names, model, has_queue, has_compute = shape
    s = setting(tmp_path_factory.mktemp("rows"))
    written = []
    batch = []
    for tid in ids:
        nums = numbers.draw(st.lists(NUMBERS, min_size=len(names) + 6, max_size=len(names) + 6))
        queue = nums[-5] or 1 if has_queue else 0
        compute = tuple(nums[-4:]) if has_compute else None
        trace = make_trace(s, tid, names, nums, model, queue, compute)  # type: ignore[arg-type]
        batch.append(trace)
        written.append(trace._records())
    runs = row_runs(batch)
    assert len(runs) == 1  # (one key: one run)
    key, values, n = runs[0]
    assert n == len(ids)
    got = format_rows(key, values, n)
    assert got == ",".join(written).encode()
    json.loads(b"[" + got + b"]")
    # both ways a run is formatted (format_rows picks one by the run's length)
    assert format_few(key, values, n) == got
    assert bytes(format_many(key, values, n)) == got


def test_traces_of_other_keys_start_runs_of_their_own(tmp_path: Path) -> None:
    s = setting(tmp_path)
    shapes = [
        ("a", ["HTTP_RECV_START"]),
        ("a", ["HTTP_RECV_START"]),
        ("b", ["HTTP_RECV_START"]),
        ("b", ["GRPC_SEND_START"]),
        ("a", ["HTTP_RECV_START"]),
    ]
    batch = [
        make_trace(s, i, names, [10 + i, 20 + i], (m, "1"), 0, None) for i, (m, names) in enumerate(shapes)
    ]
    runs = row_runs(batch)
    assert [n for _, _, n in runs] == [2, 1, 1, 1]
    got = b",".join(bytes(format_rows(*run)) for run in runs)
    assert got == ",".join(t._records() for t in batch).encode()


def test_numbers_past_int64_and_below_zero_are_written_one_by_one(tmp_path: Path) -> None:
    s = setting(tmp_path)
    for odd in (2**64 + 5, -3):
        trace = make_trace(s, 7, ["HTTP_RECV_START", "REQUEST_END"], [5, odd, 6], ("m", "1"), 0, None)
        [(key, values, n)] = row_runs([trace])
        assert format_rows(key, values, n) == trace._records().encode()


def test_which_traces_wait_for_the_flush_as_they_are(tmp_path: Path) -> None:
    """Only common traces (attached, no request id, no children, a setting of TIMESTAMPS alone that
    writes the main file as traces end) go to the writer as they are; the rest as their text."""
    t = Tracing(parse_trace_config([f"triton,file={tmp_path / 't.json'}", "level=TIMESTAMPS", "rate=1"]))
    s = t.settings.get("")
    plain = make_trace(s, 1, ["HTTP_RECV_START"], [5, 6], ("m", "1"), 0, None)
    with_id = make_trace(s, 2, [], [5], ("m", "1"), 0, None, rid="r1")
    parent = make_trace(s, 3, [], [5], ("m", "1"), 0, None)
    parent.child()

    async def finish() -> list[str | Trace]:  # (on a loop: the writer waits for its timer)
        for trace in (plain, with_id, parent, Trace(s)):
            t._finished(trace)
        return list(s.file.pending)

    queued = asyncio.run(finish())
    assert queued[0] is plain
    assert [type(q) for q in queued[1:]] == [str, str]  # (the trace never attached: nothing)
    for flags in (["level=TENSORS"], ["triton,log-frequency=2"], ["count=5"]):
        assert not setting(tmp_path, *flags).rows
    t.close()
    records = json.loads((tmp_path / "t.json").read_bytes())
    assert [r["id"] for r in records if "model_name" in r] == [1, 2, 3]


def test_a_run_of_rows_and_text_keep_their_order_in_the_file(tmp_path: Path) -> None:
    """The writer keeps rows of one key together and text between them, in the order written."""
    t = Tracing(parse_trace_config([f"triton,file={tmp_path / 't.json'}", "level=TIMESTAMPS", "rate=1"]))
    s = t.settings.get("")
    file: TraceFile = s.file
    order = []
    for i, model in enumerate(["a", "a", "b", "a"], 1):
        rid = "text" if i == 3 else ""
        trace = make_trace(s, i, ["HTTP_RECV_START"], [100 + i, 200 + i], (model, "1"), 0, None, rid)
        order.append(i)
        t._finished(trace)
    t.writer.flush()
    t.close()
    records = json.loads((tmp_path / "t.json").read_bytes())
    ids: list[int] = []
    for r in records:
        if not ids or ids[-1] != r["id"]:
            ids.append(r["id"])
    assert ids == order
    assert file.name.endswith("t.json")
    assert [r.get("request_id") for r in records if "model_name" in r] == [None, None, "text", None]


def test_a_file_takes_more_parts_than_one_system_call_does(tmp_path: Path) -> None:
    """The main file is written with writev, IOV_MAX buffers at a time: every part arrives, in order."""
    file = TraceFile(str(tmp_path / "t.json"))
    parts: list[bytes | memoryview] = [b'{"id":%d}' % i for i in range(3000)]
    parts[7] = memoryview(b'{"id":7}')
    file.append(parts)
    file.append([b'{"id":3000}'])
    file.close()
    assert [r["id"] for r in json.loads((tmp_path / "t.json").read_bytes())] == list(range(3001))


def test_row_traces_are_sorted_at_the_flush(tmp_path: Path) -> None:
    """A setting of rows samples RowTraces, which end straight into the file's pending list; the
    flush writes the common ones as rows, one with a request id or children as its text, and none
    for one never attached (refused), in the order they ended, the same bytes as their records."""
    t = Tracing(parse_trace_config([f"triton,file={tmp_path / 't.json'}", "level=TIMESTAMPS", "rate=1"]))
    s = t.settings.get("")
    assert s.rows

    async def run() -> tuple[list[str | Trace], list[str]]:
        expected: list[str] = []
        for rid, children, attached in (
            ("", 0, True),
            ("r1", 0, True),
            ("", 0, False),
            ("", 2, True),
            ("", 0, True),
        ):
            trace = t.sample("m")
            assert isinstance(trace, RowTrace)
            trace.stamps = ["HTTP_RECV_START", 3, "HTTP_RECV_END", 4]
            if attached:
                req = InferRequest("m", {}, id=rid)
                req.t_start_ns, req.t_queue_ns = 5, 6
                trace.attach(req, "m", "1")
                for _ in range(children):
                    child = trace.child()
                    creq = InferRequest("step", {})
                    creq.t_start_ns = 7
                    child.attach(creq, "step", "1")
                    child.ended(ResponseStream(asyncio.get_running_loop()))
                trace.computed(8, 9, None)
                trace.ended(ResponseStream(asyncio.get_running_loop()))
            trace.stamp("HTTP_SEND_END", 10)
            if attached:
                expected.append(trace.records())
            trace.finish()
            trace.finish()  # (once)
        pending = list(s.file.pending)
        assert t.writer.timer is not None  # (the flush armed)
        t.writer.flush()
        return pending, expected

    pending, expected = asyncio.run(run())
    assert len(pending) == 5
    t.close()
    got = (tmp_path / "t.json").read_bytes()
    assert got == ("[" + ",".join(expected) + "]").encode()
    records = json.loads(got)
    assert [r.get("request_id") for r in records if "model_name" in r and "parent_id" not in r] == [
        None,
        "r1",
        None,
        None,
    ]


def test_closing_writes_the_rows_still_pending(tmp_path: Path) -> None:
    """A server that stops before the flush comes: ``Tracing.close`` writes every pending trace."""
    t = Tracing(parse_trace_config([f"triton,file={tmp_path / 't.json'}", "level=TIMESTAMPS", "rate=1"]))

    async def run() -> None:  # (on a loop: the flush waits for its timer)
        for _ in range(300):
            trace = t.sample("m")
            assert trace is not None
            req = InferRequest("m", {})
            req.t_start_ns = 1
            trace.attach(req, "m", "1")
            trace.ended(ResponseStream(asyncio.get_running_loop()))
            trace.finish()

    asyncio.run(run())
    assert not (tmp_path / "t.json").exists()  # (nothing written yet)
    t.close()
    records = json.loads((tmp_path / "t.json").read_bytes())
    assert len({r["id"] for r in records}) == 300 and len(records) == 900  # (header, 2 stamps)
