"""The trace extension against the real Triton 2.51's recorded answers (reference_observed_trace.json).

Each scenario starts inferd with the reference's ``--trace-config`` flags and replays its steps in
order: settings calls over HTTP and gRPC (every answer compared: status, content type and body; gRPC
status, details and settings), inference requests, and the trace files written (which files, how many
traces each). The flags the reference refuses at start must stop inferd with the same text.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as pbg

from repo_paths import FIXTURES, ROOT

DOC = json.loads((FIXTURES / "reference_observed_trace.json").read_text())
HAVE_OTEL = importlib.util.find_spec("opentelemetry.sdk") is not None
OTLP = 9  # nothing listens there


def _placeholders(text: str, folder: Path) -> str:
    return text.replace(str(folder), "{DIR}").replace(f"127.0.0.1:{OTLP}/", "127.0.0.1:{OTLP}/")


def _files(folder: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    for path in sorted(folder.glob("trace.json*")):
        try:
            doc = json.loads(path.read_text())
        except ValueError:
            out[path.name] = -1
            continue
        out[path.name] = len({r["id"] for r in doc})
    return out


def _infer(server: Any, step: dict[str, Any]) -> None:
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    for _ in range(step["count"]):
        if step["protocol"] == "http":
            hc = httpclient.InferenceServerClient(server.url)
            inputs = [httpclient.InferInput(n, [1, 16], "FP32") for n in ("INPUT0", "INPUT1")]
            for t in inputs:
                t.set_data_from_numpy(a)
            hc.infer(step["model"], inputs)
            hc.close()
        else:
            gc = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
            ginputs = [grpcclient.InferInput(n, [1, 16], "FP32") for n in ("INPUT0", "INPUT1")]
            for t in ginputs:
                t.set_data_from_numpy(a)
            gc.infer(step["model"], ginputs)
            gc.close()


def _grpc(server: Any, step: dict[str, Any]) -> dict[str, Any]:
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
        stub = pbg.GRPCInferenceServiceStub(channel)
        req = pb.TraceSettingRequest(model_name=step["model"])
        for k, vals in step["settings"].items():
            req.settings[k].value.extend(vals)
        try:
            r = stub.TraceSetting(req, timeout=30)
        except grpc.RpcError as e:
            return {"code": e.code().name, "details": e.details()}
        return {"code": "OK", "answer": {k: list(v.value) for k, v in sorted(r.settings.items())}}


@pytest.mark.parametrize("scenario", DOC["scenarios"], ids=lambda s: s["id"])
def test_trace_scenario_matches_the_reference(
    scenario: dict[str, Any], start_server: Any, tmp_path: Path
) -> None:
    if scenario["id"].startswith("otel") and not HAVE_OTEL:
        pytest.skip("the OpenTelemetry SDK is not installed (inferd[otel])")
    flags = [f.replace("{DIR}", str(tmp_path)).replace("{OTLP}", str(OTLP)) for f in scenario["flags"]]
    server = start_server(*flags)
    for i, step in enumerate(scenario["steps"]):
        where = f"step {i}: {json.dumps({k: step.get(k) for k in ('kind', 'method', 'path', 'model', 'settings')})}"
        if step["kind"] == "http":
            body = step["body"]
            r = server.request(step["method"], step["path"], None if body is None else body.encode())
            got = (r.status, r.content_type, _placeholders(r.body.decode(), tmp_path))
            if step["path"] == "/v2":  # the extension is listed (inferd lists only what it serves)
                assert "trace" in json.loads(got[2])["extensions"], where
                assert "trace" in json.loads(step["answer"])["extensions"]
                continue
            assert got == (step["status"], step["content_type"], step["answer"]), where
        elif step["kind"] == "grpc":
            got_grpc = json.loads(_placeholders(json.dumps(_grpc(server, step)), tmp_path))
            want = {k: step[k] for k in ("code", "details", "answer") if k in step}
            assert got_grpc == want, where
        elif step["kind"] == "infer":
            _infer(server, step)
        else:
            deadline = time.monotonic() + 10
            while _files(tmp_path) != step["files"] and time.monotonic() < deadline:
                time.sleep(0.02)
            assert _files(tmp_path) == step["files"], where


@pytest.mark.parametrize("flag", sorted(DOC["refused_flags"]))
def test_refused_trace_config_flags(flag: str, tmp_path: Path) -> None:
    cmd = [
        sys.executable,
        "-m",
        "inferd",
        "serve",
        "--model-repository",
        str(tmp_path),
        "--trace-config",
        flag,
    ]
    with contextlib.suppress(subprocess.TimeoutExpired):
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert p.returncode != 0
    assert DOC["refused_flags"][flag] in p.stderr
