"""The worker's side of a batch sent ahead (worker.py ``_next``): an exec read while another runs
waits its turn, and the thread that read it goes on reading the channel meanwhile."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from inferd.backends.process.ipc import Channel, ShmNames, pack_request
from inferd.backends.process.worker import Worker
from inferd.core.request import InferRequest
from inferd.core.response import InferResponse


@pytest.fixture
def shm() -> Iterator[ShmNames]:
    names = ShmNames(f"test{os.getpid()}")
    yield names
    names.cleanup()


class _Waits:
    """Its first execute waits for its request's cancellation, which the server sends behind the
    next exec: it comes only if the thread that read that exec reads on."""

    last_timings = None

    def __init__(self) -> None:
        self.ran: list[str] = []

    def execute(self, requests: list[InferRequest]) -> list[InferResponse]:
        r = requests[0]
        self.ran.append(r.id)
        if r.id == "first":
            deadline = time.monotonic() + 10
            while not (r.stream is not None and r.stream.cancelled):  # (asking has the channel read)
                assert time.monotonic() < deadline, "the cancellation was never read"
                time.sleep(0.001)
        return [InferResponse(r.model_name, "1", r.id)]


def test_an_exec_read_during_an_execute_runs_next_while_the_channel_is_read(shm: ShmNames) -> None:
    a, b = socket.socketpair()
    server = Channel(a)
    worker = Worker(Channel(b))
    model = _Waits()
    worker.instance = model  # type: ignore[assignment]  # (what execute needs of an instance)
    threads = [threading.Thread(target=worker.serve, daemon=True) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        for key, name in ((1, "first"), (2, "second")):
            server.send(
                ("exec", key, [pack_request(key, InferRequest(model_name="m", inputs={}, id=name), shm)])
            )
        server.send(("cancel", 1, "the client went away"))
        ends = [server.recv(), server.recv()]
        assert [(m[0], m[1]) for m in ends] == [("done", 1), ("done", 2)], ends
        assert model.ran == ["first", "second"]
        server.send(("stop",))
    finally:
        for t in threads:
            t.join(10)
        server.close()
