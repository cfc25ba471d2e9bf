"""Tracing end to end: trace files read back (and by Triton's own trace_summary.py), ensemble steps
and BLS calls as child traces, the TENSORS level, OpenTelemetry spans at a local OTLP receiver with
the caller's trace id, and a trace file that cannot be written. Settings go through tritonclient's
trace APIs over HTTP and gRPC.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from repo_paths import FIXTURES, REFERENCE_MODELS
from waiting import wait_until

HAVE_OTEL = importlib.util.find_spec("opentelemetry.sdk") is not None
SUMMARY = FIXTURES / "trace_summary.py"
#: the timestamps of a traced HTTP request on add_sub, in the order they must happen
HTTP_ORDER = (
    "HTTP_RECV_START",
    "HTTP_RECV_END",
    "REQUEST_START",
    "QUEUE_START",
    "COMPUTE_START",
    "COMPUTE_INPUT_END",
    "COMPUTE_OUTPUT_START",
    "COMPUTE_END",
    "REQUEST_END",
    "HTTP_SEND_START",
    "HTTP_SEND_END",
)
GRPC_ORDER = ("GRPC_WAITREAD_END", *HTTP_ORDER[2:9], "GRPC_SEND_START", "GRPC_SEND_END")


@pytest.fixture(scope="module")
def model_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This module's servers (``start_server``) serve add_sub, mul_fp32, their ensemble,
    identity_bytes and a BLS model calling add_sub."""
    dest = tmp_path_factory.mktemp("trace") / "models"
    dest.mkdir()
    ignore = shutil.ignore_patterns("__pycache__")
    for name in ("add_sub", "mul_fp32", "ensemble_add_sub", "identity_bytes"):
        shutil.copytree(REFERENCE_MODELS / name, dest / name, ignore=ignore)
    shutil.copytree(FIXTURES / "trace_models" / "bls_add_sub", dest / "bls_add_sub", ignore=ignore)
    return dest


@pytest.fixture
def serve(start_server: Callable[..., Any]) -> Callable[..., Any]:
    """A server of its own on this module's repository, with the given flags."""
    return start_server


def _inputs(mod: Any) -> list[Any]:
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    out = [mod.InferInput(n, [1, 16], "FP32") for n in ("INPUT0", "INPUT1")]
    out[0].set_data_from_numpy(a)
    out[1].set_data_from_numpy(np.ones_like(a))
    return out


def _read(path: Path, traces: int, timeout: float = 10.0) -> list[dict[str, Any]]:
    """The records of a trace file once it holds ``traces`` traces without a parent (polled)."""

    def read() -> list[dict[str, Any]]:
        doc: list[dict[str, Any]] = json.loads(path.read_text()) if path.exists() else []
        return doc

    def roots(doc: list[dict[str, Any]]) -> set[Any]:
        return {r["id"] for r in doc if "model_name" in r and "parent_id" not in r}

    found = wait_until(lambda: (doc,) if len(roots(doc := read())) >= traces else None,
                       f"{traces} traces in {path.name}", timeout, detail=read,
                       ignore=(ValueError,))  # (read while a flush writes it)  # fmt: skip
    assert len(roots(found[0])) == traces, found[0]
    return found[0]


def _by_id(doc: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """id -> {"header": ..., "ts": {name: ns}, "tensors": [...]}."""
    out: dict[int, dict[str, Any]] = {}
    for r in doc:
        t = out.setdefault(r["id"], {"header": None, "ts": {}, "tensors": []})
        if "model_name" in r:
            t["header"] = r
        elif "timestamps" in r:
            for ts in r["timestamps"]:
                t["ts"][ts["name"]] = ts["ns"]
        else:
            t["tensors"].append(r)
    return out


def test_trace_file_timestamps_ordered_within_the_request(serve: Callable[..., Any], tmp_path: Path) -> None:
    path = tmp_path / "trace.json"
    server = serve(f"--trace-config=triton,file={path}")
    http = httpclient.InferenceServerClient(server.url)
    grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    # off at start; switched on through the trace APIs of both clients
    assert http.get_trace_settings()["trace_level"] == ["OFF"]
    assert (
        http.update_trace_settings(settings={"trace_level": ["TIMESTAMPS"], "trace_rate": "1"})["trace_rate"]
        == "1"
    )
    got = grpc.update_trace_settings(model_name="add_sub", settings={"log_frequency": "0"}, as_json=True)
    assert got["settings"]["trace_level"] == {"value": ["TIMESTAMPS"]}
    windows: dict[str, tuple[int, int]] = {}
    for i in range(4):
        for proto, client, mod in (("http", http, httpclient), ("grpc", grpc, grpcclient)):
            rid = f"{proto}-{i}"
            t0 = time.monotonic_ns()
            client.infer("add_sub", _inputs(mod), request_id=rid)
            windows[rid] = (t0, time.monotonic_ns())
    doc = _read(path, 8)
    traces = _by_id(doc)
    assert len(traces) == 8
    for t in traces.values():
        header, ts = t["header"], t["ts"]
        assert (header["model_name"], header["model_version"]) == ("add_sub", 1)
        start, end = windows[header["request_id"]]
        order = HTTP_ORDER if header["request_id"].startswith("http") else GRPC_ORDER
        stamps = [ts[name] for name in order]
        assert stamps == sorted(stamps), ts
        # all within the client's wall time (the send's end is stamped once the bytes are handed to
        # the kernel: the client may read them first)
        inside = [ns for name, ns in ts.items() if not name.endswith("_SEND_END")]
        assert start <= min(inside) and max(inside) <= end, (start, ts, end)
    # Triton's own summary tool reads the file: every request, both front ends, the compute split
    out = subprocess.run(
        [sys.executable, str(SUMMARY), "-t", str(path)], capture_output=True, text=True, check=True
    )
    assert out.stdout.count("COMPUTE_INPUT_END") == 8, out.stdout
    assert "HTTP infer request (avg)" in out.stdout and "GRPC infer request (avg)" in out.stdout
    assert out.stdout.count("Summary for add_sub (1): trace count = 4") == 2, out.stdout
    assert "\t\t\tInfer (avg):" in out.stdout
    assert server.stop() == 0
    json.loads(path.read_text())  # still one whole array after the exit


def test_children_of_ensembles_and_bls(serve: Callable[..., Any], tmp_path: Path) -> None:
    path = tmp_path / "trace.json"
    server = serve(
        f"--trace-config=triton,file={path}", "--trace-config=level=TIMESTAMPS", "--trace-config=rate=1"
    )
    http = httpclient.InferenceServerClient(server.url)
    http.infer("ensemble_add_sub", _inputs(httpclient), request_id="ens")
    http.infer("bls_add_sub", _inputs(httpclient), request_id="bls")
    traces = _by_id(_read(path, 2))
    headers = {t["header"]["id"]: t["header"] for t in traces.values()}
    ens = next(h for h in headers.values() if h["model_name"] == "ensemble_add_sub")
    steps = sorted(h["model_name"] for h in headers.values() if h.get("parent_id") == ens["id"])
    assert steps == ["add_sub", "mul_fp32"]
    assert all(h.get("request_id") == "ens" for h in headers.values() if h.get("parent_id") == ens["id"])
    assert "COMPUTE_START" not in traces[ens["id"]]["ts"]  # an ensemble computes nothing itself
    bls = next(h for h in headers.values() if h["model_name"] == "bls_add_sub")
    # the call made with request.trace() is a child; the one made without it is not traced
    assert [h["model_name"] for h in headers.values() if h.get("parent_id") == bls["id"]] == ["add_sub"]
    assert len(headers) == 5
    for t in traces.values():
        ts = t["ts"]
        assert ts["REQUEST_START"] <= ts["QUEUE_START"] <= ts["REQUEST_END"]
    child = next(t for t in traces.values() if t["header"].get("parent_id") == bls["id"])
    parent_ts = traces[bls["id"]]["ts"]
    assert (
        parent_ts["COMPUTE_START"]
        <= child["ts"]["REQUEST_START"]
        <= child["ts"]["REQUEST_END"]
        <= parent_ts["COMPUTE_END"]
    )


def test_tensors_level(serve: Callable[..., Any], tmp_path: Path) -> None:
    path = tmp_path / "trace.json"
    server = serve(
        f"--trace-config=triton,file={path}",
        "--trace-config=level=TIMESTAMPS",
        "--trace-config=level=TENSORS",
        "--trace-config=rate=1",
    )
    http = httpclient.InferenceServerClient(server.url)
    http.infer("add_sub", _inputs(httpclient))
    t = httpclient.InferInput("INPUT0", [2], "BYTES")
    t.set_data_from_numpy(np.array([b"ab", b'c"d'], dtype=np.object_))
    http.infer("identity_bytes", [t])
    traces = _by_id(_read(path, 2))
    tensors = {
        (t["header"]["model_name"], r["activity"], r["tensor"]["name"]): r["tensor"]
        for t in traces.values()
        for r in t["tensors"]
    }
    assert tensors[("add_sub", "TENSOR_QUEUE_INPUT", "INPUT0")] == {
        "name": "INPUT0",
        "data": ",".join(str(i) for i in range(16)),
        "shape": "1,16",
        "dtype": "FP32",
    }
    assert tensors[("add_sub", "TENSOR_BACKEND_OUTPUT", "OUTPUT1")]["data"] == ",".join(
        str(i - 1) for i in range(16)
    )
    assert tensors[("identity_bytes", "TENSOR_BACKEND_OUTPUT", "OUTPUT0")]["data"] == '"ab","c"d"'


def test_a_server_stopped_with_rows_pending_writes_them_all(
    serve: Callable[..., Any], tmp_path: Path
) -> None:
    """Traces wait for the writer's flush as records of integers (record.RowTrace): a server stopped
    right after its answers still writes every one, each complete, and the file is one array."""
    path = tmp_path / "trace.json"
    server = serve(
        f"--trace-config=triton,file={path}", "--trace-config=level=TIMESTAMPS", "--trace-config=rate=1"
    )
    http = httpclient.InferenceServerClient(server.url)
    for i in range(30):
        http.infer("add_sub", _inputs(httpclient), request_id="r" if i == 7 else "")
    http.infer("ensemble_add_sub", _inputs(httpclient))
    assert server.stop() == 0  # (at once: the last flush has not come yet)
    traces = _by_id(json.loads(path.read_text()))
    roots = [t for t in traces.values() if "parent_id" not in t["header"]]
    assert len(roots) == 31  # 30 add_sub and the ensemble (its steps are its children)
    [ensemble] = [t for t in roots if t["header"]["model_name"] == "ensemble_add_sub"]
    children = [t for t in traces.values() if t["header"].get("parent_id") == ensemble["header"]["id"]]
    assert children and all(set(HTTP_ORDER[2:9]) <= set(t["ts"]) for t in children)
    plain = [t for t in roots if t["header"]["model_name"] == "add_sub"]
    assert all(set(HTTP_ORDER) <= set(t["ts"]) for t in plain)
    assert [t["header"].get("request_id") for t in plain].count("r") == 1


def test_a_trace_file_that_cannot_be_written_fails_the_settings_call(
    serve: Callable[..., Any], tmp_path: Path
) -> None:
    path = tmp_path / "missing" / "trace.json"
    server = serve(f"--trace-config=triton,file={path}", "--trace-config=rate=1")
    http = httpclient.InferenceServerClient(server.url)
    with pytest.raises(InferenceServerException) as e:
        http.update_trace_settings(settings={"trace_level": ["TIMESTAMPS"]})
    assert e.value.status() == "400"
    assert f"trace file '{path}' can not be written" in e.value.message()
    assert http.get_trace_settings()["trace_level"] == ["OFF"]
    assert http.infer("add_sub", _inputs(httpclient)).as_numpy("OUTPUT0") is not None
    # at start, with tracing on, the server refuses to start
    p = subprocess.run(
        [
            *(sys.executable, "-m", "inferd", "serve", "--model-repository", str(tmp_path)),
            *(f"--trace-config=triton,file={path}", "--trace-config=level=TIMESTAMPS"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode != 0 and "can not be written" in p.stderr


@pytest.mark.skipif(not HAVE_OTEL, reason="the OpenTelemetry SDK is not installed (inferd[otel])")
def test_opentelemetry_spans_join_the_callers_trace(serve: Callable[..., Any]) -> None:
    from otlp_receiver import OtlpReceiver

    receiver = OtlpReceiver().start()
    try:
        server = serve(
            "--trace-config=mode=opentelemetry",
            "--trace-config=level=TIMESTAMPS",
            "--trace-config=rate=1",
            f"--trace-config=opentelemetry,url=127.0.0.1:{receiver.port}/v1/traces",
            "--trace-config=opentelemetry,resource=test.key=test.value",
            "--trace-config=opentelemetry,bsp_schedule_delay=50",
        )
        http = httpclient.InferenceServerClient(server.url)
        grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
        caller = "0af7651916cd43dd8448eb211c80319c"
        http.infer(
            "add_sub",
            _inputs(httpclient),
            request_id="joined",
            headers={"traceparent": f"00-{caller}-b7ad6b7169203331-01"},
        )
        gcaller = "1af7651916cd43dd8448eb211c80319c"
        grpc.infer(
            "add_sub", _inputs(grpcclient), headers={"traceparent": f"00-{gcaller}-c7ad6b7169203331-01"}
        )
        http.infer("ensemble_add_sub", _inputs(httpclient), request_id="ens")
        http.infer("bls_add_sub", _inputs(httpclient), request_id="bls")
        spans = receiver.wait_for(lambda s: len(s) >= 3 + 3 + 5 + 5)
    finally:
        receiver.stop()
    by_trace: dict[str, list[Any]] = {}
    for s in spans:
        by_trace.setdefault(s.trace_id, []).append(s)
    # the HTTP request's spans are in the caller's trace, under the caller's span
    joined = {s.name: s for s in by_trace[caller]}
    assert set(joined) == {"InferRequest", "add_sub", "compute"}
    assert joined["InferRequest"].parent_span_id == "b7ad6b7169203331"
    assert joined["add_sub"].parent_span_id == joined["InferRequest"].span_id
    assert joined["compute"].parent_span_id == joined["add_sub"].span_id
    assert joined["add_sub"].attributes == {
        "triton.model_name": "add_sub",
        "triton.model_version": 1,
        "triton.trace_id": joined["add_sub"].attributes["triton.trace_id"],
        "triton.trace_parent_id": 0,
        "triton.request_id": "joined",
    }
    assert [e[0] for e in joined["add_sub"].events] == ["REQUEST_START", "QUEUE_START", "REQUEST_END"]
    assert [e[0] for e in joined["compute"].events] == [
        "COMPUTE_START",
        "COMPUTE_INPUT_END",
        "COMPUTE_OUTPUT_START",
        "COMPUTE_END",
    ]
    front = [e[0] for e in joined["InferRequest"].events]
    assert front[:2] == ["HTTP_RECV_START", "HTTP_RECV_END"] and front[-2:] == [
        "HTTP_SEND_START",
        "HTTP_SEND_END",
    ]
    assert all(s.kind == 2 and s.scope == "triton-server" for s in spans)  # SERVER
    assert joined["InferRequest"].resource["service.name"] == "triton-inference-server"
    assert joined["InferRequest"].resource["test.key"] == "test.value"
    for s in joined.values():
        assert s.start_ns <= s.end_ns
    assert {s.name for s in by_trace[gcaller]} == {"InferRequest", "add_sub", "compute"}
    assert {s.name: s for s in by_trace[gcaller]}["InferRequest"].parent_span_id == "c7ad6b7169203331"
    # an ensemble's steps and a BLS call are children of their caller's model span
    for top, child_names in (("ensemble_add_sub", ["add_sub", "mul_fp32"]), ("bls_add_sub", ["add_sub"])):
        trace = next(t for t in by_trace.values() if any(s.name == top for s in t))
        model = next(s for s in trace if s.name == top)
        children = sorted(s.name for s in trace if s.parent_span_id == model.span_id and s.name != "compute")
        assert children == child_names, trace
        assert model.parent_span_id == next(s for s in trace if s.name == "InferRequest").span_id
