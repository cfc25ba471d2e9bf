"""The Python backend, in-process: Triton's ``model.py`` runs unmodified in its instance's thread."""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import threading
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from inferd.backends.base import BackendInstance, BackendModel, InstanceSpec, LoadContext
from inferd.backends.process import IN_WORKER
from inferd.backends.python import pb_utils, recursion
from inferd.backends.python.containment import execution_mode, runs_in_workers
from inferd.backends.python.hooks import InstanceHooks
from inferd.backends.python.loader import (
    MODEL_ERRORS,
    format_exception,
    import_model,
    loading,
    model_file,
    release,
)
from inferd.backends.python.modelloop import ModelLoop
from inferd.backends.python.reschedule import reschedule, take_rescheduled
from inferd.backends.python.sending import send_to
from inferd.core.request import InferRequest
from inferd.core.response import InferResponse
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

if TYPE_CHECKING:
    from inferd.backends.process.model import ProcessModel
    from inferd.repository.config.schema import ModelConfig

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


class PythonBackend:
    """Backend ``python``, or (``based``: a backend's name) the Python-based backend of that name
    (based.py): its models' file is ``<backend directory>/<based>/model.py``. One class, not a
    subclass: this module may run compiled (hotpath.py), and a compiled class takes no interpreted
    subclass."""

    def __init__(self, based: str = "") -> None:
        self.based = based
        self.name = based or "python"

    def gpu_available(self) -> bool:
        """A Python model runs on whatever its code picks: ``KIND_AUTO`` is ``KIND_GPU`` where there
        are GPUs (the reference's Python backend prefers KIND_GPU), ``args`` saying which."""
        return True

    def model_py(self, config: Any, version_dir: Path) -> tuple[Path, list[str] | None]:
        """The model's file and the folders of its own modules (None: its version and model folders);
        a Python-based backend's are the backend's (based.py)."""
        if self.based:
            from inferd.backends.tritonc import search  # (the backend directory: only for these)

            path = Path(search.backend_directory()) / self.based / search.PYTHON_BASED_RUNTIME
            return path, [str(path.parent)]
        return model_file(config, version_dir), None

    def auto_complete(
        self,
        config: ModelConfig,
        model_dir: Path,
        version_dir: Path | None,
        *,
        default_max_batch_size: int = 4,
    ) -> None:
        """Run the model's static ``auto_complete_config`` if it has one."""
        if version_dir is None:
            return
        recursion.install()  # model.py runs here (in a worker process too for an uploaded model: it ends)
        path, folders = self.model_py(config, version_dir)
        module = import_model(path, f"_inferd_autocomplete_{config.name}", folders)
        try:
            self._complete(module, config)
        finally:
            release(module)  # the model loads afresh (its own modules too)

    def _complete(self, module: ModuleType, config: ModelConfig) -> None:
        hook = getattr(module.TritonPythonModel, "auto_complete_config", None)
        if hook is None:
            return
        from google.protobuf import json_format

        from inferd.repository.config import config_to_json

        cfg = pb_utils.ModelConfig(config_to_json(config))
        try:
            result = hook(cfg)
        except MODEL_ERRORS as e:
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
        from inferd.backends.process.memory import memory_limit
        from inferd.backends.process.model import ProcessModel

        mode = execution_mode(ctx)
        path, folders = self.model_py(ctx.config, ctx.version_dir)
        limited = memory_limit(ctx) > 0  # (checked in every mode: a bad value fails the load)
        if mode == "auto" and runs_in_workers(ctx.model_name, path, limited):
            mode = "process"
        if mode == "process":  # model.py is imported in the worker processes only
            return ProcessModel(ctx)
        if not ctx.backend_config.get(IN_WORKER):  # thread instances share the server's stack
            recursion.install()
        if limited and mode == "thread" and not ctx.backend_config.get(IN_WORKER):
            log.warning(
                "model '%s': memory_limit_bytes applies to worker processes only; its thread instances "
                "share the server's memory (execution_mode thread)",
                ctx.model_name,
            )
        module_name = f"_inferd_model_{ctx.model_name}_{ctx.version}"
        module = import_model(path, module_name, folders)
        model = PythonModel(ctx, module)
        if mode == "auto":
            model.auto = ProcessModel(ctx)
        return model


class PythonModel:
    """A loaded model.py: creates TritonPythonModel instances."""

    def __init__(self, ctx: LoadContext, module: ModuleType) -> None:
        from inferd.repository.config import config_to_json

        self.ctx = ctx
        self.module = module
        self.config_json = json.dumps(config_to_json(ctx.config), separators=(",", ":"))  # compact, as Triton
        self.output_names = frozenset(o.name for o in ctx.config.output)
        #: ``FORCE_CPU_ONLY_INPUT_TENSORS: "no"``: inputs in GPU memory reach the model there (the
        #: reference's default, "yes", copies them to the host first)
        force_cpu = ctx.config.parameters.get("FORCE_CPU_ONLY_INPUT_TENSORS")
        self.gpu_inputs = force_cpu is not None and force_cpu.string_value.strip().lower() in (
            "no",
            "false",
            "off",
            "0",
        )
        self.decoupled = bool(ctx.config.model_transaction_policy.decoupled)
        self.version_str = str(ctx.version)
        #: whose references its custom metrics hold (released when it unloads)
        self.owner = f"{ctx.model_name}:{ctx.version}"
        #: instances created and not unloaded: the last one to unload unloads the model
        self.live_instances = 0
        self._lock = threading.Lock()
        #: execution_mode auto: the process model its instances move to if they hold the GIL
        self.auto: ProcessModel | None = None
        #: its instances (thread ones) not unloaded yet, asked by ``ready_check``
        self.instances: set[PythonInstance] = set()

    def ready_check(self) -> Callable[[], bool] | None:
        """What the model-ready endpoints ask when the model defines ``is_ready`` (engine/readiness.py):
        every live instance, the thread ones and those moved to processes."""
        if not hasattr(self.module.TritonPythonModel, "is_ready"):
            return None

        def check() -> bool:
            with self._lock:
                instances = list(self.instances)
            return all(i.is_ready() for i in instances) and (self.auto is None or self.auto.is_ready())

        return check

    def promotion(self) -> Callable[[InstanceSpec], BackendInstance] | None:
        return None if self.auto is None else self.auto.create_instance

    def create_instance(self, spec: InstanceSpec) -> BackendInstance:
        obj = self.module.TritonPythonModel()
        inst = PythonInstance(self, obj, spec.name)
        args = {
            "model_config": self.config_json,
            "model_instance_kind": spec.kind,
            "model_instance_name": spec.name,
            "model_instance_device_id": str(spec.device_id),
            "model_repository": str(self.ctx.model_dir),
            "model_version": str(self.ctx.version),
            "model_name": self.ctx.model_name,
        }
        inst.initialize(args)
        with self._lock:
            self.live_instances += 1
            self.instances.add(inst)
        return inst

    def instance_unloaded(self, instance: PythonInstance) -> None:
        """One of its instances unloaded; after the last, the model goes too (the core keeps no
        reference to a BackendModel: its instances are what it unloads)."""
        with self._lock:
            self.live_instances -= 1
            self.instances.discard(instance)
            last = self.live_instances == 0
        if last:
            self.unload()

    def unload(self) -> None:
        """Forget the module; the custom metrics the model's objects held go from ``/metrics``."""
        release(self.module)
        metrics = self.ctx.links.metrics
        # execution_mode auto moved the instances to processes: they hold the same owner's metrics
        # (created again by their initialize), released when the last of them unloads
        moved = self.auto is not None and self.auto.live > 0
        if metrics is not None and not moved:
            metrics.release_owner(self.owner)


class PythonInstance:
    """One TritonPythonModel object; ``execute`` runs in the instance's worker thread.

    An ``async def execute`` runs on the instance's own event loop (``modelloop.py``): ``execute``
    hands the batch over and returns None, the coroutine answers its requests when it ends, and
    the next batch starts meanwhile. Decoupled models answer through response senders, from any
    thread and also after ``execute`` returned; so may a non-decoupled model (one response per
    request), for the requests whose place in the returned list is None (or all, returning None).
    A request stays open until its final flag; one the model lets go of without it is closed at
    once (Triton would leave the client waiting), and those still open when the instance unloads
    are closed with UNAVAILABLE after ``finalize``.
    """

    def __init__(self, model: PythonModel, obj: Any, name: str) -> None:
        self.model = model
        self.obj = obj
        self.name = name
        self._execute = obj.execute
        #: ``async def execute``: executes run concurrently on the instance's event loop
        self.is_async = inspect.iscoroutinefunction(obj.execute)
        self.last_timings: tuple[int, int, int] = (0, 0, 0)
        #: sender state (sent counts, final flags, ``open``) changes under this lock, from any thread
        self.lock = threading.RLock()
        #: requests handed to execute whose final flag has not been sent: id -> request
        self.open: dict[int, InferRequest] = {}
        #: Python code holds the GIL: the pool may run small executes on the event loop; never a
        #: decoupled model's, whose responses during execute must reach the client as they are sent
        #: (on the loop they would wait for the execute's end: qa/L0_http generate_stream)
        self.inline_ok = not model.decoupled
        self.uses_bls = False
        #: the server's loop (where the requests' streams deliver); known from the first request
        self.server_loop: asyncio.AbstractEventLoop | None = None
        self.hooks = InstanceHooks(self)
        self.hooks.gpu_inputs = model.gpu_inputs
        #: takes back the requests the model releases for another execute (reschedule.py)
        self.rescheduler: Callable[[InferRequest], None] | None = None
        self._loop: ModelLoop | None = None
        self._loop_lock = threading.Lock()
        self.error_prefix = f"Failed to process the request(s) for model '{name}', message: "

    # -- life cycle --------------------------------------------------------------------------------
    def _model_loop(self) -> ModelLoop:
        with self._loop_lock:
            if self._loop is None:
                self._loop = ModelLoop(self.name, lambda: pb_utils._set_thread_hooks(self.hooks))
            return self._loop

    def _call(self, fn: Any, *args: Any) -> Any:
        """Call a model method in this thread with the instance's hooks; a coroutine it returns
        runs on the instance's loop."""
        previous = getattr(pb_utils._local, "hooks", None)
        pb_utils._set_thread_hooks(self.hooks)
        loading.module = self.model.module
        try:
            result = fn(*args)
            if inspect.iscoroutine(result):
                result = self._model_loop().run(result)
            return result
        finally:
            loading.module = None
            pb_utils._set_thread_hooks(previous if previous is not None else pb_utils._default_hooks)

    def initialize(self, args: dict[str, str]) -> None:
        """The model's ``initialize(args)`` (BLS is refused there, as in the reference)."""
        init = getattr(self.obj, "initialize", None)
        if init is not None:
            try:
                self._call(init, args)
            except MODEL_ERRORS as e:
                self._close_loop()
                raise InternalError(format_exception(e)) from e
        self.hooks.phase = "execute"
        pb_utils._add_fallback(self.hooks)

    def unload(self) -> None:
        self.hooks.phase = "finalize"
        fin = getattr(self.obj, "finalize", None)
        try:
            if fin is not None:
                self._call(fin)
        finally:
            # after finalize, which may let the model's own threads send what they still had
            self.close_open(
                UnavailableError(
                    f"model '{self.model.ctx.model_name}' version {self.model.version_str} was unloaded before "
                    "the request received its final response"
                )
            )
            self._close_loop()
            pb_utils._remove_fallback(self.hooks)
            self.hooks.gone = True  # the threads the model started act for nobody now
            self.model.instance_unloaded(self)

    def is_ready(self) -> bool:
        """The model's ``is_ready()`` (sync or async), which must return a bool; True without one."""
        fn = getattr(self.obj, "is_ready", None)
        if fn is None:
            return True
        try:
            result = self._call(fn)
        except MODEL_ERRORS as e:
            raise InternalError(format_exception(e)) from e
        if not isinstance(result, bool):
            raise InternalError("is_ready() must return a boolean value")
        return result

    def _close_loop(self) -> None:
        loop = self._loop
        if loop is not None:
            loop.close()

    # -- execute -------------------------------------------------------------------------------------
    def execute(self, requests: list[InferRequest]) -> list[InferResponse] | None:
        # per thread: the pool runs an instance in its worker thread or, inline, on the loop's
        hooks = self.hooks
        if getattr(pb_utils._local, "hooks", None) is not hooks:
            pb_utils._set_thread_hooks(hooks)
        clock = time.monotonic_ns
        t0 = clock()
        if self.server_loop is None and requests and requests[0].stream is not None:
            self.server_loop = requests[0].stream.loop
        all_outputs = self.model.output_names
        decoupled = self.model.decoupled
        wrap = (pb_utils._ReleasedRequest if decoupled else pb_utils.InferenceRequest)._wrap
        # (a loop: a comprehension made its three free variables cells, and was a function call more:
        # 2,500 instructions a request; issue 48)
        pb_requests = []
        for r in requests:
            pb_requests.append(
                wrap(
                    r,
                    all_outputs
                    if r.outputs is None
                    else (
                        r.output_names if r.output_names is not None else frozenset(o.name for o in r.outputs)
                    ),
                    hooks,
                )
            )
        if decoupled:
            with self.lock:
                for r in requests:
                    self.open[id(r)] = r
        t1 = clock()
        try:
            results = self._execute(pb_requests)
        except MODEL_ERRORS as e:
            raise self._failed(e, pb_requests) from e
        t2 = clock()
        if type(results) is not list and inspect.iscoroutine(results):  # async def execute: its loop runs it
            self._model_loop().submit(self._run_async(requests, pb_requests, results))
            self.last_timings = (t1 - t0, clock() - t1, 0)
            return None
        again = take_rescheduled(self, pb_requests, results) if hooks.marked else None
        responses = self._finish(requests, pb_requests, results)
        if again:
            reschedule(self, requests, again)
        self.last_timings = (t1 - t0, t2 - t1, clock() - t2)
        return responses

    async def _run_async(
        self,
        requests: list[InferRequest],
        pb_requests: list[pb_utils.InferenceRequest],
        coro: Coroutine[Any, Any, Any],
    ) -> None:
        """An async execute, on the instance's loop: it answers its requests itself when it ends."""
        try:
            try:
                results = await coro
            except MODEL_ERRORS as e:
                raise self._failed(e, pb_requests) from e
            except asyncio.CancelledError:
                raise UnavailableError(
                    f"model '{self.model.ctx.model_name}' was unloaded during execute"
                ) from None
            again = take_rescheduled(self, pb_requests, results)  # (executes overlap here: every time)
            responses = self._finish(requests, pb_requests, results)
            if again:
                reschedule(self, requests, again)
        except InferdError as err:
            version = self.model.version_str
            for r in requests:
                if r.stream is not None:
                    send_to(r.stream, InferResponse(r.model_name, version, r.id, error=err), True)
            return
        if responses is not None:
            for r, resp in zip(requests, responses, strict=True):
                if r.stream is not None:
                    send_to(r.stream, resp, True)

    def _failed(self, e: BaseException, pb_requests: list[pb_utils.InferenceRequest]) -> InferdError:
        """The error of an execute that raised, for the requests it did not answer; those whose one
        response already went out only get their final flag (their client has its answer)."""
        ctx = self.model.ctx  # the model's files named from the repository's root, not the server's paths
        err = InternalError(self.error_prefix + format_exception(e, ctx.model_dir, ctx.model_name))
        unanswered = 0
        flag_only = []
        with self.lock:
            for pr in pb_requests:
                if pr._closed:
                    continue
                pr._closed = True
                self.open.pop(id(pr._core), None)
                if pr._n_sent and not self.model.decoupled:
                    flag_only.append(pr._core)
                else:
                    unanswered += 1
        for r in flag_only:
            if r.stream is not None:
                send_to(r.stream, None, True)
        if not unanswered:  # nobody left to tell: the reference logs it
            log.error("%s", err.message)
        return err

    def _finish(
        self, requests: list[InferRequest], pb_requests: list[pb_utils.InferenceRequest], results: Any
    ) -> list[InferResponse] | None:
        """What execute returned, checked as the reference checks it: responses in request order,
        or None (the requests answer through their senders, now or later). The requests the model
        released for another execute are the caller's (reschedule.py)."""
        if self.model.decoupled:
            if results is not None:
                self._close_all(pb_requests)
                raise InternalError(
                    self.error_prefix
                    + f"Python model '{self.name}' is using the decoupled mode and the execute "
                    "function must return None."
                )
            return None
        if results is None:
            for pr in pb_requests:
                self._await_sender(pr)
            return None
        if type(results) is not list:
            self._close_all(pb_requests)
            raise InternalError(
                self.error_prefix + f"Expected a list in the execute return, found type '{type(results)}'."
            )
        if len(results) != len(requests):
            self._close_all(pb_requests)
            raise InternalError(
                self.error_prefix
                + "Number of InferenceResponse objects do not match the number of InferenceRequest "
                f"objects. InferenceRequest(s) size is:{len(requests)}, and InferenceResponse(s) size "
                f"is:{len(results)}\n"
            )
        plain = True
        # (the lengths are equal, checked above: zip's strict= is a keyword to parse, 1,000
        # instructions a call, three calls a request on add_sub's path; issue 48)
        for res, pr in zip(results, pb_requests):  # noqa: B905
            if type(res) is not pb_utils.InferenceResponse or pr._n_sent or pr._closed:
                if res is not None and not isinstance(res, pb_utils.InferenceResponse):
                    self._close_all(pb_requests)
                    raise InternalError(
                        self.error_prefix
                        + "Expected an 'InferenceResponse' object in the execute function return "
                        f"list, found type '{type(res)}'."
                    )
                plain = False
        if plain:  # the usual case: one returned response per request, no sender used
            out = []
            for r, res, pr in zip(requests, results, pb_requests):  # noqa: B905 (equal lengths)
                pr._closed = True  # a sender used later finds it answered
                out.append(self.convert(r, res, pr._output_names))
            return out
        for r, res, pr in zip(requests, results, pb_requests, strict=True):
            if res is None:  # this one answers through its sender
                self._await_sender(pr)
                continue
            with self.lock:
                closed, sent = pr._closed, pr._n_sent
                pr._closed = True
            if closed or r.stream is None:
                continue  # its sender sent the final flag: the returned response has nowhere to go
            if sent:
                send_to(r.stream, None, True)  # its one response went out already
                continue
            send_to(r.stream, self.convert(r, res, pr._output_names), True)
        return None

    def _await_sender(self, pr: pb_utils.InferenceRequest) -> None:
        """``pr`` is answered by its sender (maybe later): keep it open until the final flag, and
        close it when the model lets go of it without one."""
        with self.lock:
            if pr._closed:
                return
            self.open[id(pr._core)] = pr._core
            pr.__class__ = pb_utils._ReleasedRequest

    def _close_all(self, pb_requests: list[pb_utils.InferenceRequest]) -> None:
        """Close the senders of ``pb_requests``: whatever the pool delivers next ends their streams."""
        with self.lock:
            for pr in pb_requests:
                pr._closed = True
                self.open.pop(id(pr._core), None)

    def close_open(self, error: InferdError) -> int:
        """End every open request with ``error`` (unload); how many there were."""
        with self.lock:
            left = list(self.open.values())
            self.open.clear()
        for r in left:
            if r.stream is not None:
                send_to(
                    r.stream, InferResponse(r.model_name, self.model.version_str, r.id, error=error), True
                )
        return len(left)

    def convert(self, request: InferRequest, result: Any, wanted: frozenset[str] | None) -> InferResponse:
        """A pb_utils.InferenceResponse as a core InferResponse (unrequested outputs dropped)."""
        version = self.model.version_str
        if not isinstance(result, pb_utils.InferenceResponse):
            err: InferdError = InternalError(
                f"Expected an 'InferenceResponse' object in the execute function return list, found type "
                f"'{type(result)}'."
            )
            return InferResponse(request.model_name, version, request.id, error=err)
        e = result._error
        if e is not None:
            code = _CODE_BY_PB.get(e.code(), ErrorCode.INTERNAL)
            return InferResponse(
                request.model_name, version, request.id, error=error_for_code(code, e.message())
            )
        outputs = []
        for t in result._outputs:
            name = t._name
            if wanted is not None and name not in wanted:
                continue
            if t._dev is not None:  # in GPU memory: stays there (a front end copies what it sends)
                outputs.append(t._core())
                continue
            arr = t._array
            try:
                dt = t._dt or from_numpy(arr.dtype)  # BF16: uint16 words marked BF16
            except TypeError:
                err = InternalError(f"output '{name}' has unsupported numpy dtype {arr.dtype}")
                return InferResponse(request.model_name, version, request.id, error=err)
            outputs.append(Tensor(name, dt, arr.shape, array=arr))
        return InferResponse(request.model_name, version, request.id, outputs=outputs)
