"""The logging extension on a real server, with tritonclient over HTTP and gRPC, the reference's
answers and errors, and what the log then holds (a log file, JSON lines, verbose levels)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from waiting import wait_for_text

DEFAULTS = {
    "log_info": True,
    "log_warning": True,
    "log_error": True,
    "log_verbose_level": 0,
    "log_format": "default",
}


def test_settings_over_http_and_grpc(start_server: Callable[..., Any], tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    server = start_server(f"--log-file={log}")
    http = httpclient.InferenceServerClient(server.url)
    g = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    try:
        assert http.get_log_settings() == {"log_file": str(log), **DEFAULTS}
        changed = http.update_log_settings({"log_verbose_level": 2, "log_format": "json"})
        assert changed["log_verbose_level"] == 2 and changed["log_format"] == "json"
        # every request at verbose level 2, as one JSON object a line
        assert http.is_model_ready("identity_fp32")
        lines = wait_for_text(log, "HTTP request: GET /v2/models/identity_fp32/ready", 10).splitlines()
        doc = json.loads(next(line for line in lines if "identity_fp32/ready" in line))
        assert doc["level"] == "VERBOSE2" and doc["logger"] == "inferd.http"
        # a failed request, with its reason, at level 1
        r = server.infer("nope", {"inputs": []})
        assert r.status == 404
        wait_for_text(log, "Request for unknown model: 'nope' is not found", 10)
        grpc_settings = g.get_log_settings(as_json=True)["settings"]
        assert grpc_settings["log_verbose_level"] == {"uint32_param": 2}
        assert grpc_settings["log_format"] == {"string_param": "json"}
        back = g.update_log_settings({"log_verbose_level": 0, "log_format": "default"}, as_json=True)
        assert back["settings"]["log_verbose_level"] == {"uint32_param": 0}
        assert http.get_log_settings()["log_format"] == "default"
    finally:
        http.close()
        g.close()


@pytest.mark.parametrize(
    ("body", "status", "error"),
    [
        ({"log_file": "/tmp/x"}, 501, "log file location can not be updated through network protocol"),
        ({"log_info": "yes"}, 500, "attempt to access JSON non-boolean as boolean"),
        ({"log_verbose_level": -1}, 500, "attempt to access JSON non-unsigned-integer as unsigned-integer"),
        ({"log_format": "xml"}, 503, "invalid argument for --log_format, got: xml"),
    ],
)
def test_http_errors_are_the_references(server: Any, body: dict[str, Any], status: int, error: str) -> None:
    r = server.request("POST", "/v2/logging", body)
    assert (r.status, r.error) == (status, error)
    assert server.request("PUT", "/v2/logging").status == 405
    assert server.request("GET", "/v2/logging").json()["log_verbose_level"] == 0


@pytest.mark.parametrize(
    ("field", "kind", "value", "code", "error"),
    [
        (
            "log_file",
            "string_param",
            "x",
            "UNIMPLEMENTED",
            "log file location can not be updated through network protocol",
        ),
        ("log_info", "string_param", "yes", "INVALID_ARGUMENT", "expect boolean for 'log_info'"),
        ("log_verbose_level", "bool_param", True, "INVALID_ARGUMENT", "expect int32 for 'log_verbose_level'"),
        (
            "log_format",
            "string_param",
            "xml",
            "INVALID_ARGUMENT",
            "invalid argument for log_format, got: xml",
        ),
    ],
)
def test_grpc_errors_are_the_references(
    server: Any, field: str, kind: str, value: Any, code: str, error: str
) -> None:
    channel = grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}")
    try:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        request = service_pb2.LogSettingsRequest()
        setattr(request.settings[field], kind, value)
        with pytest.raises(grpc.RpcError) as info:
            stub.LogSettings(request, timeout=10)
        assert (info.value.code().name, info.value.details()) == (code, error)
    finally:
        channel.close()


FORGED_NAME = 'IN"\nE1127 17:00:00.000000 1 server.cc:1] "model add_sub was deleted"\x1b[31m'


def test_a_clients_text_cannot_forge_a_log_record(start_server: Callable[..., Any], tmp_path: Path) -> None:
    """Issue 29: an input name holding a newline and a whole record, refused at --log-verbose 1, was
    logged verbatim (the forged record became its own line). As the reference (escaping on unless
    TRITON_SERVER_ESCAPE_LOG_MESSAGES=0), every message is one JSON string on its own line."""
    log = tmp_path / "server.log"
    server = start_server(f"--log-file={log}", "--log-verbose=1")
    doc = {"inputs": [{"name": FORGED_NAME, "shape": [1], "datatype": "FP32", "data": [1]}]}
    r = server.infer("identity_fp32", doc)
    assert r.status == 400 and FORGED_NAME in r.error  # the client is told, as before
    lines = wait_for_text(log, "model add_sub was deleted", 10).splitlines()
    assert not [line for line in lines if line.startswith("E1127")]  # no forged record
    assert "\x1b" not in log.read_text()  # the ANSI sequence stays text (\u001b)
    forged = [line for line in lines if "model add_sub was deleted" in line]
    assert len(forged) == 1 and '\\"model add_sub was deleted\\"\\u001b[31m' in forged[0]
    message = json.loads(forged[0].split("] ", 1)[1])
    assert FORGED_NAME in message


def test_one_line_per_request_at_level_1(start_server: Callable[..., Any], tmp_path: Path) -> None:
    """--log-verbose 1: a line per request once answered, with its status, latency, model and id,
    over both protocols; a failed request's line has its failure's status."""
    import re

    import numpy as np

    log = tmp_path / "server.log"
    server = start_server(f"--log-file={log}", "--log-verbose=1")
    x = np.array([1, 2], dtype=np.float32)
    http = httpclient.InferenceServerClient(server.url)
    g = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    try:
        hi = httpclient.InferInput("INPUT0", [2], "FP32")
        hi.set_data_from_numpy(x)
        http.infer("identity_fp32", [hi], request_id="req-8")
        gi = grpcclient.InferInput("INPUT0", [2], "FP32")
        gi.set_data_from_numpy(x)
        g.infer("identity_fp32", [gi], request_id="g-1")
        assert server.infer("nope", {"inputs": []}).status == 404
        with pytest.raises(InferenceServerException):
            g.infer("nope", [gi], request_id="g-2")
        lines = wait_for_text(log, "model=nope id=g-2", 10).splitlines()
        text = "\n".join(lines)
        ms = r"\d+\.\d{3} ms"
        assert re.search(
            rf"HTTP request: POST /v2/models/identity_fp32/infer 200 {ms} model=identity_fp32 id=req-8\"$",
            text,
            re.M,
        )
        assert re.search(rf"gRPC request: ModelInfer OK {ms} model=identity_fp32 id=g-1\"$", text, re.M)
        assert re.search(rf"HTTP request: POST /v2/models/nope/infer 404 {ms} model=nope\"$", text, re.M)
        assert re.search(rf"gRPC request: ModelInfer [A-Z_]+ {ms} model=nope id=g-2\"$", text, re.M)
        assert not re.search(r"gRPC request: ModelInfer OK .* model=nope", text)
        # a line each, not one per level-2 arrival (those come at 2 only)
        assert text.count("id=req-8") == 1 and "request received" not in text
        # transport details (hpack decoding each header field) are for level 2, as the reference's
        assert "hpack" not in text
        # off again: no more lines
        http.update_log_settings({"log_verbose_level": 0})
        http.infer("identity_fp32", [hi], request_id="req-9")
        http.update_log_settings({"log_verbose_level": 1})
        http.infer("identity_fp32", [hi], request_id="req-10")
        text = wait_for_text(log, "id=req-10", 10)
        assert "id=req-9" not in text
    finally:
        http.close()
        g.close()


def test_json_format_writes_every_start_line_as_json_the_model_table_included(
    start_server: Callable[..., Any],
) -> None:
    """With --log-format json a log collector reads every line: the model table is one line a
    model version with its fields as keys, not the ASCII table."""
    server = start_server("--log-format=json", "--strict-model-config=false")
    server.assert_serving()
    lines = [line for line in server.log().splitlines() if line.strip()]
    docs = [json.loads(line) for line in lines]  # raises on any line that is not JSON
    table = {(d["model"], d["version"]): d["status"] for d in docs if "model" in d and "status" in d}
    assert table[("identity_fp32", "1")] == "READY"
    assert not any(line.startswith("+--") for line in lines)
    assert any("'--strict-model-config' has been deprecated" in d["message"] for d in docs)


def test_the_start_prints_the_references_options_table_and_at_verbose_1_every_option(
    start_server: Callable[..., Any],
) -> None:
    """As tritonserver 2.51 starts (recorded): its options table after the model table; at
    ``--log-verbose 1`` each model's auto-completed config; ``--strict-model-config`` warned about as
    deprecated. Beyond it, at verbose 1, every inferd option in effect, secrets withheld."""
    server = start_server(
        "--log-verbose=1", "--strict-model-config=false", "--http-restricted-api=statistics:k=s3cret"
    )
    server.assert_serving()
    log = server.log()
    assert (
        "Warning: '--strict-model-config' has been deprecated! Please use '--disable-auto-complete-config' instead."
        in log
    )
    rows = {
        cells[0]: cells[1]
        for line in log.splitlines()
        if line.startswith("| ") and len(cells := [c.strip() for c in line.strip("|").split("|")]) == 2
    }
    assert rows["server_version"] == "2.51.0" and rows["model_control_mode"] == "MODE_NONE"
    assert rows["server_extensions"].split() == server.request("GET", "/v2").json()["extensions"]
    assert rows["strict_readiness"] == "1" and rows["cache_enabled"] == "0"
    assert rows["--log-verbose"] == "1"
    assert rows["--http-restricted-api"] == "statistics:k=***" and "s3cret" not in log
    assert 'Server side auto-completed config: name: \\"identity_fp32\\"' in log
