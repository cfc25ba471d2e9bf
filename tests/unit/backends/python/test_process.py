"""Process instances end to end in one server: the same answers as threads (small and large tensors,
BYTES, decoupled responses, BLS), faults contained (os._exit, a segfault, a failing or hanging
initialize), the instance back after a crash, and nothing left behind."""

from __future__ import annotations

import os
import queue
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from inferd import Server
from inferd.backends.process.ipc import SHM_DIR
from inferd.errors import InferdError, UnavailableError
from waiting import wait_until

WORKER = """
import ctypes
import os
import sys

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.argv = list(sys.argv)

    def execute(self, requests):
        out = []
        for r in requests:
            mode = int(pb_utils.get_input_tensor_by_name(r, "MODE").as_numpy()[0])
            if mode == 1:
                os._exit(3)
            if mode == 2:
                ctypes.string_at(0)  # a segfault
            x = pb_utils.get_input_tensor_by_name(r, "X").as_numpy()
            if mode == 3:  # BLS: the same tensor through the echo model
                bls = pb_utils.InferenceRequest(
                    model_name="echo", requested_output_names=["Y"], inputs=[pb_utils.Tensor("X", x)]
                ).exec()
                if bls.has_error():
                    raise pb_utils.TritonModelException(bls.error().message())
                x = pb_utils.get_output_tensor_by_name(bls, "Y").as_numpy()
            out.append(
                pb_utils.InferenceResponse(
                    [
                        pb_utils.Tensor("Y", x),
                        pb_utils.Tensor("PID", np.array([os.getpid()], np.int64)),
                        pb_utils.Tensor("ARGC", np.array([len(self.argv)], np.int32)),
                    ]
                )
            )
        return out
"""
WORKER_CONFIG = """
name: "worker"
backend: "python"
max_batch_size: 0
input [ { name: "MODE" data_type: TYPE_INT32 dims: [ 1 ] }, { name: "X" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [
  { name: "Y" data_type: TYPE_FP32 dims: [ -1 ] },
  { name: "PID" data_type: TYPE_INT64 dims: [ 1 ] },
  { name: "ARGC" data_type: TYPE_INT32 dims: [ 1 ] }
]
instance_group [ { count: 2 kind: KIND_CPU } ]
"""
ECHO = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy())])
            for r in requests
        ]
"""
ECHO_CONFIG = """
name: "echo"
backend: "python"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ -1 ] } ]
parameters [ { key: "execution_mode" value: { string_value: "thread" } } ]
"""
REPEAT = """
import threading

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for r in requests:
            n = int(pb_utils.get_input_tensor_by_name(r, "N").as_numpy()[0])
            sender = r.get_response_sender()

            def send(sender=sender, n=n):
                for i in range(n):
                    sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([i], np.int32))]))
                sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

            threading.Thread(target=send).start()
        return None
"""
REPEAT_CONFIG = """
name: "repeat"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "N" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""
FAILS = """
class TritonPythonModel:
    def initialize(self, args):
        raise ValueError("cannot start here")

    def execute(self, requests):
        return []
"""
HANGS = """
import time


class TritonPythonModel:
    def initialize(self, args):
        time.sleep(3600)

    def execute(self, requests):
        return []
"""
PLAIN_CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "X" data_type: TYPE_FP32 dims: [ -1 ] }} ]
output [ {{ name: "Y" data_type: TYPE_FP32 dims: [ -1 ] }} ]
"""


def _model(repo: Path, name: str, config: str, source: str) -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(config)
    (repo / name / "1" / "model.py").write_text(source)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    repo = tmp_path_factory.mktemp("process") / "repo"
    _model(repo, "worker", WORKER_CONFIG, WORKER)
    _model(repo, "echo", ECHO_CONFIG, ECHO)
    _model(repo, "repeat", REPEAT_CONFIG, REPEAT)
    _model(repo, "fails", PLAIN_CONFIG.format(name="fails"), FAILS)
    _model(repo, "hangs", PLAIN_CONFIG.format(name="hangs"), HANGS)
    with Server(
        repo,
        grpc_port=0,
        backend_config=["python,execution-mode=process"],
        model_load_timeout_secs=20,  # 'hangs' waits it out; the others start slower on a busy machine
    ) as s:
        yield s


def _infer(server: Server, mode: int, x: np.ndarray[Any, Any]) -> dict[str, np.ndarray[Any, Any]]:
    return server.infer("worker", {"MODE": np.array([mode], np.int32), "X": x})


def _pids() -> set[int]:
    """This process's worker children (other tests and servers on the machine start workers too)."""
    out = set()
    me = os.getpid()
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"inferd.backends.process.worker" not in f.read():
                    continue
            with open(f"/proc/{pid}/stat", "rb") as f:
                ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == me:
            out.add(int(pid))
    return out


def test_answers_come_from_worker_processes(server: Server) -> None:
    small = _infer(server, 0, np.arange(4, dtype=np.float32))
    assert small["Y"].tolist() == [0, 1, 2, 3]
    assert int(small["PID"][0]) != os.getpid() and int(small["PID"][0]) in _pids()
    assert small["ARGC"].tolist() == [0]  # a model sees no command line
    big = np.random.default_rng(0).random(1 << 18).astype(np.float32)  # 1 MiB: through shared memory
    np.testing.assert_array_equal(_infer(server, 0, big)["Y"], big)
    assert not [n for n in os.listdir(SHM_DIR) if n.startswith("inferd-")]  # nothing left behind


def test_bls_from_a_worker_reaches_the_server(server: Server) -> None:
    x = np.array([5, 6], np.float32)
    assert _infer(server, 3, x)["Y"].tolist() == [5, 6]


def test_decoupled_responses_from_a_worker_thread(server: Server) -> None:
    assert server.grpc_port is not None
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    results: queue.Queue[Any] = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        n = grpcclient.InferInput("N", [1], "INT32").set_data_from_numpy(np.array([3], np.int32))
        client.async_stream_infer("repeat", [n], enable_empty_final_response=True)
        got = []
        while True:
            result, error = results.get(timeout=20)
            assert error is None
            if result.get_response().parameters["triton_final_response"].bool_param:
                break
            got.append(int(result.as_numpy("OUT")[0]))
        assert got == [0, 1, 2]
    finally:
        client.stop_stream()
        client.close()


@pytest.mark.parametrize(("mode", "how"), [(1, "exit status 3"), (2, "SIGSEGV")])
def test_a_crash_fails_its_request_only_and_the_instance_comes_back(
    server: Server, mode: int, how: str
) -> None:
    events = server.runtime.core.worker_processes.events  # this server's
    exited = events[("worker", "1", "exited")]
    with pytest.raises(UnavailableError) as info:
        _infer(server, mode, np.ones(2, np.float32))
    assert how in info.value.message and "model 'worker' instance" in info.value.message
    assert events[("worker", "1", "exited")] == exited + 1
    deadline = time.monotonic() + 30  # the next requests run, on a new worker where one crashed
    answers: list[list[float]] = []
    while len(answers) < 4 and time.monotonic() < deadline:
        try:
            answers.append(_infer(server, 0, np.ones(2, np.float32))["Y"].tolist())
        except InferdError:  # a worker that could not start yet: the next execute tries again
            # not a synchronisation: a back-off between attempts of this deadline-bounded poll, which
            # ends with the first answers; its length only spares a restarting worker a flood of requests
            time.sleep(0.1)
    assert answers == [[1, 1]] * 4
    assert server.model_ready("worker")


def test_initialize_that_fails_or_hangs_in_a_worker(server: Server) -> None:
    index = {m["name"]: m for m in server.repository_index()}
    assert index["fails"]["state"] == "UNAVAILABLE"
    assert "ValueError: cannot start here" in index["fails"]["reason"]
    assert index["hangs"]["state"] == "UNAVAILABLE"
    assert "did not finish within 20 s" in index["hangs"]["reason"]
    assert server.model_ready("echo")


def test_stopping_the_server_stops_its_workers(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    _model(repo, "echo", ECHO_CONFIG.replace('"thread"', '"process"'), ECHO)
    before = _pids()
    with Server(repo) as s:
        assert s.infer("echo", {"X": np.ones(1, np.float32)})["Y"].tolist() == [1]
        mine = _pids() - before
        assert len(mine) == 1
    assert not (mine & _pids())


BUSY = """
import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            if {work!r} == "python":
                n = 0
                for i in range(200_000):  # about 10 ms of Python: the interpreter lock is held
                    n += i
            else:
                time.sleep(0.003)  # 3 ms that let go of the interpreter lock
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("PID", np.array([os.getpid()], np.int64))]))
        return out
"""
BUSY_CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "X" data_type: TYPE_FP32 dims: [ -1 ] }} ]
output [ {{ name: "PID" data_type: TYPE_INT64 dims: [ 1 ] }} ]
instance_group [ {{ count: 2 kind: KIND_CPU }} ]
"""


def test_auto_moves_gil_bound_models_to_processes_and_keeps_the_others(tmp_path: Path) -> None:
    import sys
    from concurrent.futures import ThreadPoolExecutor

    # as under inferd serve (cli.py sets 1 ms): with the default 5 ms the loop thread could not take a
    # second request while an execute holds the lock, and two executes would never run at once
    old = sys.getswitchinterval()
    sys.setswitchinterval(0.001)
    try:
        repo = tmp_path / "repo"
        _model(repo, "python_work", BUSY_CONFIG.format(name="python_work"), BUSY.format(work="python"))
        _model(repo, "sleeps", BUSY_CONFIG.format(name="sleeps"), BUSY.format(work="sleep"))
        with Server(repo) as s, ThreadPoolExecutor(2) as pool:

            def pids(model: str, n: int) -> set[int]:
                calls = [pool.submit(s.infer, model, {"X": np.ones(1, np.float32)}) for _ in range(n)]
                return {int(c.result()["PID"][0]) for c in calls}

            moved = wait_until(
                lambda: m if os.getpid() not in (m := pids("python_work", 20)) and len(m) >= 2 else None,
                "python_work to move to worker processes",
                60,
                interval=0,
            )
            assert len(moved) == 2  # two worker processes
            assert pids("python_work", 20) == moved  # and they stay
            for _ in range(10):
                assert pids("sleeps", 20) == {os.getpid()}  # lets go of the lock: stays in threads
    finally:
        sys.setswitchinterval(old)


METERED = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):  # created before the worker's read loop runs
        self.family = pb_utils.MetricFamily(
            name="requests_seen", description="requests this model saw", kind=pb_utils.MetricFamily.COUNTER
        )
        self.counter = self.family.Metric(labels={"who": "metered"})

    def execute(self, requests):
        out = []
        for r in requests:
            self.counter.increment(2)
            try:
                pb_utils.MetricFamily(name="requests_seen", description="other", kind=pb_utils.MetricFamily.GAUGE)
                refused = ""
            except Exception as e:  # the server's registry refuses it, across the channel
                refused = str(e)
            ready = pb_utils.is_model_ready("metered") and not pb_utils.is_model_ready("absent")
            text = np.array([f"{ready}|{self.counter.value()}|{refused}".encode()], dtype=np.object_)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", text)]))
        return out
"""
METERED_CONFIG = """
name: "metered"
backend: "python"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_STRING dims: [ 1 ] } ]
parameters: { key: "execution_mode" value: { string_value: "process" } }
"""


def test_a_worker_reaches_custom_metrics_and_model_readiness(tmp_path: Path) -> None:
    import urllib.request

    repo = tmp_path / "repo"
    _model(repo, "metered", METERED_CONFIG, METERED)
    with Server(repo, metrics_port=0) as s:
        for expected in (2, 4):
            (out,) = s.infer("metered", {"X": np.ones(1, np.float32)})["OUT"]
            ready, value, refused = out.decode().split("|")
            assert (ready, float(value)) == ("True", expected)
            assert "Family name already exists with different type" in refused
        url = f"http://127.0.0.1:{s.metrics_port}/metrics"
        text = urllib.request.urlopen(url, timeout=10).read().decode()
        assert 'requests_seen{who="metered"} 4' in text  # the server's registry holds them
        registry = s._runtime.custom_metrics
        assert registry.family_names() == ["requests_seen"]
    assert registry.family_names() == []  # released when the model's last process unloaded
