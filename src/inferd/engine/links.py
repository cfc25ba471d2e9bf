"""ModelLinks: how a model's threads call back into its server (ServerLinks' callables): a BLS request
from any thread, waited for or answered through a callback on the loop, and pb_utils' model control.
Each hops onto the server's event loop; from the loop thread itself a blocking call is refused (it
would wait for itself)."""

from __future__ import annotations

import asyncio
import threading
from typing import Protocol

from inferd.backends.base import ResponseCallback
from inferd.core.request import InferRequest
from inferd.core.response import InferResponse, ResponseStream
from inferd.engine.facade import Decoder
from inferd.engine.lifecycle import ModelLifecycle
from inferd.engine.model_control import ModelControl
from inferd.engine.on_demand import MemoryBudget
from inferd.engine.overrides import load_parameters
from inferd.errors import InferdError, InternalError, UnavailableError, error_for_code


class Server(Protocol):
    """What the links use of ServerCore (engine/server.py, which makes them: named by what it offers)."""

    loop: asyncio.AbstractEventLoop | None
    _loop_thread: int
    control: ModelControl | None
    budget: MemoryBudget | None
    registry: ModelLifecycle

    def submit(
        self, name: str, version: str, decode: Decoder, *, decoupled_error: str | None = None
    ) -> ResponseStream: ...

    async def infer(self, request: InferRequest) -> InferResponse: ...


class ModelLinks:
    """The server's side of ``ServerLinks.infer_blocking``, ``infer_async`` and ``model_control``."""

    def __init__(self, core: Server) -> None:
        self._core = core

    def infer_blocking(self, request: InferRequest) -> list[InferResponse]:
        """``infer`` from a worker thread (BLS): waits for the response."""
        assert self._core.loop is not None
        if self._core._loop_thread == threading.get_ident():
            # a model executing inline on the loop cannot wait for the loop; its pool now uses threads
            raise InternalError("BLS request issued from the event loop thread; retry the request")
        future = asyncio.run_coroutine_threadsafe(self._infer_catching(request), self._core.loop)
        return [future.result()]

    def model_control_blocking(
        self,
        caller: str,
        action: str,
        name: str,
        config: str,
        files: dict[str, bytes] | None,
        unload_dependents: bool,
    ) -> None:
        """A model's ``pb_utils.load_model`` / ``unload_model`` from a worker thread: the repository
        API's load or unload, waited for (engine/model_control.py lets a model that is loading, the
        reference's example loads in ``initialize``, load another meanwhile)."""
        assert self._core.loop is not None
        if self._core._loop_thread == threading.get_ident():
            raise InternalError("model control issued from the event loop thread; retry the request")
        if self._core.control is None:
            raise UnavailableError("the server has not started")
        if action == "load":  # the files' keys are load parameters ("file:<path>"), as the API's
            cfg, overrides = load_parameters(
                {**({"config": config} if config else {}), **(files or {})}, False
            )
            work = self._core.control.load_from_model(caller, name, cfg, overrides)
        else:
            work = self._core.control.unload_from_model(caller, name, unload_dependents)
        asyncio.run_coroutine_threadsafe(work, self._core.loop).result()

    def infer_async(
        self, request: InferRequest, callback: ResponseCallback, decoupled_error: str | None = None
    ) -> None:
        """Submit ``request`` from any thread (BLS); every response goes to ``callback`` on the loop,
        the last with ``final`` True. A request refused before it is queued answers its error the same
        way, worded as the reference's BLS words it; ``decoupled_error`` refuses a decoupled model
        with that text."""
        loop = self._core.loop
        assert loop is not None
        name = request.model_name

        def start() -> None:
            try:
                if self._core.budget is None and not self._core.registry.is_ready(
                    name, request.model_version
                ):
                    raise InternalError(
                        f"Failed for execute the inference request. Model '{name}' is not ready."
                    )
                stream = self._core.submit(
                    name, request.model_version, lambda _model: request, decoupled_error=decoupled_error
                )
            except InferdError as e:
                err = error_for_code(e.code, f"Model {name} - Error when running inference: {e.message}")
                callback(InferResponse(name, request.model_version, request.id, error=err), True)
                return
            stream.set_callback(callback)

        if self._core._loop_thread == threading.get_ident():
            start()
        else:
            loop.call_soon_threadsafe(start)

    async def _infer_catching(self, request: InferRequest) -> InferResponse:
        try:
            return await self._core.infer(request)
        except InferdError as e:
            return InferResponse(request.model_name, request.model_version, request.id, error=e)
