"""The Python backend, in-process: Triton's ``model.py`` runs unmodified in its instance's thread."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import logging
import os
import sys
import threading
import time
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any

from inferd.backends.base import BackendInstance, BackendModel, InstanceSpec, LoadContext
from inferd.backends.python import pb_utils
from inferd.core.request import InferRequest
from inferd.core.response import InferResponse, ResponseStream
from inferd.core.tensor import Tensor
from inferd.core.types import from_numpy
from inferd.errors import (
    ErrorCode,
    InferdError,
    InternalError,
    InvalidArgumentError,
    UnavailableError,
    error_for_code,
)

pb_utils.install()

log = logging.getLogger("inferd.python")

_CODE_BY_PB = {
    pb_utils.TritonError.UNKNOWN: ErrorCode.UNKNOWN,
    pb_utils.TritonError.INTERNAL: ErrorCode.INTERNAL,
    pb_utils.TritonError.NOT_FOUND: ErrorCode.NOT_FOUND,
    pb_utils.TritonError.INVALID_ARG: ErrorCode.INVALID_ARG,
    pb_utils.TritonError.UNAVAILABLE: ErrorCode.UNAVAILABLE,
    pb_utils.TritonError.UNSUPPORTED: ErrorCode.UNSUPPORTED,
    pb_utils.TritonError.ALREADY_EXISTS: ErrorCode.ALREADY_EXISTS,
    pb_utils.TritonError.CANCELLED: ErrorCode.CANCELLED,
}
_PB_BY_CODE = {v: k for k, v in _CODE_BY_PB.items()}
_FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


def _send(stream: ResponseStream, response: InferResponse | None, final: bool) -> None:
    """Hand a response to ``stream``: directly on its loop's thread (inline mode, a finalizer
    there), so that it keeps its place before what the pool delivers next; else thread-safely."""
    if asyncio._get_running_loop() is stream.loop:
        stream.deliver(response, final)
    else:
        stream.send(response, final)


#: inferd's own source folder: its frames never reach a client (the full traceback goes to the log)
_OWN_SOURCES = str(Path(__file__).resolve().parents[2]) + os.sep


def format_exception(e: BaseException) -> str:
    """``Type: message\\n\\nAt:\\n  file(line): function`` as Triton's stub prints a Python error."""
    # the model's frames only: Triton's stub calls into model.py from C++, and the server's own
    # files are nobody's business but the log's
    log.debug("a Python model raised", exc_info=e)
    frames = [f for f in traceback.extract_tb(e.__traceback__) if not f.filename.startswith(_OWN_SOURCES)]
    at = "".join(f"  {f.filename}({f.lineno}): {f.name}\n" for f in reversed(frames))
    return f"{type(e).__name__}: {e}\n\nAt:\n{at}"


def _model_file(config: Any, version_dir: Path) -> Path:
    return version_dir / (config.default_model_filename or "model.py")


def _import_model(path: Path, module_name: str) -> ModuleType:
    if not path.is_file():
        raise InvalidArgumentError(f"unable to find '{path}': the Python model file is missing")
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise InvalidArgumentError(f"unable to load '{path}' as a Python module")
    module = importlib.util.module_from_spec(spec)
    folder = str(path.parent)
    if folder not in sys.path:
        sys.path.append(folder)  # as Triton's stub does: helper modules beside model.py import
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        raise InternalError(f"Failed to load model file '{path}': {format_exception(e)}") from e
    if not hasattr(module, "TritonPythonModel"):
        raise InvalidArgumentError(f"'{path}' does not define class TritonPythonModel")
    return module


class PythonBackend:
    """Backend ``python``."""

    name = "python"

    def auto_complete(
        self, config: Any, model_dir: Path, version_dir: Path | None, *, default_max_batch_size: int = 4
    ) -> None:
        """Run the model's static ``auto_complete_config`` if it has one."""
        if version_dir is None:
            return
        path = _model_file(config, version_dir)
        module = _import_model(path, f"_inferd_autocomplete_{config.name}")
        cls = module.TritonPythonModel
        hook = getattr(cls, "auto_complete_config", None)
        if hook is None:
            return
        from google.protobuf import json_format

        from inferd.repository.config import config_to_json

        cfg = pb_utils.ModelConfig(config_to_json(config))
        try:
            result = hook(cfg)
        except Exception as e:
            raise InvalidArgumentError(f"auto_complete_config failed: {format_exception(e)}") from e
        if not isinstance(result, pb_utils.ModelConfig):
            raise InvalidArgumentError("auto_complete_config must return the ModelConfig it was given")
        try:
            json_format.ParseDict(result.as_dict(), config.__class__(), ignore_unknown_fields=False)
            config.Clear()
            json_format.ParseDict(result.as_dict(), config)
        except json_format.ParseError as e:
            raise InvalidArgumentError(f"auto_complete_config produced an invalid config: {e}") from e

    def load(self, ctx: LoadContext) -> BackendModel:
        from inferd.backends.python.process import ProcessModel, execution_mode

        if execution_mode(ctx) == "process":  # model.py is imported in the worker processes only
            return ProcessModel(ctx)
        module_name = f"_inferd_model_{ctx.model_name}_{ctx.version}"
        module = _import_model(_model_file(ctx.config, ctx.version_dir), module_name)
        return PythonModel(ctx, module)


class PythonModel:
    """A loaded model.py: creates TritonPythonModel instances."""

    def __init__(self, ctx: LoadContext, module: ModuleType) -> None:
        from inferd.repository.config import config_to_json

        self.ctx = ctx
        self.module = module
        self.config_json = json.dumps(config_to_json(ctx.config), separators=(",", ":"))  # compact, as Triton
        self.output_names = frozenset(o.name for o in ctx.config.output)
        self.decoupled = bool(ctx.config.model_transaction_policy.decoupled)
        self.version_str = str(ctx.version)

    def create_instance(self, spec: InstanceSpec) -> BackendInstance:
        obj = self.module.TritonPythonModel()
        args = {
            "model_config": self.config_json,
            "model_instance_kind": spec.kind,
            "model_instance_name": spec.name,
            "model_instance_device_id": str(spec.device_id),
            "model_repository": str(self.ctx.model_dir),
            "model_version": str(self.ctx.version),
            "model_name": self.ctx.model_name,
        }
        init = getattr(obj, "initialize", None)
        if init is not None:
            try:
                init(args)
            except Exception as e:
                raise InternalError(format_exception(e)) from e
        return PythonInstance(self, obj, spec.name)

    def unload(self) -> None:
        sys.modules.pop(self.module.__name__, None)


class _InstanceHooks(pb_utils._Hooks):
    """Response senders and BLS for the requests of one instance (senders work from any thread)."""

    def __init__(self, instance: PythonInstance) -> None:
        self.instance = instance

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
        _send(stream, resp, final)

    def released(self, request: pb_utils.InferenceRequest) -> None:
        """A decoupled request the model let go of without the final flag: close its stream."""
        inst = self.instance
        with inst.lock:
            if request._closed:
                return
            request._closed = True
            core = inst.open.pop(id(request._core), None)
        if core is not None and core.stream is not None:
            err = InternalError(
                f"Python model '{inst.name}' released the request without sending the final response "
                "(TRITONSERVER_RESPONSE_COMPLETE_FINAL)"
            )
            _send(
                core.stream, InferResponse(core.model_name, inst.model.version_str, core.id, error=err), True
            )

    def bls(self, request: InferRequest) -> list[pb_utils.InferenceResponse]:
        self.instance.uses_bls = True
        infer = self.instance.model.ctx.infer_blocking
        if infer is None:
            raise pb_utils.TritonModelException("BLS is not available: the model is not served by a server")
        out: list[pb_utils.InferenceResponse] = []
        for r in infer(request):
            if r.error is not None:
                err = pb_utils.TritonError(r.error.message, _PB_BY_CODE.get(r.error.code, 1))
                out.append(pb_utils.InferenceResponse(error=err))
            else:
                out.append(
                    pb_utils.InferenceResponse(
                        [pb_utils.Tensor._typed(t.name, t.array, t.datatype) for t in r.outputs]
                    )
                )
        return out


class PythonInstance:
    """One TritonPythonModel object; ``execute`` runs in the instance's worker thread.

    Decoupled models answer through response senders, from any thread and also after
    ``execute`` returned. A request stays open until its sender sends the final flag; one the
    model lets go of without it is closed with an error at once (Triton would leave the client
    waiting), and those still open when the instance unloads are closed with UNAVAILABLE after
    ``finalize``.
    """

    def __init__(self, model: PythonModel, obj: Any, name: str) -> None:
        self.model = model
        self.obj = obj
        self.name = name
        self._execute = obj.execute
        self.last_timings: tuple[int, int, int] = (0, 0, 0)
        #: sender state (sent counts, final flags, ``open``) changes under this lock, from any thread
        self.lock = threading.RLock()
        #: decoupled requests handed to execute whose final flag has not been sent: id -> request
        self.open: dict[int, InferRequest] = {}
        #: Python code holds the GIL: the pool may run small executes on the event loop
        self.inline_ok = True
        self.uses_bls = False
        self._hooks = _InstanceHooks(self)

    def execute(self, requests: list[InferRequest]) -> list[InferResponse] | None:
        # per thread: the pool runs an instance in its worker thread or, inline, on the loop's
        hooks = self._hooks
        if getattr(pb_utils._local, "hooks", None) is not hooks:
            pb_utils._set_thread_hooks(hooks)
        clock = time.monotonic_ns
        t0 = clock()
        all_outputs = self.model.output_names
        decoupled = self.model.decoupled
        wrap = (pb_utils._DecoupledInferenceRequest if decoupled else pb_utils.InferenceRequest)._wrap
        pb_requests = [
            wrap(
                r,
                all_outputs
                if r.outputs is None
                else (r.output_names if r.output_names is not None else frozenset(o.name for o in r.outputs)),
                hooks,
            )
            for r in requests
        ]
        if decoupled:
            with self.lock:
                for r in requests:
                    self.open[id(r)] = r
        t1 = clock()
        try:
            results = self._execute(pb_requests)
        except Exception as e:
            if decoupled:
                self._close_all(pb_requests)  # the pool answers them with this error
            raise InternalError(
                f"Failed to process the request(s) for model '{self.name}', message: {format_exception(e)}"
            ) from e
        t2 = clock()
        if decoupled:
            self.last_timings = (t1 - t0, t2 - t1, clock() - t2)
            if results is not None:
                self._close_all(pb_requests)
                raise InternalError(
                    f"Failed to process the request(s) for model '{self.name}', message: Python model "
                    f"'{self.name}' is using the decoupled mode and the execute function must return None."
                )
            return None
        if results is None:
            self._answer_unanswered(pb_requests)
            self.last_timings = (t1 - t0, t2 - t1, clock() - t2)
            return None
        if len(results) != len(requests):
            raise InternalError(
                "Number of InferenceResponse objects do not match the number of InferenceRequest objects. "
                f"InferenceRequest(s) size is:{len(requests)}, and InferenceResponse(s) size is:{len(results)}"
            )
        responses = [
            self.convert(r, res, pr._output_names)
            for r, res, pr in zip(requests, results, pb_requests, strict=True)
        ]
        self.last_timings = (t1 - t0, t2 - t1, clock() - t2)
        return responses

    def _close_all(self, pb_requests: list[pb_utils.InferenceRequest]) -> None:
        """Close the senders of ``pb_requests``: whatever the pool delivers next ends their streams."""
        with self.lock:
            for pr in pb_requests:
                pr._closed = True
                self.open.pop(id(pr._core), None)

    def _answer_unanswered(self, pb_requests: list[pb_utils.InferenceRequest]) -> None:
        """A non-decoupled model that returned None must have answered every request by its sender."""
        for pr in pb_requests:
            with self.lock:
                if pr._closed:
                    continue
                pr._closed = True
                sent = pr._n_sent
            r = pr._core
            if r.stream is None:
                continue
            if sent:
                _send(r.stream, None, True)  # one response without the final flag: that was the one
                continue
            err = InternalError(
                f"Python model '{self.name}' returned None from execute without sending a response"
            )
            _send(r.stream, InferResponse(r.model_name, self.model.version_str, r.id, error=err), True)

    def close_open(self, error: InferdError) -> int:
        """End every open decoupled request with ``error`` (unload); how many there were."""
        with self.lock:
            left = list(self.open.values())
            self.open.clear()
        for r in left:
            if r.stream is not None:
                _send(r.stream, InferResponse(r.model_name, self.model.version_str, r.id, error=error), True)
        return len(left)

    def convert(self, request: InferRequest, result: Any, wanted: frozenset[str] | None) -> InferResponse:
        """A pb_utils.InferenceResponse as a core InferResponse (unrequested outputs dropped)."""
        version = self.model.version_str
        if not isinstance(result, pb_utils.InferenceResponse):
            err: InferdError = InternalError(
                f"Expected an 'InferenceResponse' object in the execute function return list, found type "
                f"'{type(result).__name__}'."
            )
            return InferResponse(request.model_name, version, request.id, error=err)
        e = result.error()
        if e is not None:
            code = _CODE_BY_PB.get(e.code(), ErrorCode.INTERNAL)
            return InferResponse(
                request.model_name, version, request.id, error=error_for_code(code, e.message())
            )
        outputs = []
        for t in result.output_tensors():
            name = t.name()
            if wanted is not None and name not in wanted:
                continue
            arr = t.as_numpy()
            try:
                dt = t._datatype() or from_numpy(arr.dtype)  # BF16: uint16 words marked BF16
            except TypeError:
                err = InternalError(f"output '{name}' has unsupported numpy dtype {arr.dtype}")
                return InferResponse(request.model_name, version, request.id, error=err)
            outputs.append(Tensor(name, dt, arr.shape, array=arr))
        return InferResponse(request.model_name, version, request.id, outputs=outputs)

    def unload(self) -> None:
        fin = getattr(self.obj, "finalize", None)
        try:
            if fin is not None:
                fin()
        finally:
            # after finalize, which may let the model's own threads send what they still had
            self.close_open(
                UnavailableError(
                    f"model '{self.model.ctx.model_name}' version {self.model.version_str} was unloaded before "
                    "the request received its final response"
                )
            )
