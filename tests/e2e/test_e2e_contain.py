"""Containment by where a model runs, not by how its source spells it (issue 42), behind a real
``inferd serve``:

- four ways to end a process that ``execution_mode: auto`` cannot read in the source
  (``faulthandler._sigsegv()``, ``getattr(os, '_ex' + 'it')``, ``os.kill(os.getpid(), SIGKILL)``,
  ``importlib.import_module('ct' + 'ypes')``), each in ``execution_mode: process`` and each uploaded
  through the repository API: the server survives, that model's request fails UNAVAILABLE, the
  other model's client loses nothing, and the model serves again;
- a thread model that raises the recursion limit to 10**7 and recurses forever, and one that loops
  forever, after warm-up executes ran inline on the event loop: another model's requests are answered
  within a bound;
- an uploaded model runs in worker processes whatever its config asks (Python with ``execution_mode:
  thread``, ONNX Runtime), and one whose ``initialize`` hangs or balloons fails its load with the limit
  it hit, leaving no process, thread, shared memory or folder behind.
"""

from __future__ import annotations

import base64
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from conftest import InferdProcess

#: spelling -> the line that ends the process (none names ctypes or os._exit literally)
SPELLINGS = {
    "sigsegv": "faulthandler._sigsegv()",
    "getattr_exit": "getattr(os, '_ex' + 'it')(3)",
    "kill_self": "os.kill(os.getpid(), signal.SIGKILL)",
    "import_ctypes": "importlib.import_module('ct' + 'ypes').string_at(0)",
}
_ANSWER = """
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
            for r in requests
        ]
"""
# INPUT0 < 0: the model ends its process as the spelling says; else the identity
CRASHING = (
    """
import faulthandler
import importlib
import os
import signal

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for r in requests:
            if pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()[0] < 0:
                {crash}
"""
    + _ANSWER
)
# INPUT0 < 0: recursion without end, the limit raised first (the probe's case)
RECURSING = (
    """
import sys

import triton_python_backend_utils as pb_utils


def down(n):
    return down(n + 1) + 1


class TritonPythonModel:
    def execute(self, requests):
        for r in requests:
            if pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()[0] < 0:
                sys.setrecursionlimit(10**7)
                down(0)
"""
    + _ANSWER
)
# INPUT0 < 0: pure Python work that never ends
SPINNING = (
    """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for r in requests:
            if pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()[0] < 0:
                n = 0
                while True:
                    n += 1
"""
    + _ANSWER
)
HANGING_INIT = """
import time


class TritonPythonModel:
    def initialize(self, args):
        time.sleep(3600)

    def execute(self, requests):
        return []
"""
BALLOON_INIT = """
import numpy as np


class TritonPythonModel:
    def initialize(self, args):
        self.kept = np.ones(3 << 30, np.uint8)

    def execute(self, requests):
        return []
"""


def crashing(spelling: str) -> str:
    return CRASHING.replace("{crash}", SPELLINGS[spelling])


def upload_body(name: str, source: str, extra: dict[str, Any] | None = None) -> bytes:
    """A repository load request uploading ``source`` as model ``name``'s 1/model.py."""
    config = {
        "name": name,
        "backend": "python",
        "max_batch_size": 0,
        "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
        "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
        **(extra or {}),
    }
    params = {"config": json.dumps(config), "file:1/model.py": base64.b64encode(source.encode()).decode()}
    return json.dumps({"parameters": params}).encode()


#: how each spelling's process ends, as the error and the log say it
ENDS = {
    "sigsegv": "signal 11 (SIGSEGV)",
    "getattr_exit": "exit status 3",
    "kill_self": "signal 9 (SIGKILL)",
    "import_ctypes": "signal 11 (SIGSEGV)",
}
CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
{extra}
"""
IDENTITY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
            for r in requests
        ]
"""
# OUTPUT0 = the process id of whoever executes
PID_MODEL = """
import os

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", np.array([os.getpid()], np.float32))]) for r in requests]
"""
PROCESS = 'parameters { key: "execution_mode" value: { string_value: "process" } }'
THREAD = 'parameters { key: "execution_mode" value: { string_value: "thread" } }'


def _repo(path: Path, models: dict[str, tuple[str, str]]) -> Path:
    for name, (source, extra) in models.items():
        (path / name / "1").mkdir(parents=True)
        (path / name / "config.pbtxt").write_text(CONFIG.format(name=name, extra=extra))
        (path / name / "1" / "model.py").write_text(source)
    return path


def _infer(server: InferdProcess, model: str, value: float) -> tuple[int, str]:
    r = server.infer(
        model, {"inputs": [{"name": "INPUT0", "shape": [1], "datatype": "FP32", "data": [value]}]}
    )
    return r.status, r.body.decode()


def _upload(
    server: InferdProcess, name: str, source: str, extra: dict[str, Any] | None = None
) -> tuple[int, str]:
    r = server.request(
        "POST", f"/v2/repository/models/{name}/load", upload_body(name, source, extra), timeout=120
    )
    return r.status, r.body.decode()


class _Other:
    """A client inferring on 'other' one request at a time, each answer's status and latency kept."""

    def __init__(self, server: InferdProcess) -> None:
        self.client = httpclient.InferenceServerClient(server.url, network_timeout=60)
        self.latencies: list[float] = []
        self.failed: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)
        self._thread.start()

    def _run(self) -> None:
        x = httpclient.InferInput("INPUT0", [1], "FP32").set_data_from_numpy(np.array([1], np.float32))
        while not self._stop.is_set():
            t0 = time.monotonic()
            try:
                self.client.infer("other", [x])
            except Exception as e:
                self.failed.append(f"{type(e).__name__}: {e}")
            self.latencies.append(time.monotonic() - t0)

    def served(self, n: int) -> None:
        """Wait until ``n`` more requests were answered."""
        target = len(self.latencies) + n
        deadline = time.monotonic() + 60
        while len(self.latencies) < target and time.monotonic() < deadline and self._thread.is_alive():
            time.sleep(0.01)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)
        self.client.close()


# -- crashes by another spelling ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def explicit(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InferdProcess]:
    """A server with each spelling as a process-mode model, the others uploaded by the tests."""
    base = tmp_path_factory.mktemp("contain")
    models = {f"p_{s}": (crashing(s), PROCESS) for s in SPELLINGS}
    models["other"] = (IDENTITY, "")
    repo = _repo(base / "models", models)
    server = InferdProcess(
        repo, base / "inferd.log", ("--model-control-mode=explicit", "--load-model=*")
    ).start()
    try:
        yield server
    finally:
        code = server.stop()
        assert code == 0, server.log()[-4000:]


@pytest.mark.parametrize("spelling", list(SPELLINGS))
@pytest.mark.parametrize("where", ["process", "upload"])
def test_a_crash_by_any_spelling_fails_only_its_own_request(
    explicit: InferdProcess, spelling: str, where: str
) -> None:
    model = f"p_{spelling}"
    if where == "upload":
        model = f"u_{spelling}"
        status, body = _upload(explicit, model, crashing(spelling))
        assert status == 200, body
    other = _Other(explicit)
    try:
        other.served(20)
        status, body = _infer(explicit, model, -1.0)
        assert status == 503, body
        assert f"model '{model}' instance '{model}_0'" in body and ENDS[spelling] in body, body
        other.served(100)  # the other model's client goes on as if nothing happened
        assert _infer(explicit, model, 1.0)[0] == 200  # a new worker serves it
    finally:
        other.stop()
    assert explicit.proc is not None and explicit.proc.poll() is None
    assert not other.failed, other.failed[:3]
    assert f"exited unexpectedly ({ENDS[spelling]})" in explicit.log()


def test_an_uploaded_model_runs_in_a_worker_whatever_its_config_asks(explicit: InferdProcess) -> None:
    status, body = _upload(
        explicit, "uploaded_pid", PID_MODEL, {"parameters": {"execution_mode": {"string_value": "thread"}}}
    )
    assert status == 200, body
    status, body = _infer(explicit, "uploaded_pid", 0.0)
    assert status == 200, body
    pid = int(json.loads(body)["outputs"][0]["data"][0])
    assert explicit.proc is not None and pid != explicit.proc.pid
    log = explicit.log()
    assert "model 'uploaded_pid': its files were uploaded by a client, so it runs in worker processes" in log
    assert "execution_mode 'thread' is not honoured" in log


def test_an_uploaded_onnx_model_is_completed_and_run_in_workers(explicit: InferdProcess) -> None:
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    a = helper.make_tensor_value_info("A", TensorProto.FLOAT, ["N", 4])
    s = helper.make_tensor_value_info("S", TensorProto.FLOAT, ["N", 4])
    graph = helper.make_graph([helper.make_node("Add", ["A", "A"], ["S"])], "double", [a], [s])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    body = {
        "parameters": {
            # no tensors and no max_batch_size: the auto-complete reads them from the graph, in a worker
            "config": json.dumps(
                {"name": "up_onnx", "backend": "onnxruntime", "instance_group": [{"count": 1}]}
            ),
            "file:1/model.onnx": base64.b64encode(model.SerializeToString()).decode(),
        }
    }
    r = explicit.request("POST", "/v2/repository/models/up_onnx/load", body, timeout=120)
    assert r.status == 200, r.body
    config = explicit.request("GET", "/v2/models/up_onnx/config").json()
    assert [i["name"] for i in config["input"]] == ["A"] and config["max_batch_size"] == 4
    r = explicit.infer(
        "up_onnx", {"inputs": [{"name": "A", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}
    )
    assert r.status == 200, r.body
    assert r.json()["outputs"][0]["data"] == [2, 4, 6, 8]
    assert "model 'up_onnx' instance 'up_onnx_0_0' runs in process" in explicit.log()


# -- runaway executes in threads ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def threads(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InferdProcess]:
    base = tmp_path_factory.mktemp("runaway")
    repo = _repo(
        base / "models",
        {"recurse": (RECURSING, THREAD), "spin": (SPINNING, THREAD), "other": (IDENTITY, "")},
    )
    server = InferdProcess(repo, base / "inferd.log").start()
    try:
        yield server
    finally:
        code = server.stop()
        assert code == 0, server.log()[-4000:]


@pytest.mark.parametrize(
    ("model", "status", "says"),
    [
        ("recurse", 500, "RecursionError: maximum recursion depth exceeded"),
        ("spin", 503, "the execute ran longer than 1 s on the event loop"),
    ],
)
def test_a_runaway_thread_model_leaves_the_others_answered_within_a_bound(
    threads: InferdProcess, model: str, status: int, says: str
) -> None:
    for _ in range(10):  # short executes: the pool moves them onto the event loop
        assert _infer(threads, model, 1.0)[0] == 200
    other = _Other(threads)
    try:
        other.served(20)
        got, body = _infer(threads, model, -1.0)
        assert got == status and says in body, body
        other.served(50)
    finally:
        other.stop()
    assert not other.failed, other.failed[:3]
    assert max(other.latencies) < 3.0, max(other.latencies)  # the guard's 1 s, and a loaded machine
    assert _infer(threads, model, 1.0)[0] == 200  # the model serves on (the spinner in threads)
    if model == "recurse":
        assert "model 'recurse' asked for a recursion limit of 10000000" in threads.log()


# -- an uploaded model's load, held to its limits ----------------------------------------------------
def _threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def test_an_uploaded_load_past_its_limits_fails_and_leaves_nothing(tmp_path: Path) -> None:
    repo = _repo(tmp_path / "models", {"other": (IDENTITY, "")})
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    server = InferdProcess(
        repo,
        tmp_path / "inferd.log",
        (
            "--model-control-mode=explicit",
            "--load-model=other",
            "--model-load-timeout-secs=5",
            f"--backend-config=uploaded-memory-limit-bytes={500 << 20}",
        ),
        env={"TMPDIR": str(tmp)},
    ).start()
    assert server.proc is not None
    pid = server.proc.pid
    other = _Other(server)
    try:
        # a first upload and unload: the threads that live on once started (spawner, memory watch)
        assert _upload(server, "fine", IDENTITY)[0] == 200
        server.request("POST", "/v2/repository/models/fine/unload", {})
        other.served(20)
        threads_before = _threads(pid)
        t0 = time.monotonic()
        status, body = _upload(server, "hangs", HANGING_INIT)
        took = time.monotonic() - t0
        assert status == 400, body
        assert json.loads(body)["error"] == (
            "load failed for model 'hangs': version 1 is at UNAVAILABLE state: Unavailable: loading did not "
            "finish within 5 s (--model-load-timeout-secs);\n"
        )
        assert took < 5 + 10, took
        status, body = _upload(server, "balloon", BALLOON_INIT)
        assert status == 400, body
        assert "instance 'balloon_0' was killed: it used" in body, body
        assert "while it started, more than its uploaded-memory-limit-bytes of 500.0 MiB" in body, body
        other.served(20)
        assert _descendants(pid) == []  # no worker left: the "other" model runs in a thread
        assert list(tmp.iterdir()) == []  # no override folder left
        assert not [n for n in os.listdir("/dev/shm") if n.startswith(f"inferd-{pid}-")]
        assert _threads(pid) <= threads_before
    finally:
        other.stop()
        code = server.stop()
    assert not other.failed, other.failed[:3]
    assert code == 0, server.log()[-3000:]
