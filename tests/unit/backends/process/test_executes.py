"""A process instance's executes (executes.py): sent in the order the worker reads them, adopted by
the pool's execute of the same requests, and split at a worker's death into the one it ran and those
it never began (whose requests are not failed)."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator

import numpy as np
import pytest

from inferd.backends.process.executes import Executes, Pending
from inferd.backends.process.ipc import Channel, ShmNames
from inferd.core.request import InferRequest
from inferd.core.tensor import Tensor


@pytest.fixture
def pair() -> Iterator[tuple[Channel, Channel]]:
    a, b = socket.socketpair()
    yield Channel(a), Channel(b)
    a.close()
    b.close()


@pytest.fixture
def shm() -> Iterator[ShmNames]:
    names = ShmNames(f"testex{os.getpid()}")
    yield names
    names.cleanup()


def _request(n: int) -> InferRequest:
    return InferRequest("m", {"INPUT0": Tensor.from_array("INPUT0", np.array([n], np.float32))}, id=str(n))


def _cancel(chan: Channel, key: int, reason: str) -> None:
    raise AssertionError("no cancellation here")


def test_the_worker_reads_executes_in_the_order_of_their_numbers(
    pair: tuple[Channel, Channel], shm: ShmNames
) -> None:
    ex = Executes(threading.Lock())
    server, worker = pair
    with ex.lock:
        first = ex.register([_request(1)], server, _cancel)
        ahead = ex.register([_request(2)], server, _cancel)
    ex.send(ahead, shm)  # (the pool's thread may send the batch ahead before the current one)
    ex.send(first, shm)
    got = [worker.recv()[1], worker.recv()[1]]
    assert got == [ahead.exec_id, first.exec_id]
    assert ahead.seq < first.seq  # what the worker runs first is what went first


def test_a_death_fails_the_first_sent_and_gives_back_the_others(
    pair: tuple[Channel, Channel], shm: ShmNames
) -> None:
    ex = Executes(threading.Lock())
    server, _worker = pair
    with ex.lock:
        running = ex.register([_request(1)], server, _cancel)
        behind = ex.register([_request(2), _request(3)], server, _cancel)
        unsent = ex.register([_request(4)], server, _cancel)
    ex.send(running, shm)
    ex.send(behind, shm)
    with ex.lock:
        ran, not_run = ex.after_death()
    assert ran is running
    assert not_run == [behind, unsent]
    # only what ran still holds open requests (failed with the death); the rest run again
    assert sorted(ex.open) == running.keys


def test_nothing_sent_means_nothing_ran(pair: tuple[Channel, Channel]) -> None:
    ex = Executes(threading.Lock())
    with ex.lock:
        p = ex.register([_request(1)], pair[0], _cancel)
        ran, not_run = ex.after_death()
    assert ran is None and not_run == [p] and not ex.open


def test_the_pool_adopts_the_batch_sent_ahead_for_the_same_requests(pair: tuple[Channel, Channel]) -> None:
    ex = Executes(threading.Lock())
    batch = [_request(1), _request(2)]
    with ex.lock:
        p: Pending = ex.register(batch, pair[0], _cancel)
        ex.ahead.append(p)
    assert ex.adopt([_request(1), _request(2)]) is None  # equal, not the same objects
    assert ex.adopt(list(batch)) is p and not ex.ahead
    with ex.lock:
        assert ex.pop(p.exec_id, answered=True) is p
    assert not ex.open and ex.pop(p.exec_id, answered=True) is None
