"""Python models as a Triton user meets them, replayed on inferd as the real Triton 2.51 answered:
tests/fixtures/reference_observed_python_user.json, recorded with
tests/fixtures/make_reference_python_user.py (whose ``run_step`` and ``model_lines`` ask inferd here),
with the models in threads and in worker processes.

- two models with a ``utils/`` package of the same name each run their own (however they import it);
- a thread a model starts in ``initialize`` creates custom metrics there, then counts, logs and sends
  BLS requests; the metrics reach ``/metrics``;
- ``pb_utils.Logger`` lines carry the message once, in each log format (and json, inferd's own);
- ``nv_inference_request_duration_us`` counts a decoupled request until its ``execute`` returned, not
  the whole stream, as the reference does.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import InferdProcess

from repo_paths import FIXTURES, load_script

RECORDER = FIXTURES / "make_reference_python_user.py"
RECORDED: dict[str, Any] = json.loads((FIXTURES / "reference_observed_python_user.json").read_text())
STEPS = {s["id"]: s for s in RECORDED["steps"]}
#: the least a whole stream takes: the models sleep 20 ms before each response. A decoupled request
#: counts until its execute returned: stream_inline's execute sends the whole stream (it counts at
#: least this), stream_thread's returns at once (a thread sends it: it counts far less)
GAP_US = 20_000

pytestmark = pytest.mark.timeout(300)


def _recorder() -> Any:
    return load_script(RECORDER, "make_reference_python_user")


def _copy(tmp_path: Path) -> Path:
    repo = tmp_path / "models"
    shutil.copytree(FIXTURES / "python_user_models", repo, ignore=shutil.ignore_patterns("__pycache__"))
    return repo


@pytest.fixture(params=["thread", "process"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def server(mode: str, tmp_path: Path) -> Iterator[InferdProcess]:
    args = (f"--backend-config=python,execution-mode={mode}",)
    proc = InferdProcess(_copy(tmp_path), tmp_path / "inferd.log", args).start()
    try:
        yield proc
    finally:
        proc.stop()


def _whole_stream(step: dict[str, Any], observed: dict[str, Any]) -> bool | None:
    """Whether the streams counted whole (True), their execute only (False), or neither."""
    per_stream = float(observed["nv_inference_request_duration_us"]) / step["streams"]
    least = step["responses"] * GAP_US
    return True if per_stream >= least else False if per_stream < least / 2 else None


def test_the_recording_covers_the_issue() -> None:
    a, b = STEPS["helpers_a"]["observed"], STEPS["helpers_b"]["observed"]
    assert set(a.values()) - {True} <= {"a", "sub-a", "beside-a", "a/sub-a", "thing-a"}
    assert set(b.values()) - {True} <= {"b", "sub-b", "beside-b", "b/sub-b", "thing-b"}
    assert STEPS["thread_metrics_first"]["observed"]["initialize"][0] == "metrics created"
    assert 'model.py:10] "py_add initialized"' in RECORDED["logs"]["default"][0]
    # the reference counts a decoupled request until its execute returned
    assert _whole_stream(STEPS["stream_inline"], STEPS["stream_inline"]["observed"]) is True
    assert _whole_stream(STEPS["stream_thread"], STEPS["stream_thread"]["observed"]) is False


def _lines_of(proc: InferdProcess, expected: int, file: str = "model.py") -> list[str]:
    """The model's log records once ``expected`` of them are there (workers write them themselves)."""
    deadline = time.monotonic() + 30
    while True:
        lines = _recorder().model_lines(proc.log(), file)
        if len(lines) >= expected or time.monotonic() > deadline:
            return lines
        time.sleep(0.05)


def test_models_match_the_reference(server: InferdProcess) -> None:
    recorder = _recorder()
    ports = (server.port, server.grpc_port, server.metrics_port)
    for step in RECORDED["steps"]:
        got = recorder.run_step(step, *ports)
        expected = step["observed"]
        if "streams" not in step:
            assert got == expected, step["id"]
            continue
        assert got["nv_inference_request_success"] == expected["nv_inference_request_success"]
        parts = sum(got[f"nv_inference_{p}_duration_us"] for p in ("queue", "compute_input", "compute_infer"))
        assert got["nv_inference_request_duration_us"] >= 0.9 * parts, got  # the execute's span, as there
        assert _whole_stream(step, got) is _whole_stream(step, expected), got
    want = RECORDED["logs"]["default"]
    assert sorted(_lines_of(server, len(want))) == sorted(want)


@pytest.mark.parametrize(
    ("run", "args", "env"),
    [
        ("iso8601_verbose", ("--log-format=ISO8601", "--log-verbose=1"), {}),
        ("unescaped", (), {"TRITON_SERVER_ESCAPE_LOG_MESSAGES": "0"}),
    ],
)
def test_logger_lines_match_the_reference(
    run: str, args: tuple[str, ...], env: dict[str, str], mode: str, tmp_path: Path
) -> None:
    explicit = ("--model-control-mode=explicit", "--load-model=logger_model")
    mode_arg = f"--backend-config=python,execution-mode={mode}"
    proc = InferdProcess(
        _copy(tmp_path), tmp_path / "inferd.log", (*args, *explicit, mode_arg), env=env
    ).start()
    try:
        assert proc.infer("logger_model", _body(5)).status == 200
        want = RECORDED["logs"][run]
        assert _lines_of(proc, len(want)) == want
    finally:
        proc.stop()


def test_logger_lines_in_json_carry_the_message_once(mode: str, tmp_path: Path) -> None:
    """``--log-format json`` (inferd's own): the message as the model gave it, in ``message``."""
    log_file = tmp_path / "json.log"
    args = (
        "--log-format=json",
        f"--log-file={log_file}",
        "--model-control-mode=explicit",
        "--load-model=logger_model",
        f"--backend-config=python,execution-mode={mode}",
    )
    proc = InferdProcess(_copy(tmp_path), tmp_path / "inferd.log", args).start()
    try:
        assert proc.infer("logger_model", _body(5)).status == 200
        deadline = time.monotonic() + 30
        while True:  # the model's lines are in the server's file, whichever process wrote them
            docs = [json.loads(line) for line in log_file.read_text().splitlines() if line.startswith("{")]
            messages = [d["message"] for d in docs if d["file"] == "model.py"]
            if len(messages) >= 6 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert messages == [
            "py_add initialized",
            'a "quoted" word and a \\ backslash',
            "first line\nsecond line",
            "through log() at INFO",
            "through log() at WARNING",
            "executing 1 request(s)",
        ]
    finally:
        proc.stop()


def _body(value: int) -> dict[str, Any]:
    return {"inputs": [{"name": "IN", "shape": [1], "datatype": "INT32", "data": [value]}]}
