"""How a Python model's answers reach a request's stream from whatever thread gives them
(``send_to``), and where a request released for another execute goes (``release``): shared by the
in-process instance (backend.py, hooks.py, reschedule.py) and a worker process's server side
(``backends/process/instance.py``). Imports nothing of the backend."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from inferd.core.request import InferRequest
from inferd.core.response import InferResponse, ResponseStream
from inferd.errors import InvalidArgumentError

log = logging.getLogger("inferd.python")

NOT_CONFIGURED = (
    "Request is released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, while the model is not configured "
    "to handle such a flag."
)


def send_to(stream: ResponseStream, response: InferResponse | None, final: bool) -> None:
    """Hand a response to ``stream``: directly on its loop's thread (inline mode, a finalizer
    there), so that it keeps its place before what the pool delivers next; else thread-safely."""
    if asyncio._get_running_loop() is stream.loop:
        stream.deliver(response, final)
    else:
        stream.send(response, final)


def release(rescheduler: Any, request: InferRequest, version: str) -> None:
    """``request`` was released for another execute: to ``rescheduler``, else refused."""
    if rescheduler is not None:
        rescheduler(request)
        return
    log.error("Failed to release request: %s", NOT_CONFIGURED)
    if request.stream is not None:
        error = InvalidArgumentError(NOT_CONFIGURED)
        send_to(request.stream, InferResponse(request.model_name, version, request.id, error=error), True)
