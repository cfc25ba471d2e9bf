"""BLS between a worker process and the server, each half alone over a socketpair: responses relayed
in order as they come, an abandoned request cancelled at the server and nothing more held or sent
for it on either side (its late responses dropped, their shared memory unlinked), a worker that
ends cancels what it had open."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from inferd.backends.base import LoadContext, ResponseCallback, ServerLinks
from inferd.backends.process.ipc import (
    INLINE_MAX,
    SHM_DIR,
    Channel,
    ShmNames,
    pack_request,
    pack_response,
    unpack_response,
)
from inferd.backends.process.relay import WORKER_ENDED, BlsRelay
from inferd.backends.process.worker import Worker
from inferd.core.request import InferRequest
from inferd.core.response import InferResponse, ResponseStream
from inferd.core.tensor import Tensor
from inferd.repository import ModelConfig

WAIT_S = 30.0
BIG = INLINE_MAX  # floats: four times the inline limit, so through shared memory


class FakeCore:
    """``infer_async`` as the core offers it: records each submission; the test answers."""

    def __init__(self, returns_cancel: bool) -> None:
        self.returns_cancel = returns_cancel
        self.submitted: list[tuple[InferRequest, ResponseCallback, str | None]] = []
        self.cancelled: list[str] = []
        self.loop = asyncio.new_event_loop()  # never run: the streams only record their cancel

    def infer_async(
        self, request: InferRequest, callback: ResponseCallback, decoupled_error: str | None
    ) -> Callable[[str], None] | None:
        self.submitted.append((request, callback, decoupled_error))
        if self.returns_cancel:
            return self.cancelled.append
        request.stream = ResponseStream(self.loop)  # as ServerCore.submit sets it
        return None


def _response(*values: float) -> InferResponse:
    return InferResponse("callee", "1", "", [Tensor.from_array("Y", np.array(values, np.float32))])


def _request() -> InferRequest:
    return InferRequest("callee", {"X": Tensor.from_array("X", np.ones(2, np.float32))})


@pytest.fixture
def pair() -> Iterator[tuple[Channel, Channel]]:
    a, b = socket.socketpair()
    b.settimeout(WAIT_S)
    left, right = Channel(a), Channel(b)
    yield left, right
    left.close()
    right.close()


@pytest.fixture
def shm() -> Iterator[ShmNames]:
    names = ShmNames(f"relay{os.getpid()}")
    yield names
    names.cleanup()


def _ours(shm: ShmNames) -> list[str]:
    return [n for n in os.listdir(SHM_DIR) if n.startswith(shm.prefix)]


def _relay(core: FakeCore, chan: Channel, shm: ShmNames, tmp_path: Path) -> BlsRelay:
    links = ServerLinks(infer_async=core.infer_async)
    ctx = LoadContext("caller", 1, tmp_path, tmp_path, ModelConfig(), None, links)
    return BlsRelay(ctx, chan, shm, lambda: pytest.fail("no thread pool without infer_blocking"), "caller_0")


@pytest.mark.parametrize("returns_cancel", [True, False])
def test_the_relay_streams_responses_then_drops_an_abandoned_request(
    pair: tuple[Channel, Channel], shm: ShmNames, tmp_path: Path, returns_cancel: bool
) -> None:
    server_end, worker_end = pair
    core = FakeCore(returns_cancel)
    relay = _relay(core, server_end, shm, tmp_path)
    worker_shm = ShmNames(f"relayw{os.getpid()}")
    relay.start(7, pack_request(0, _request(), worker_shm), "refused text")
    ((request, respond, refuse),) = core.submitted
    assert (request.model_name, refuse) == ("callee", "refused text")
    respond(_response(0), False)
    respond(_response(1), False)
    for want in ([0], [1]):  # in order, one message each, not final
        kind, bls_id, packed, final = worker_end.recv()
        assert (kind, bls_id, final) == ("bls_resp", 7, False)
        assert unpack_response(packed).outputs[0].array.tolist() == want
    assert relay.open_requests == 1

    relay.cancel(7, "gone")
    if returns_cancel:
        assert core.cancelled == ["gone"]
    else:
        assert request.stream is not None and request.stream.cancel_reason == "gone"
    respond(_response(*range(BIG)), False)  # after the cancel: neither packed nor sent
    respond(_response(*range(BIG)), True)  # the final flag goes back alone
    assert worker_end.recv() == ("bls_resp", 7, None, True)
    assert relay.open_requests == 0
    assert _ours(shm) == []
    relay.close()
    core.loop.close()


def test_a_worker_that_ends_cancels_its_open_requests(
    pair: tuple[Channel, Channel], shm: ShmNames, tmp_path: Path
) -> None:
    server_end, worker_end = pair
    core = FakeCore(returns_cancel=True)
    relay = _relay(core, server_end, shm, tmp_path)
    worker_shm = ShmNames(f"relayw{os.getpid()}")
    relay.start(1, pack_request(0, _request(), worker_shm), None)
    relay.start(2, pack_request(0, _request(), worker_shm), None)
    relay.close()
    assert core.cancelled == [WORKER_ENDED, WORKER_ENDED]
    assert relay.open_requests == 0
    for _, respond, _ in core.submitted:
        respond(_response(*range(BIG)), True)  # nothing is sent to a worker that ended
    relay.start(3, pack_request(0, _request(), worker_shm), None)  # nor started for it
    assert len(core.submitted) == 2
    assert _ours(shm) == [] and _ours(worker_shm) == []
    worker_end.sock.settimeout(0.0)
    with pytest.raises(BlockingIOError):
        worker_end.sock.recv(1)
    core.loop.close()


def test_the_worker_hands_responses_over_and_drops_them_once_abandoned(
    pair: tuple[Channel, Channel], shm: ShmNames
) -> None:
    worker_end, server_end = pair
    worker = Worker(worker_end)
    got: list[tuple[list[float] | None, bool]] = []

    def callback(response: InferResponse | None, final: bool) -> None:
        got.append((None if response is None else response.outputs[0].array.tolist(), final))

    abandon = worker.infer_async(_request(), callback, None)
    kind, bls_id, _packed, refuse = server_end.recv()
    assert (kind, refuse) == ("bls", None)

    server_end.send(("bls_resp", bls_id, pack_response(_response(5), shm), False))
    assert worker._reply(worker_end.recv())
    assert got == [([5.0], False)]

    cancels = threading.Thread(target=worker.run_cancels)
    cancels.start()
    abandon("dropped")  # as a finalizer calls it: only queued
    assert server_end.recv() == ("bls_cancel", bls_id, "dropped")
    late: Any = pack_response(_response(*range(BIG)), shm)
    assert _ours(shm)  # in shared memory, for the worker to map
    server_end.send(("bls_resp", bls_id, late, True))
    assert worker._reply(worker_end.recv())  # an answer, for nobody: dropped
    assert got == [([5.0], False)]
    assert _ours(shm) == []  # unlinked without being mapped
    worker.cancels.put(None)
    cancels.join(WAIT_S)
    worker.shm.cleanup()
