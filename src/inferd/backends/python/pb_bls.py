"""The responses of a BLS request as a model consumes them: blocking, or awaited on its own loop.

The server hands every response to ``BlsStream.put`` on its loop; the model's thread takes them
with ``get`` (blocking) and an async model with ``aget`` (awaiting, so its loop runs other
executes meanwhile). ``ResponseIterator`` is what ``exec(decoupled=True)`` returns: each response
as it comes, then, when the last one only carried the final flag, an empty response, as the
reference's iterator does.

A model that lets go of the responses before the last (drops the iterator, or its ``async_exec``
is cancelled: ``asyncio.wait_for`` timed out) abandons the request: ``give_up`` cancels it on the
server (the callee sees ``is_cancelled()``, a queued request is not executed) and what still comes
is dropped, not held for nobody.
"""

from __future__ import annotations

import asyncio
import collections
import threading
from collections.abc import Callable
from typing import Any

from inferd.core.response import InferResponse

Item = tuple[InferResponse | None, bool]


class BlsStream:
    """Responses of one BLS request, put on the server's loop, taken from any thread or loop."""

    __slots__ = ("_cond", "_done", "_items", "_waiters", "abandon")

    def __init__(self) -> None:
        self._items: collections.deque[Item] = collections.deque()
        self._cond = threading.Condition(threading.Lock())
        self._done = False
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        #: cancels the request on the server (set by whoever submitted it; None: nothing to cancel)
        self.abandon: Callable[[], None] | None = None

    def put(self, response: InferResponse | None, final: bool) -> None:
        """The server's callback (on its loop)."""
        with self._cond:
            if self._done:
                return
            self._items.append((response, final))
            self._done = final
            self._cond.notify_all()
            waiters, self._waiters = self._waiters, []
        for loop, fut in waiters:
            loop.call_soon_threadsafe(_wake, fut)

    def get(self) -> Item:
        """The next response, waiting for it (a thread)."""
        with self._cond:
            while not self._items:
                self._cond.wait()
            return self._items.popleft()

    async def aget(self) -> Item:
        """The next response, awaiting it (a coroutine on a model's loop)."""
        while True:
            await self.wait()
            with self._cond:
                if self._items:
                    return self._items.popleft()

    async def wait(self) -> None:
        """Until a response is there to take (a coroutine on a model's loop)."""
        loop = asyncio.get_running_loop()
        with self._cond:
            if self._items:
                return
            fut: asyncio.Future[None] = loop.create_future()
            self._waiters.append((loop, fut))
        await fut

    def ready(self) -> bool:
        with self._cond:
            return bool(self._items)

    def give_up(self) -> None:
        """The model no longer wants the responses: cancel the request unless its last response
        came, and drop what came and what still comes. Called from finalizers too: the hook must
        not block (it hands the cancellation to the server's loop or to a queue)."""
        with self._cond:
            if self._done:
                return
            self._done = True
            self._items.clear()
            hook, self.abandon = self.abandon, None
        if hook is not None:
            hook()


def _wake(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class ResponseIterator:
    """The responses of a decoupled BLS request (``exec(decoupled=True)``), as they come.

    Iterating blocks until the next response; an async model may ``async for`` over it instead,
    which lets its loop run other executes meanwhile. Dropped before the last response, it
    abandons the request (``BlsStream.give_up``).
    """

    __slots__ = ("_convert", "_ended", "_idx", "_seen", "_stream")

    def __init__(self, stream: BlsStream, convert: Callable[[InferResponse | None], Any]) -> None:
        self._stream = stream
        self._convert = convert
        self._ended = False
        #: the responses so far: iterating again after the last one replays them, as the reference's
        self._seen: list[Any] = []
        #: once the stream ended, the next response to replay. As the reference's iterator, a new
        #: iteration starts from the first only when the last one was reached: one that broke off
        #: resumes where it stopped
        self._idx = 0

    def __iter__(self) -> ResponseIterator:
        self._rewind()
        return self

    def __next__(self) -> Any:
        if self._ended:
            return self._next_replayed(StopIteration)
        response, final = self._stream.get()
        return self._keep(self._convert(response), final)

    def __aiter__(self) -> ResponseIterator:
        self._rewind()
        return self

    async def __anext__(self) -> Any:
        if self._ended:
            return self._next_replayed(StopAsyncIteration)
        response, final = await self._stream.aget()
        return self._keep(self._convert(response), final)

    def _rewind(self) -> None:
        if self._ended and self._idx >= len(self._seen):
            self._idx = 0

    def _keep(self, converted: Any, final: bool) -> Any:
        self._seen.append(converted)
        self._ended = final
        self._idx = len(self._seen)
        return converted

    def _next_replayed(self, stop: type[Exception]) -> Any:
        if self._idx < len(self._seen):
            self._idx += 1
            return self._seen[self._idx - 1]
        raise stop

    def __del__(self) -> None:
        if not self._ended:
            self._stream.give_up()
