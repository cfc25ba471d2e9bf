"""A trace's life (sampled, attached, computed, answered, written) and what is written: Triton's
records, tensors as the reference prints them, indexed files, a main file that stays one array."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import numpy as np
import pytest

from inferd.core.request import InferRequest
from inferd.core.response import InferResponse, ResponseStream
from inferd.core.response_path import ResponsePath
from inferd.core.tensor import Tensor
from inferd.core.types import BY_WIRE
from inferd.trace import NewSetting, Tracing, parse_trace_config
from inferd.trace.record import tensor_data


def tracing(tmp_path: Path, *flags: str) -> Tracing:
    return Tracing(
        parse_trace_config([f"triton,file={tmp_path / 't.json'}", "level=TIMESTAMPS", "rate=1", *flags])
    )


def run_request(t: Tracing, rid: str = "r1", model: str = "m") -> None:
    """One sampled request through the hooks the front end, the core and the pool call."""
    loop = asyncio.new_event_loop()
    try:
        trace = t.sample(model)
        assert trace is not None
        trace.stamp("HTTP_RECV_START")
        trace.stamp("HTTP_RECV_END")
        req = InferRequest(model, {"X": Tensor.from_array("X", np.array([1.5, 2.0], np.float32))}, id=rid)
        req.trace = trace
        stream = ResponseStream(loop)
        trace.attach(req, model, "3")
        stream.path = ResponsePath(trace_end=trace.ended, trace_post=trace.output_capture)
        child = trace.child()
        child_req = InferRequest("step", {}, id=rid, trace=child)
        child_stream = ResponseStream(loop)
        child.attach(child_req, "step", "1")
        child_stream.path = ResponsePath(trace_end=child.ended, trace_post=child.output_capture)
        child_stream.deliver(InferResponse("step", "1"), True)
        req.t_queue_ns = time.monotonic_ns()
        t0 = time.monotonic_ns()
        trace.computed(t0, t0 + 1000, (100, 800, 100))
        out = InferResponse(model, "3", rid, [Tensor.from_array("Y", np.array([True, False]))])
        stream.deliver(out, True)
        trace.stamp("INFER_RESPONSE_COMPLETE")
        trace.stamp("HTTP_SEND_START")
        trace.stamp("HTTP_SEND_END")
        trace.finish()
    finally:
        loop.close()


def test_records_of_a_trace_and_its_child(tmp_path: Path) -> None:
    t = tracing(tmp_path, "level=TENSORS")
    run_request(t)
    assert t.flush()
    doc = json.loads((tmp_path / "t.json").read_text())
    headers = [r for r in doc if "model_name" in r]
    assert headers[0]["model_name"] == "step" and headers[0]["parent_id"] == headers[1]["id"]
    assert headers[1] == {"id": headers[1]["id"], "model_name": "m", "model_version": 3, "request_id": "r1"}
    names = [r["timestamps"][0]["name"] for r in doc if r["id"] == headers[1]["id"] and "timestamps" in r]
    assert names[:4] == ["HTTP_RECV_START", "HTTP_RECV_END", "REQUEST_START", "QUEUE_START"]
    assert set(names) >= {
        "COMPUTE_START",
        "COMPUTE_INPUT_END",
        "COMPUTE_OUTPUT_START",
        "COMPUTE_END",
        "REQUEST_END",
    }
    ns = {
        r["timestamps"][0]["name"]: r["timestamps"][0]["ns"]
        for r in doc
        if r["id"] == headers[1]["id"] and "timestamps" in r
    }
    assert (
        ns["COMPUTE_INPUT_END"] - ns["COMPUTE_START"] == 100
        and ns["COMPUTE_END"] - ns["COMPUTE_OUTPUT_START"] == 100
    )
    tensors = {(r["activity"], r["tensor"]["name"]): r["tensor"] for r in doc if "activity" in r}
    assert tensors[("TENSOR_QUEUE_INPUT", "X")] == {
        "name": "X",
        "data": "1.5,2",
        "shape": "2",
        "dtype": "FP32",
    }
    assert tensors[("TENSOR_BACKEND_OUTPUT", "Y")]["data"] == "1,0"
    t.close()


def test_log_frequency_and_count_write_indexed_files(tmp_path: Path) -> None:
    t = tracing(tmp_path, "triton,log-frequency=2")
    for i in range(3):
        run_request(t, f"r{i}")
    assert t.flush()
    roots = [
        r
        for r in json.loads((tmp_path / "t.json.0").read_text())
        if "model_name" in r and "parent_id" not in r
    ]
    assert len(roots) == 2
    assert not (tmp_path / "t.json.1").exists()
    t.update("", NewSetting(log_frequency=0, count=1))  # replaced: the one left goes to its own index
    assert t.flush()
    assert (tmp_path / "t.json.1").exists()
    run_request(t, "counted")
    assert t.flush()
    assert "counted" in (tmp_path / "t.json.2").read_text()
    assert not (tmp_path / "t.json").exists()
    t.close()


def test_the_main_file_is_one_array_after_every_write(tmp_path: Path) -> None:
    t = tracing(tmp_path)
    for i in range(3):
        run_request(t, f"r{i}")
        assert t.flush()
        doc = json.loads((tmp_path / "t.json").read_text())
        assert len({r.get("request_id") for r in doc if "request_id" in r}) == i + 1
    t.close()
    assert json.loads((tmp_path / "t.json").read_text())


def test_nothing_reopens_the_file_after_close(tmp_path: Path) -> None:
    t = tracing(tmp_path)
    run_request(t, "before")
    t.close()
    run_request(t, "after")  # a request that ended after the server closed its traces
    t.flush()
    text = (tmp_path / "t.json").read_text()
    assert "before" in text and "after" not in text and json.loads(text)


def test_a_refused_request_writes_nothing(tmp_path: Path) -> None:
    t = tracing(tmp_path, "count=1")
    trace = t.sample("m")
    assert trace is not None
    trace.finish()  # never attached: refused before it was queued
    assert t.flush() and not (tmp_path / "t.json").exists()
    t.close()


@pytest.mark.parametrize(
    ("wire", "values", "text"),
    [
        ("FP32", [0.1, 1e-7, 3.0, float("inf")], "0.1,1e-07,3,inf"),
        ("FP64", [123456789.0], "1.23457e+08"),
        ("INT32", [-1, 7], "-1,7"),
        ("UINT8", [65, 66], "A,B"),
        ("BOOL", [True, False], "1,0"),
        ("FP16", [1.0], ""),
        ("BYTES", [b"ab", "é".encode()], '"ab","é"'),
    ],
)
def test_tensor_data_as_the_reference_prints_it(wire: str, values: list[object], text: str) -> None:
    dt = BY_WIRE[wire]
    arr = np.array(values, dtype=object if wire == "BYTES" else dt.numpy)
    assert tensor_data(Tensor.from_array("t", arr, dt)) == text


def test_context_is_the_opentelemetry_span(tmp_path: Path) -> None:
    t = tracing(tmp_path)
    trace = t.sample("m")
    assert trace is not None and trace.context() is None  # Triton mode: none, as the reference
    pytest.importorskip("opentelemetry.sdk")
    o = Tracing(
        parse_trace_config(
            ["mode=opentelemetry", "level=TIMESTAMPS", "rate=1", "opentelemetry,url=127.0.0.1:9"]
        )
    )
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    ot = o.sample("m", parent)
    assert ot is not None
    ctx = json.loads(ot.child().context() or "")
    assert ctx["traceparent"].startswith("00-0af7651916cd43dd8448eb211c80319c-") and ctx[
        "traceparent"
    ].endswith("-01")
    o.close()
