"""The Python backend, in-process: Triton's ``model.py`` runs unmodified in its instance's thread."""

from __future__ import annotations

import importlib.util
import json
import sys
import time
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any

from inferd.backends.base import BackendInstance, InstanceSpec, LoadContext
from inferd.backends.python import pb_utils
from inferd.core.request import InferRequest
from inferd.core.response import InferResponse
from inferd.core.tensor import Tensor
from inferd.core.types import from_numpy
from inferd.errors import ErrorCode, InferdError, InternalError, InvalidArgumentError, error_for_code

pb_utils.install()

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


def format_exception(e: BaseException) -> str:
    """``Type: message\\n\\nAt:\\n  file(line): function`` as Triton's stub prints a Python error."""
    # the model's frames only: Triton's stub calls into model.py from C++
    frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename != __file__]
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

    def auto_complete(self, config: Any, model_dir: Path, version_dir: Path | None) -> None:
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

    def load(self, ctx: LoadContext) -> PythonModel:
        module_name = f"_inferd_model_{ctx.model_name}_{ctx.version}"
        module = _import_model(_model_file(ctx.config, ctx.version_dir), module_name)
        return PythonModel(ctx, module)


class PythonModel:
    """A loaded model.py: creates TritonPythonModel instances."""

    def __init__(self, ctx: LoadContext, module: ModuleType) -> None:
        from inferd.repository.config import config_to_json

        self.ctx = ctx
        self.module = module
        self.config_json = json.dumps(config_to_json(ctx.config))
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
    """Response senders and BLS for the requests of one instance thread."""

    def __init__(self, instance: PythonInstance) -> None:
        self.instance = instance

    def send(
        self, request: pb_utils.InferenceRequest, response: pb_utils.InferenceResponse | None, flags: int
    ) -> None:
        core = request._core
        stream = core.stream
        final = bool(flags & pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        if stream is None:
            return
        resp = None if response is None else self.instance.convert(core, response, request._output_names)
        if final:
            self.instance.answered.add(id(core))
        stream.send(resp, final)

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
                out.append(pb_utils.InferenceResponse([pb_utils.Tensor(t.name, t.array) for t in r.outputs]))
        return out


class PythonInstance:
    """One TritonPythonModel object; ``execute`` runs in the instance's worker thread."""

    def __init__(self, model: PythonModel, obj: Any, name: str) -> None:
        self.model = model
        self.obj = obj
        self.name = name
        self._execute = obj.execute
        self.last_timings: tuple[int, int, int] = (0, 0, 0)
        self.answered: set[int] = set()
        #: Python code holds the GIL: the pool may run small executes on the event loop
        self.inline_ok = True
        self.uses_bls = False
        self._hooks = _InstanceHooks(self)

    def execute(self, requests: list[InferRequest]) -> list[InferResponse] | None:
        # per thread: the pool runs an instance in its worker thread or, inline, on the loop's
        if getattr(pb_utils._local, "hooks", None) is not self._hooks:
            pb_utils._set_thread_hooks(self._hooks)
        clock = time.monotonic_ns
        t0 = clock()
        all_outputs = self.model.output_names
        wrap = pb_utils.InferenceRequest._wrap
        pb_requests = [
            wrap(
                r,
                all_outputs
                if r.outputs is None
                else (r.output_names if r.output_names is not None else frozenset(o.name for o in r.outputs)),
            )
            for r in requests
        ]
        t1 = clock()
        try:
            results = self._execute(pb_requests)
        except Exception as e:
            raise InternalError(
                f"Failed to process the request(s) for model '{self.name}', message: {format_exception(e)}"
            ) from e
        t2 = clock()
        if self.model.decoupled or results is None:
            self._answer_unanswered(requests)
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

    def _answer_unanswered(self, requests: list[InferRequest]) -> None:
        """A model that returned None must have sent every request's final flag."""
        answered = self.answered
        for r in requests:
            if id(r) in answered:
                answered.discard(id(r))
            elif not self.model.decoupled and r.stream is not None:
                err = InternalError(
                    f"Python model '{self.name}' returned None from execute without sending a response"
                )
                r.stream.send(InferResponse(r.model_name, self.model.version_str, r.id, error=err), True)

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
                dt = from_numpy(arr.dtype)
            except TypeError:
                err = InternalError(f"output '{name}' has unsupported numpy dtype {arr.dtype}")
                return InferResponse(request.model_name, version, request.id, error=err)
            outputs.append(Tensor(name, dt, arr.shape, array=arr))
        return InferResponse(request.model_name, version, request.id, outputs=outputs)

    def unload(self) -> None:
        fin = getattr(self.obj, "finalize", None)
        if fin is not None:
            fin()
