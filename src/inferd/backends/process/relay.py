"""The server's half of a worker process's BLS requests: run on the server, responses relayed back.

A model in a worker process (``worker.py``) sends ``("bls", id, request, decoupled_error)`` for each
``exec`` or ``async_exec``, decoupled or not. ``BlsRelay.start`` submits it as a thread instance's
BLS is submitted (``ServerLinks.infer_async``: the same checks, the same texts, a decoupled callee
refused by a non-decoupled call), and every response the callee sends goes back as
``("bls_resp", id, response | None, final)`` as it comes, so a decoupled stream reaches the model
response by response, with its final flag.

Responses are packed (tensors copied into shared memory) and sent by one thread of the relay's own,
not on the server's loop, which delivers them: in order, and the loop never copies a tensor. A
``("bls_cancel", id, reason)`` (the model abandoned the request: dropped its iterator, or its
``async_exec`` was cancelled) cancels the request on the loop, after its submission queued there;
from then on only its final flag goes back, empty. When the worker ends (it stopped, died or was
restarted) its open requests are cancelled the same way: nobody reads their responses any more.
What the relay holds is its open requests; the responses a model has not consumed yet are the
worker's, as a thread instance's are its own.

The worker's other calls on the server (``FORWARDED``: ``model_ready``, the custom-metric registry)
are answered by ``answer_call``, with plain values in and out.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any

from inferd.backends.base import LoadContext, MetricError
from inferd.backends.process.ipc import (
    Channel,
    ChannelClosed,
    ShmNames,
    pack_error,
    pack_response,
    release_unmapped,
    unpack_request,
)
from inferd.core.request import InferRequest
from inferd.core.response import InferResponse
from inferd.errors import InferdError, InternalError, InvalidArgumentError, UnavailableError

#: why a worker's open BLS requests are cancelled when it ends
WORKER_ENDED = "the calling model's worker process ended"


#: what a worker's model may call on the server besides BLS: ServerLinks.model_ready and the
#: MetricRegistry's calls (plain values in and out). release_owner is not forwarded: a model's
#: processes share one owner, released by ProcessModel when its last instance unloads.
FORWARDED = frozenset(
    {
        "model_ready",
        "model_control",
        *(
            f"metrics.{m}"
            for m in ("family_new", "family_delete", "metric_new", "metric_delete", "metric_op")
        ),
    }
)


def answer_call(ctx: LoadContext, name: str, args: tuple[Any, ...]) -> tuple[str, Any]:
    """``(kind, value)``: "ok" with the result, "metric_error" with (message, stub), or "error"
    with a packed InferdError."""
    links = ctx.links
    try:
        if name not in FORWARDED:
            raise InvalidArgumentError(f"'{name}' cannot be called from a worker process")
        fn: Callable[..., Any] | None
        if name == "model_ready":
            fn = links.model_ready
        elif name == "model_control":
            fn = links.model_control
        else:
            fn = None if links.metrics is None else getattr(links.metrics, name.removeprefix("metrics."))
        if fn is None:
            raise UnavailableError(f"'{name}' is not available: the model is not served by a server")
        return "ok", fn(*args)
    except MetricError as e:
        return "metric_error", (str(e), e.stub)
    except Exception as e:
        return "error", pack_error(e)


def answer(chan: Channel, message: tuple[Any, ...]) -> None:
    """Send an answer to the worker; one that died meanwhile is the reader's to report."""
    with contextlib.suppress(ChannelClosed):
        chan.send(message)


@dataclass(slots=True)
class _Call:
    """One open BLS request of the worker."""

    request: InferRequest
    cancelled: bool = False
    #: what ``infer_async`` returned to cancel it (None: cancel ``request.stream``)
    cancel: Callable[[str], None] | None = None


def _cancel_stream(request: InferRequest, reason: str) -> None:
    stream = request.stream
    if stream is not None and not stream.done:
        stream.cancel(reason)


class BlsRelay:
    """The BLS requests one worker process has open on the server (one relay per worker: a
    restarted worker numbers its requests from 1 again)."""

    def __init__(
        self,
        ctx: LoadContext,
        chan: Channel,
        shm: ShmNames,
        pool: Callable[[], ThreadPoolExecutor],
        name: str,
    ) -> None:
        self._ctx = ctx
        self._chan = chan
        self._shm = shm
        self._pool = pool
        self._lock = threading.Lock()
        self._open: dict[int, _Call] = {}
        self._closed = False
        self._out = ThreadPoolExecutor(1, thread_name_prefix=f"inferd-{name}-bls-out")
        #: the server's loop (the streams of the instance's requests deliver there), known once an
        #: execute ran: a BLS request comes from an execute
        self.loop: asyncio.AbstractEventLoop | None = None

    @property
    def open_requests(self) -> int:
        """BLS requests not answered with their final flag yet."""
        with self._lock:
            return len(self._open)

    # -- the reader thread -------------------------------------------------------------------------
    def start(self, bls_id: int, packed: tuple[Any, ...], decoupled_error: str | None) -> None:
        """Submit the worker's request ``bls_id``; its responses go back as they come."""
        _, request = unpack_request(packed)  # first: its tensors' shared memory is unlinked by mapping
        call = _Call(request)
        with self._lock:
            if self._closed:
                return
            self._open[bls_id] = call
        forward = partial(self._forward, bls_id, call)
        infer = self._ctx.links.infer_async
        if infer is not None:
            call.cancel = infer(request, forward, decoupled_error)
            return
        blocking = self._ctx.infer_blocking
        if blocking is None:
            err = UnavailableError("BLS is not available: the model is not served by a server")
            forward(InferResponse(request.model_name, request.model_version, request.id, error=err), True)
            return
        self._pool().submit(self._run_blocking, blocking, request, forward)

    def cancel(self, bls_id: int, reason: str) -> None:
        """The model abandoned request ``bls_id``: cancel it; only its final flag goes back."""
        with self._lock:
            call = self._open.get(bls_id)
        if call is not None:
            self._cancel(call, reason)

    def close(self) -> None:
        """The worker ended: cancel what it still had open, send nothing more."""
        with self._lock:
            self._closed = True
            calls, self._open = list(self._open.values()), {}
        for call in calls:
            self._cancel(call, WORKER_ENDED)
        self._out.shutdown(wait=False, cancel_futures=True)

    def _cancel(self, call: _Call, reason: str) -> None:
        """The request's stream is cancelled on the loop, after the submission ``start`` queued
        there: by then ``request.stream`` is set."""
        call.cancelled = True
        if call.cancel is not None:
            call.cancel(reason)
            return
        loop = self.loop
        if loop is None:
            _cancel_stream(call.request, reason)
        elif not loop.is_closed():
            loop.call_soon_threadsafe(_cancel_stream, call.request, reason)

    # -- responses (on the server's loop) ------------------------------------------------------------
    def _forward(self, bls_id: int, call: _Call, response: InferResponse | None, final: bool) -> None:
        if call.cancelled:
            if not final:
                return  # abandoned: nothing for the worker to hold
            response = None
        with self._lock:
            if self._closed:
                return
            if final:
                self._open.pop(bls_id, None)
            self._out.submit(self._send, bls_id, response, final)

    def _send(self, bls_id: int, response: InferResponse | None, final: bool) -> None:
        """The relay's thread: pack (the one copy of each tensor) and send, in delivery order."""
        if self._closed:
            return
        try:
            packed = None if response is None else pack_response(response, self._shm)
        except OSError as e:  # no room in /dev/shm: the model gets an error, not a hang
            err = InternalError(f"the BLS response could not be passed to the worker process: {e}")
            assert response is not None
            packed = pack_response(
                InferResponse(response.model_name, response.model_version, response.id, error=err), self._shm
            )
        try:
            self._chan.send(("bls_resp", bls_id, packed, final))
        except ChannelClosed:  # the worker died: it will never map them
            if packed is not None:
                release_unmapped(packed[3])

    def _run_blocking(
        self,
        blocking: Callable[[InferRequest], list[InferResponse]],
        request: InferRequest,
        forward: Callable[[InferResponse | None, bool], None],
    ) -> None:
        """Without ``infer_async`` (a server that offers only the blocking link): its responses."""
        try:
            responses = blocking(request)
        except InferdError as e:
            responses = [InferResponse(request.model_name, request.model_version, request.id, error=e)]
        for i, r in enumerate(responses):
            forward(r, i == len(responses) - 1)
        if not responses:
            forward(None, True)
