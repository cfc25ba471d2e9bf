"""What ``pb_utils`` asks of the instance a model runs for: response senders, BLS, metrics, its folder.

One ``InstanceHooks`` per instance. The backend sets it as the hooks of the threads it runs the
instance in (its worker, the server's loop inline, its own event loop) and of the thread that
initializes and finalizes it; a thread the model starts itself finds it as ``pb_utils``'s fallback.
Sender state lives on the request the model got and changes under the instance's lock, from any
thread, with the texts of Triton's Python backend.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import time
from collections.abc import Coroutine
from functools import partial
from typing import TYPE_CHECKING, Any

from inferd.backends.python import forked, pb_utils
from inferd.backends.python.pb_bls import BlsStream, ResponseIterator
from inferd.backends.python.pb_metrics import MetricsTarget
from inferd.backends.python.sending import send_to
from inferd.core.request import InferRequest
from inferd.core.response import InferResponse
from inferd.errors import ErrorCode, InferdError, InternalError, UnavailableError

if TYPE_CHECKING:
    from inferd.backends.python.backend import PythonInstance

_FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
_PB_BY_CODE = {
    ErrorCode.UNKNOWN: pb_utils.TritonError.UNKNOWN,
    ErrorCode.INTERNAL: pb_utils.TritonError.INTERNAL,
    ErrorCode.NOT_FOUND: pb_utils.TritonError.NOT_FOUND,
    ErrorCode.INVALID_ARG: pb_utils.TritonError.INVALID_ARG,
    ErrorCode.UNAVAILABLE: pb_utils.TritonError.UNAVAILABLE,
    ErrorCode.UNSUPPORTED: pb_utils.TritonError.UNSUPPORTED,
    ErrorCode.ALREADY_EXISTS: pb_utils.TritonError.ALREADY_EXISTS,
    ErrorCode.CANCELLED: pb_utils.TritonError.CANCELLED,
}
BLS_PHASE_ONLY = "BLS is only supported during the 'execute' function."
#: why an abandoned BLS request is cancelled (its callee's stream carries it)
BLS_ABANDONED = "the calling model stopped waiting for the responses of its BLS request"


def _cancel_stream(core: InferRequest) -> None:
    stream = core.stream
    if stream is not None and not stream.done:
        stream.cancel(BLS_ABANDONED)


def to_pb(response: InferResponse | None, keep_device: bool = False) -> pb_utils.InferenceResponse:
    """A BLS response as the model sees it (no copy; None, a final flag alone: an empty response).
    Outputs in GPU memory stay there with ``keep_device`` (preferred_memory GPU), else come to the host."""
    out = pb_utils.InferenceResponse.__new__(pb_utils.InferenceResponse)
    out._outputs = []
    out._error = None
    if response is None:
        return out
    err = response.error
    if err is not None:
        out._error = pb_utils.TritonError(
            err.message, _PB_BY_CODE.get(err.code, pb_utils.TritonError.INTERNAL)
        )
        return out
    out._outputs = [pb_utils.Tensor._of_core(t.name, t, keep_device) for t in response.outputs]
    return out


class InstanceHooks(pb_utils._Hooks):
    """The hooks of one instance (see the module docstring). ``phase``: initialize, execute or
    finalize; BLS is refused outside execute, as the reference refuses it."""

    def __init__(self, instance: PythonInstance) -> None:
        self.instance = instance
        self.phase = "initialize"

    # -- response senders --------------------------------------------------------------------------
    def send(
        self, request: pb_utils.InferenceRequest, response: pb_utils.InferenceResponse | None, flags: int
    ) -> None:
        """``response_sender.send`` with the checks and texts of Triton's Python backend."""
        if flags != 0 and flags != _FINAL:
            raise pb_utils.TritonModelException("Unable to send response. Unsupported flag provided.")
        final = flags == _FINAL
        if response is None and not final:
            raise pb_utils.TritonModelException(
                "Inference Response object must be provided when the response flags is set to zero."
            )
        inst = self.instance
        core = request._core
        with inst.lock:
            if not inst.model.decoupled:
                if response is not None and request._n_sent > 0:
                    raise pb_utils.TritonModelException(
                        "Unable to send response. Non-decoupled model cannot send more than one response."
                    )
                if response is None and request._n_sent == 0:
                    raise pb_utils.TritonModelException(
                        "Unable to send response. Non-decoupled model cannot send complete final before "
                        "sending a response."
                    )
            if request._closed:
                raise pb_utils.TritonModelException(
                    "Unable to send response. Response sender has been closed."
                )
            request._n_sent += 1
            if final:
                request._closed = True
                inst.open.pop(id(core), None)
        stream = core.stream
        if stream is None:
            return
        if stream.cancelled and not final:
            return  # the client is gone: nothing to convert or deliver
        resp = None if response is None else inst.convert(core, response, request._output_names)
        send_to(stream, resp, final)

    def released(self, request: pb_utils.InferenceRequest) -> None:
        """A request the model let go of without the final flag: close its stream (a response was
        sent: only the flag is missing; none: an error, where Triton would leave the client waiting)."""
        inst = self.instance
        with inst.lock:
            if request._closed:
                return
            request._closed = True
            sent = request._n_sent
            core = inst.open.pop(id(request._core), None)
        if core is None or core.stream is None:
            return
        if sent and not inst.model.decoupled:
            send_to(core.stream, None, True)  # the one response it may send went out
            return
        if inst.model.decoupled:
            err = InternalError(
                f"Python model '{inst.name}' released the request without sending the final response "
                "(TRITONSERVER_RESPONSE_COMPLETE_FINAL)"
            )
        else:
            err = InternalError(
                f"Python model '{inst.name}' returned None from execute without sending a response"
            )
        send_to(core.stream, InferResponse(core.model_name, inst.model.version_str, core.id, error=err), True)

    # -- BLS -----------------------------------------------------------------------------------------
    def _submit(self, request: pb_utils.InferenceRequest, decoupled: bool) -> BlsStream:
        """Start a BLS request: its responses arrive on the returned stream."""
        if self.phase != "execute":
            raise pb_utils.TritonModelException(BLS_PHASE_ONLY)
        # a fresh core request each time: the same pb request may be executed again
        core = dataclasses.replace(request._core, t_start_ns=time.monotonic_ns(), stream=None, batch_size=1)
        stream = BlsStream()
        links = forked.links_for(self, self.instance.model.ctx.links)
        if links.infer_async is not None:
            name = core.model_name
            refuse = None
            if not decoupled:
                refuse = (
                    f"Model {name} is using the decoupled. The current BLS request call doesn't support models "
                    "using the decoupled transaction policy. Please use 'decoupled=True' argument to the "
                    "'exec' or 'async_exec' calls for decoupled models.'"
                )
            cancel = links.infer_async(core, stream.put, refuse)
            stream.abandon = (
                partial(cancel, BLS_ABANDONED) if cancel is not None else partial(self._cancel_bls, core)
            )
            return stream
        blocking = self.instance.model.ctx.infer_blocking
        if blocking is None:
            raise pb_utils.TritonModelException("BLS is not available: the model is not served by a server")
        responses = blocking(core)
        for i, r in enumerate(responses):
            stream.put(r, i == len(responses) - 1)
        if not responses:
            stream.put(None, True)
        return stream

    def bls(self, request: pb_utils.InferenceRequest, decoupled: bool) -> Any:
        inst = self.instance
        server_loop = inst.server_loop
        if server_loop is not None and asyncio._get_running_loop() is server_loop:
            # executing inline on the server's loop: waiting here would wait for ourselves; the pool
            # sees uses_bls and runs this instance in its thread from now on
            inst.uses_bls = True
            raise InternalError("BLS request issued from the event loop thread; retry the request")
        inst.uses_bls = True
        stream = self._submit(request, decoupled)
        convert = functools.partial(to_pb, keep_device=request._gpu_outputs)
        if decoupled:
            return ResponseIterator(stream, convert)
        response, _final = stream.get()
        return convert(response)

    def bls_async(self, request: pb_utils.InferenceRequest, decoupled: bool) -> Coroutine[Any, Any, Any]:
        async def run() -> Any:
            stream = self._submit(request, decoupled)
            convert = functools.partial(to_pb, keep_device=request._gpu_outputs)
            try:
                if decoupled:
                    await stream.wait()  # the first response is there: iterating it does not block
                    return ResponseIterator(stream, convert)
                response, _final = await stream.aget()
            except asyncio.CancelledError:  # the model's timeout (asyncio.wait_for) or its unload
                stream.give_up()
                raise
            return convert(response)

        return run()

    def _cancel_bls(self, core: InferRequest) -> None:
        """Cancel an abandoned BLS request on the server's loop, where its submission was queued
        before: by then ``core.stream`` is the request's stream. Safe in a finalizer (no lock)."""
        loop = self.instance.server_loop
        if loop is None:
            _cancel_stream(core)
        elif not loop.is_closed():
            loop.call_soon_threadsafe(_cancel_stream, core)

    # -- the rest of the server ------------------------------------------------------------------------
    def metrics(self) -> MetricsTarget:
        inst = self.instance
        registry = inst.model.ctx.links.metrics
        if registry is None:
            raise pb_utils.TritonModelException(
                "custom metrics are not available: the model is not served by a server"
            )
        return MetricsTarget(registry, inst.model.owner, inst.name)

    def model_dir(self) -> str:
        return str(self.instance.model.ctx.version_dir)

    def model_ready(self, model_name: str, model_version: str) -> bool:
        ready = self.instance.model.ctx.links.model_ready
        if ready is None:
            raise pb_utils.TritonModelException(
                "model readiness is not known: the model is not served by a server"
            )
        return ready(model_name, model_version)

    def control(
        self,
        prefix: str,
        action: str,
        name: str,
        config: str,
        files: dict[str, bytes] | None,
        dependents: bool,
    ) -> None:
        inst = self.instance
        link = inst.model.ctx.links.model_control
        server_loop = inst.server_loop
        inst.uses_bls = True  # it waits for the server: the pool runs it in its threads, never inline
        try:
            if server_loop is not None and asyncio._get_running_loop() is server_loop:
                raise InternalError("model control issued from the event loop thread; retry the request")
            if link is None:
                raise UnavailableError("model control is not available: the model is not served by a server")
            link(inst.model.ctx.model_name, action, name, config, files, dependents)
        except InferdError as e:  # the reference's words: the stub's prefix, the backend's wrapper
            raise pb_utils.TritonModelException(
                f"{prefix}Failed to process the request for model '{inst.name}', message: {e.message}"
            ) from None

    def module(self) -> Any:
        return self.instance.model.module
