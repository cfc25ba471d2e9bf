"""InferResponse and ResponseStream: every inference answers through a stream of responses."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from inferd.core.stream_flow import DROP, FLAG_ONLY, STALLED, StreamLimits, StreamWindow, stalled_error
from inferd.core.tensor import Tensor
from inferd.errors import InferdError


class StreamPath(Protocol):
    """What a stream calls of its request's response path: core/response_path.py's ResponsePath,
    which is built from responses and streams (so it imports this module, and this one names it
    by what it offers)."""

    first: Callable[[], None] | None
    ends: tuple[Callable[[ResponseStream], None], ...]
    posts: tuple[Callable[[InferResponse], None], ...]

    def post(self, response: InferResponse) -> InferResponse: ...

    def tracked(
        self, end: Callable[[ResponseStream], None] | None, post: Callable[[InferResponse], None] | None
    ) -> StreamPath: ...


@dataclass(slots=True)
class InferResponse:
    """A response: outputs in order, or an error."""

    model_name: str
    model_version: str
    id: str = ""
    outputs: list[Tensor] = field(default_factory=list)
    parameters: dict[str, Any] = field(default_factory=dict)
    error: InferdError | None = None


class ResponseStream:
    """Responses of one request, sent from any thread and consumed on the event loop.

    ``send`` is thread-safe; ``final=True`` closes the stream. Unary callers ``await first()``;
    streaming callers iterate with ``async for``. On the loop, each response passes the stages of
    its request's ``ResponsePath`` (core/response_path.py: the order, and who sets what) before the
    consumer gets it.

    A stream with a window (``limit``: the core gives one to a decoupled model's) bounds the bytes
    of responses sent and not yet taken (``core/stream_flow.py``): past it ``send`` waits in the
    sender's thread. A response is taken when ``async for`` yields it, or when a callback returns,
    unless the callback deferred it (``defer``): then when the consumer calls ``release``.
    """

    __slots__ = (
        "_callback",
        "_cancel_reason",
        "_done",
        "_items",
        "_loop",
        "_waiter",
        "_window",
        "hold",
        "on_cancel",
        "path",
    )

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._items: collections.deque[tuple[InferResponse | None, bool]] = collections.deque()
        self._waiter: asyncio.Future[None] | None = None
        self._done = False
        self._callback: Callable[[InferResponse | None, bool], None] | None = None
        self._cancel_reason: str | None = None
        #: the stages between ordering and the consumer (None: none, a stream outside the core)
        self.path: StreamPath | None = None
        #: called once when the request is cancelled (a worker process must be told)
        self.on_cancel: Callable[[str], None] | None = None
        #: preserve_ordering (scheduling/ordering.py): takes every response instead of ``deliver``,
        #: and hands each to ``pass_on`` in its turn
        self.hold: Callable[[InferResponse | None, bool], None] | None = None
        #: flow control (None: unbounded, as a unary request's one response needs)
        self._window: StreamWindow | None = None

    # -- flow control -----------------------------------------------------------------------
    def limit(self, limits: StreamLimits) -> None:
        """Bound what waits for the consumer (before the request is queued)."""
        self._window = StreamWindow(limits)

    def defer(self) -> int:
        """In a callback: the response handed over is taken later, when the consumer calls
        ``release`` with what this returns (0 without a window)."""
        w = self._window
        if w is None:
            return 0
        cost, w.current = w.current, 0
        return cost

    def release(self, cost: int) -> None:
        """A deferred response (``defer``) was taken."""
        w = self._window
        if w is not None:
            w.release(cost)

    def _stalled(self, response: InferResponse) -> None:
        """A send gave up waiting for a client that reads nothing: the request is cancelled, and the
        consumer gets the error after what it has not read yet."""
        w = self._window
        assert w is not None
        error = stalled_error(w)
        self._cancel(error.message)  # what waits stays counted: the client may still read it
        self.pass_on(
            InferResponse(response.model_name, response.model_version, response.id, error=error), False
        )

    # -- cancellation ----------------------------------------------------------------------
    def cancel(self, reason: str) -> None:
        """The client no longer wants the answers (it went away, or its deadline passed).

        The one way to cancel, from any front end: a queued request is then never executed, a
        running Python model sees ``is_cancelled()``, and further non-final responses are dropped;
        what waits for the consumer leaves the process's budget (``StreamWindow.drop``).
        """
        self._cancel(reason)
        if self._window is not None:
            self._window.drop()

    def _cancel(self, reason: str) -> None:
        if self._cancel_reason is None:
            self._cancel_reason = reason
            if self._window is not None:
                self._window.close()
            hook = self.on_cancel
            if hook is not None:
                self.on_cancel = None
                hook(reason)

    def cancel_on_close(self) -> None:
        """``cancel`` for a front end's connection-lost hook."""
        self.cancel("the client closed the connection")

    @property
    def cancelled(self) -> bool:
        return self._cancel_reason is not None

    @property
    def cancel_reason(self) -> str:
        """Why the request was cancelled ("" while it is not)."""
        return self._cancel_reason or ""

    def set_callback(self, callback: Callable[[InferResponse | None, bool], None]) -> None:
        """Have every response handed to ``callback`` on the loop instead of queued (no task needed)."""
        self._callback = callback
        w = self._window
        while self._items:
            response, final = self._items.popleft()
            if w is None:
                callback(response, final)
            else:
                self._call(callback, w, response, final, w.costs.popleft() if w.costs else 0)

    @staticmethod
    def _call(
        callback: Callable[[InferResponse | None, bool], None],
        w: StreamWindow,
        response: InferResponse | None,
        final: bool,
        cost: int,
    ) -> None:
        """``callback`` with a window: the response is taken when it returns, unless deferred."""
        w.current = cost
        callback(response, final)
        cost, w.current = w.current, 0
        w.release(cost)

    # -- producer side (any thread) --------------------------------------------------------
    def send(self, response: InferResponse | None, final: bool = False) -> None:
        """Deliver ``response`` (None: only the final flag) from any thread; with a window, wait
        while it is full (never on the loop's thread)."""
        w = self._window
        if w is None:
            self._loop.call_soon_threadsafe(self.deliver, response, final)
            return
        wait = asyncio._get_running_loop() is not self._loop
        cost = w.reserve(None if response is None else response.outputs, final, wait)
        if cost >= 0:
            self._loop.call_soon_threadsafe(self.deliver, response, final, cost)
        elif cost == STALLED and response is not None:
            self._loop.call_soon_threadsafe(self._stalled, response)
        elif cost == FLAG_ONLY:
            self._loop.call_soon_threadsafe(self.deliver, None, True, 0)

    def deliver(self, response: InferResponse | None, final: bool, cost: int = -1) -> None:
        """Deliver on the loop thread (the worker batches hand-offs and calls this directly);
        ``cost``: what ``send`` counted in the window already (-1: not counted yet)."""
        if self._done:
            return
        w = self._window
        if w is not None and cost < 0:
            cost = w.reserve(None if response is None else response.outputs, final, False)
            if cost == DROP:
                return
            if cost == FLAG_ONLY:
                response, cost = None, 0
        hold = self.hold
        if hold is not None:
            if w is not None:  # preserve_ordering holds it back: not bounded by the window
                w.release(cost)
            hold(response, final)
            return
        self.pass_on(response, final, cost)

    def pass_on(self, response: InferResponse | None, final: bool, cost: int = 0) -> None:
        """``deliver``, past ``hold``: the response reaches the consumer now (on the loop thread)."""
        win = self._window
        if self._done:
            if win is not None:
                win.release(cost)
            return
        path = self.path
        if final:
            self._done = True
            if win is not None:
                win.close()
        if path is not None:  # stages 3 to 5 (core/response_path.py)
            if response is not None:
                first = path.first
                if first is not None:
                    path.first = None
                    first()
            if final:
                for end in path.ends:
                    end(self)
            if path.posts and response is not None and response.error is None:
                response = path.post(response)
        cb = self._callback
        if cb is not None:
            if final:
                # the callback usually closes over the request, which holds this stream: break
                # the cycle now, or every request becomes work for the cyclic GC
                self._callback = None
            if win is None:
                cb(response, final)
            else:
                self._call(cb, win, response, final, cost)
            return
        self._items.append((response, final))
        if win is not None:
            win.costs.append(cost)
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    @property
    def done(self) -> bool:
        return self._done

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The loop responses are consumed on (a producer on it may ``deliver`` directly, in order)."""
        return self._loop

    # -- consumer side (loop thread) -------------------------------------------------------
    async def _next(self) -> tuple[InferResponse | None, bool]:
        while not self._items:
            self._waiter = self._loop.create_future()
            await self._waiter
            self._waiter = None
        w = self._window
        if w is not None:
            w.release(w.costs.popleft() if w.costs else 0)
        return self._items.popleft()

    async def first(self) -> InferResponse:
        """The one response of a unary request (waits past empty final-only sends)."""
        while True:
            resp, final = await self._next()
            if resp is not None:
                return resp
            if final:
                from inferd.errors import InternalError

                raise InternalError("model produced no response")

    async def __aiter__(self) -> AsyncIterator[tuple[InferResponse | None, bool]]:
        while True:
            item = await self._next()
            yield item
            if item[1]:
                return
