"""A forked child's BLS link (backends/python/forked.py): when the server it was forked from goes
away, what the child still waits for fails with UNAVAILABLE instead of waiting forever."""

from __future__ import annotations

import socket
import threading
from typing import Any

import numpy as np

from inferd.backends.process.ipc import Channel
from inferd.backends.process.worker import Worker
from inferd.backends.python import forked
from inferd.core.request import InferRequest
from inferd.core.tensor import Tensor
from inferd.errors import ErrorCode

WAIT_S = 30.0


def test_a_childs_bls_requests_fail_when_the_server_goes_away() -> None:
    child_end, server_end = socket.socketpair()
    server_end.settimeout(WAIT_S)
    worker = Worker(Channel(child_end))
    server = Channel(server_end)
    got: list[tuple[Any, bool]] = []
    done = threading.Event()

    def callback(response: Any, final: bool) -> None:
        got.append((response, final))
        if final:
            done.set()

    request = InferRequest("callee", {"X": Tensor.from_array("X", np.ones(2, np.float32))})
    worker.infer_async(request, callback, None)
    assert server.recv()[0] == "bls"  # the server has it, and then ends without answering
    reader = threading.Thread(target=forked._read_answers, args=(worker,), daemon=True)
    reader.start()
    server.close()
    assert done.wait(WAIT_S), "the child's BLS request still waits after the server went away"
    reader.join(WAIT_S)
    ((response, final),) = got
    assert final and response.error is not None
    assert response.error.code is ErrorCode.UNAVAILABLE
    assert "has gone away" in response.error.message
    worker.channel.close()
