"""Requests a C/C++ backend sends to other models of the server (BLS: ``TRITONSERVER_ServerInferAsync``).

The host hands each request over described in plain values (its inputs' bytes copied out of the
backend's buffers); here it becomes an InferRequest submitted through the loading server's
``ServerLinks.infer_async``, and each response the core sends back (on the event loop) is flattened for
the host's ``bls_respond``, which allocates the outputs through the backend's response allocator and
calls its response callback (then, after the last, its release callback). NVIDIA's Python backend runs a
``model.py``'s ``exec()``/``async_exec()`` this way.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from inferd.backends.base import InferAsync
from inferd.core.request import InferRequest, RequestedOutput
from inferd.core.response import InferResponse
from inferd.core.tensor import Tensor
from inferd.core.types import BY_TRITON_CODE
from inferd.errors import ErrorCode, InferdError

log = logging.getLogger("inferd.tritonc")

_CODES = tuple(ErrorCode)
#: what requests are sent through (the links of the server that loaded a C model last)
_links: dict[str, InferAsync | None] = {"infer_async": None}
_ready: list[Callable[[str, str], bool] | None] = [None]
#: the requests in flight, by the host's handle (a cancel finds its stream)
_pending: dict[int, InferRequest] = {}
#: the host's bls_respond (set when the host loads)
_respond: list[Callable[[int, bool, Any], None]] = []
#: whether a backend of this process sent a request: then no C instance executes on the loop, where
#: waiting for its answer would wait for ever (instances' ``uses_bls``)
_used = [False]


def used() -> bool:
    return _used[0]


def set_links(infer_async: InferAsync | None, model_ready: Callable[[str, str], bool] | None) -> None:
    if infer_async is not None:
        _links["infer_async"] = infer_async
    if model_ready is not None:
        _ready[0] = model_ready


def attach(respond: Callable[[int, bool, Any], None]) -> None:
    _respond[:] = [respond]


def _code(e: InferdError) -> int:
    return _CODES.index(e.code)


def submit(
    handle: int,
    model: str,
    version: int,
    rid: str,
    flags: int,
    correlation_id: int | str,
    priority: int,
    timeout_us: int,
    inputs: list[tuple[str, int, tuple[int, ...], bytes]],
    outputs: tuple[str, ...],
    parameters: dict[str, Any],
) -> tuple[int, str] | None:
    """A backend's request (``TRITONSERVER_ServerInferAsync``): None once submitted, else the error."""
    _used[0] = True
    infer_async = _links["infer_async"]
    if infer_async is None:
        return (_CODES.index(ErrorCode.UNAVAILABLE), "no server to send the request to")
    if asyncio._get_running_loop() is not None:
        # an execute on the event loop (inline): its answer could never come while it waits; the next
        # executes run in threads (uses_bls)
        return (
            _CODES.index(ErrorCode.UNAVAILABLE),
            "a request to another model from an execute on the event loop: sent again, it runs in a thread",
        )
    ready = _ready[0]
    version_str = "" if version <= 0 else str(version)
    if ready is not None and not ready(model, version_str):
        # the reference's core refuses it in the call (its Python backend asks readiness first itself)
        return (_CODES.index(ErrorCode.NOT_FOUND), f"Request for unknown model: '{model}' is not found")
    tensors: dict[str, Tensor] = {}
    for name, code, shape, data in inputs:
        datatype = BY_TRITON_CODE.get(code)
        if datatype is None:
            return (_CODES.index(ErrorCode.INVALID_ARG), f"input '{name}' has an unknown datatype {code}")
        tensors[name] = Tensor(name, datatype, tuple(shape), raw=data)
    request = InferRequest(
        model,
        tensors,
        version_str,
        rid,
        dict(parameters),
        [RequestedOutput(n) for n in outputs] or None,
        correlation_id,
        flags,
        priority,
        timeout_us,
    )
    _pending[handle] = request

    def on_response(response: InferResponse | None, final: bool) -> None:
        if final:
            _pending.pop(handle, None)
        _respond[0](handle, final, None if response is None else _flatten(response))

    try:
        infer_async(request, on_response, None)
    except InferdError as e:
        _pending.pop(handle, None)
        return (_code(e), e.message)
    return None


def _flatten(response: InferResponse) -> tuple[Any, ...]:
    error = None if response.error is None else (_code(response.error), response.error.message)
    outputs = [(t.name, t.datatype.triton_code, t.shape, t.to_bytes()) for t in response.outputs]
    version = int(response.model_version) if response.model_version.isdigit() else -1
    return (response.model_name, version, response.id, error, outputs, dict(response.parameters))


def cancel(handle: int) -> None:
    """The backend cancelled its request (``TRITONSERVER_InferenceRequestCancel``, any thread)."""
    request = _pending.get(handle)
    stream = None if request is None else request.stream
    if stream is not None:
        stream.loop.call_soon_threadsafe(stream.cancel, "the backend cancelled its request")
