"""What the instance pool's tests share: fake instances, requests, a loop, waits on the pool's state."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from inferd.core.request import InferRequest
from inferd.core.response import InferResponse, ResponseStream
from inferd.scheduling.instances import InstancePool

T = TypeVar("T")
WAIT_S = 10  # generous: only a broken pool ever waits this long


class FakeInstance:
    """A BackendInstance that records its batches (request ids and thread) and answers each request."""

    uses_bls = False
    last_timings: tuple[int, int, int] | None = None  # the pool times the execute

    def __init__(
        self, fn: Callable[[list[InferRequest]], None] | None = None, inline_ok: bool = False
    ) -> None:
        self.fn = fn
        self.calls: list[tuple[list[str], int]] = []
        self.unloaded = False
        self.inline_ok = inline_ok

    def execute(self, requests: list[InferRequest]) -> list[InferResponse]:
        self.calls.append(([r.id for r in requests], threading.get_ident()))
        if self.fn is not None:
            self.fn(requests)
        return [InferResponse(r.model_name, "1", r.id) for r in requests]

    def unload(self) -> None:
        self.unloaded = True

    @property
    def batches(self) -> list[list[str]]:
        return [ids for ids, _ in self.calls]


def request(i: int | str, batch_size: int = 1) -> InferRequest:
    return InferRequest(model_name="m", inputs={}, id=str(i), batch_size=batch_size)


def run(fn: Callable[[asyncio.AbstractEventLoop], Awaitable[T]]) -> T:
    async def main() -> T:
        return await fn(asyncio.get_running_loop())

    return asyncio.run(main())


def submit(pool: InstancePool, loop: asyncio.AbstractEventLoop, *reqs: InferRequest) -> list[ResponseStream]:
    streams = []
    for r in reqs:
        r.stream = ResponseStream(loop)
        pool.enqueue(r)
        streams.append(r.stream)
    return streams


async def answers(streams: list[ResponseStream]) -> list[InferResponse]:
    return await asyncio.wait_for(asyncio.gather(*(s.first() for s in streams)), WAIT_S)


async def wait_event(event: threading.Event) -> None:
    assert await asyncio.to_thread(event.wait, WAIT_S), "the worker never got there"


class Gate:
    """Blocks the first execute until released, so that requests pile up behind it."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()

    def __call__(self, requests: list[InferRequest]) -> None:
        if not self.started.is_set():
            self.started.set()
            assert self.release.wait(WAIT_S)


async def until(pred: Callable[[], bool], timeout: float = WAIT_S) -> None:
    """Yield to the loop until ``pred()`` holds (a worker thread reached the state a test needs)."""
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "the pool never reached the awaited state"
        await asyncio.sleep(0)
