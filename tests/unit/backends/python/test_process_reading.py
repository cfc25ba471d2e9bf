"""Who reads a worker's channel (``ipc.ReadRole``): the thread that waits for an answer reads it
itself, and a standby thread reads whatever nobody waits for. Each test makes the standby's periodic
take-over too slow to matter where it checks that a wake-up does the work: a missing wake-up would
leave the message unread and the test waiting."""

from __future__ import annotations

import queue
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from inferd import Server
from inferd.backends.process import instance as process
from inferd.backends.process import worker
from inferd.backends.process.ipc import Channel, ReadRole, ShmNames, pack_request, unpack_response
from inferd.core.request import InferRequest
from inferd.core.response import InferResponse
from inferd.core.tensor import Tensor

WAIT_S = 20.0
NEVER_S = 3600.0


# -- the role and the channel ----------------------------------------------------------------------
def test_one_thread_holds_the_role_and_the_standby_takes_it_when_due() -> None:
    role = ReadRole()
    assert role.take() and not role.take()
    due = threading.Event()
    took = threading.Event()

    def standby() -> None:
        if role.wait_turn(lambda now: due.is_set(), NEVER_S):
            took.set()

    t = threading.Thread(target=standby, daemon=True)
    t.start()
    role.release()  # free, but not due: the standby waits on
    assert not took.wait(0.2)
    due.set()
    role.wake()
    assert took.wait(WAIT_S) and role.held and not role.take()
    role.release()
    t.join(WAIT_S)

    role.close()
    assert not role.take()
    assert role.wait_turn(lambda now: True, NEVER_S) is False


def test_the_standby_checks_again_every_poll_interval() -> None:
    role = ReadRole()
    started = time.monotonic()
    assert role.wait_turn(lambda now: now - started >= 0.1, 0.02)
    assert role.held


def test_a_burst_of_messages_of_every_size_arrives_whole_and_in_order() -> None:
    a, b = socket.socketpair()
    left, right = Channel(a), Channel(b)
    sizes = [0, 1, 7, 8, 9, 1000, 65_536, 262_143, 262_144, 300_000, 3, 1_000_000, 5]
    messages = [("m", i, b"x" * n) for i, n in enumerate(sizes * 3)]
    writer = threading.Thread(target=lambda: [left.send(m) for m in messages])
    writer.start()
    assert [right.recv() for _ in messages] == messages
    writer.join(WAIT_S)
    left.close()
    right.close()


# -- the worker's side ---------------------------------------------------------------------------------
class FakeInstance:
    """Stands in for the model's instance in a worker: runs ``body`` for each batch."""

    def __init__(self, body: Any) -> None:
        self.body = body
        self.last_timings = (1, 2, 3)

    def execute(self, requests: list[InferRequest]) -> list[InferResponse]:
        value = self.body(requests)
        return [InferResponse("m", "1", outputs=[Tensor.from_array("Y", np.array([value], np.float32))])]


class Served:
    """A Worker served by its two reading threads (as its process's main does), and the server's
    end of its channel."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair()
        ours.settimeout(WAIT_S)
        self.worker = worker.Worker(Channel(theirs))
        self.server = Channel(ours)
        self.threads = [threading.Thread(target=self.worker.serve, daemon=True) for _ in range(2)]

    def start(self, body: Any) -> None:
        self.worker.instance = FakeInstance(body)  # type: ignore[assignment]  # a worker calls execute only
        self.worker.reading = True
        for t in self.threads:
            t.start()

    def stop(self) -> None:
        self.server.send(("stop",))
        for t in self.threads:
            t.join(WAIT_S)
            assert not t.is_alive()  # whichever read "stop", both return
        self.server.close()
        self.worker.channel.close()
        self.worker.shm.cleanup()


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> Iterator[Served]:
    monkeypatch.setattr(worker, "TAKE_OVER_S", NEVER_S)
    s = Served()
    yield s
    s.stop()


def _exec(server: Channel, key: int = 1) -> None:
    request = InferRequest("m", {"X": Tensor.from_array("X", np.ones(2, np.float32))})
    server.send(("exec", 9, [pack_request(key, request, ShmNames("unused"))]))


def _done(server: Channel) -> float:
    kind, exec_id, packed, timings, failed = server.recv()
    assert (kind, exec_id, timings, failed) == ("done", 9, (1, 2, 3), ())
    return float(unpack_response(packed[0]).outputs[0].array[0])


def test_a_cancellation_is_read_while_the_model_polls_for_it(served: Served) -> None:
    def body(requests: list[InferRequest]) -> float:
        stream = requests[0].stream
        assert stream is not None
        deadline = time.monotonic() + WAIT_S
        while not stream.cancelled and time.monotonic() < deadline:
            time.sleep(0.005)
        return 1.0 if stream.cancelled else 0.0

    served.start(body)
    _exec(served.server, key=4)
    served.server.send(("cancel", 4, "the client left"))
    assert _done(served.server) == 1.0


def test_what_the_model_asks_of_the_server_during_an_execute_is_answered(served: Served) -> None:
    w, server = served.worker, served.server
    served.start(lambda requests: 1.0 if w.call("model_ready", "other", "") else 0.0)
    _exec(server)
    kind, call_id, name, args = server.recv()
    assert (kind, name, args) == ("call", "model_ready", ("other", ""))
    server.send(("call_resp", call_id, ("ok", True)))
    assert _done(server) == 1.0


def test_a_long_execute_has_the_other_thread_answer_readiness_checks(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(worker, "TAKE_OVER_S", 0.05)
    release = threading.Event()
    served.start(lambda requests: 1.0 if release.wait(WAIT_S) else 0.0)
    server = served.server
    _exec(server)
    server.send(("is_ready", 5))
    assert server.recv() == ("is_ready_resp", 5, ("ok", True))  # while the execute still runs
    release.set()
    assert _done(server) == 1.0
    _exec(server)  # and executes go on, on whichever thread reads them
    assert _done(server) == 1.0


# -- the server's side ----------------------------------------------------------------------------------
REPEAT = """
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def is_ready(self):
        return True

    def execute(self, requests):
        for r in requests:
            n = int(pb_utils.get_input_tensor_by_name(r, "N").as_numpy()[0])
            sender = r.get_response_sender()

            def send(sender=sender, n=n):
                time.sleep(0.05)  # after the execute ended
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
parameters [ { key: "execution_mode" value: { string_value: "process" } } ]
"""


def test_responses_and_answers_after_an_execute_are_read_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(process, "IDLE_READ_S", NEVER_S)  # only a wake-up has the reader thread read
    repo = tmp_path / "repo"
    (repo / "repeat" / "1").mkdir(parents=True)
    (repo / "repeat" / "config.pbtxt").write_text(REPEAT_CONFIG)
    (repo / "repeat" / "1" / "model.py").write_text(REPEAT)
    with Server(repo, grpc_port=0) as s:
        assert s.grpc_port is not None
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{s.grpc_port}")
        results: queue.Queue[Any] = queue.Queue()
        client.start_stream(callback=lambda result, error: results.put((result, error)))
        try:
            for n in (3, 2):
                inp = grpcclient.InferInput("N", [1], "INT32").set_data_from_numpy(np.array([n], np.int32))
                client.async_stream_infer("repeat", [inp], enable_empty_final_response=True)
                got = []
                while True:
                    result, error = results.get(timeout=WAIT_S)
                    assert error is None
                    if result.get_response().parameters["triton_final_response"].bool_param:
                        break
                    got.append(int(result.as_numpy("OUT")[0]))
                assert got == list(range(n))
        finally:
            client.stop_stream()
            client.close()
        started = time.monotonic()
        assert s.model_ready("repeat")  # the model's is_ready(), answered across the channel
        assert time.monotonic() - started < WAIT_S


CHATTY = """
import threading

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.family = pb_utils.MetricFamily(
            name="chatter", description="calls from a thread of the model", kind=pb_utils.MetricFamily.COUNTER
        )
        self.counter = self.family.Metric(labels={"who": "chatty"})

    def execute(self, requests):
        def chat():  # outside any execute: each call waits for the server's answer
            for _ in range(10):
                self.counter.increment(1)

        threading.Thread(target=chat).start()
        return [pb_utils.InferenceResponse([pb_utils.Tensor("Y", np.zeros(1, np.float32))]) for _ in requests]
"""
CHATTY_CONFIG = """
name: "chatty"
backend: "python"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]
parameters [ { key: "execution_mode" value: { string_value: "process" } } ]
"""


def test_once_it_reads_the_reader_thread_reads_on_without_pausing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import urllib.request

    monkeypatch.setattr(process, "IDLE_READ_S", 1.0)  # the first call waits up to this: not each call
    repo = tmp_path / "repo"
    (repo / "chatty" / "1").mkdir(parents=True)
    (repo / "chatty" / "config.pbtxt").write_text(CHATTY_CONFIG)
    (repo / "chatty" / "1" / "model.py").write_text(CHATTY)
    with Server(repo, metrics_port=0) as s:
        started = time.monotonic()
        s.infer("chatty", {"X": np.ones(1, np.float32)})
        url = f"http://127.0.0.1:{s.metrics_port}/metrics"
        deadline = started + WAIT_S
        # polls the server's registry over HTTP (nothing that reads the worker's channel), every 20 ms
        while 'chatter{who="chatty"} 10' not in urllib.request.urlopen(url, timeout=10).read().decode():
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert time.monotonic() - started < 5.0  # not a second per call
