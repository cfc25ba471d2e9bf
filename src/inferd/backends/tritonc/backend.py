"""C/C++ backends: Triton's ``libtriton_<name>.so`` libraries, unmodified, as inferd backends.

Any ``backend`` that is none of inferd's own resolves here (``registry.get_backend``). The library is
found in Triton's order (``search.py``) and opened once per process (``library.py``); a model version is
a ``TRITONBACKEND_Model`` and each instance a ``TRITONBACKEND_ModelInstance``, driven through the host's
extension in the reference's order: ``ModelInitialize`` (with ``TRITONBACKEND_ModelSetConfig`` for
auto-complete), ``ModelInstanceInitialize`` per instance (kind, device), ``ModelInstanceExecute`` per
batch that inferd's scheduler forms (dynamic batcher, sequence batcher), and the finalizers in reverse.

Auto-complete runs the backend's ``ModelInitialize`` when the server completes the config (before it is
normalised and validated): what the backend sets with ``TRITONBACKEND_ModelSetConfig`` becomes the
config. That model is finalized at once and the load initializes its own with the completed config
(the reference initializes once: here a completing backend's ``ModelInitialize`` runs twice, and no
initialized model waits on a load that may never come).

Responses come back through the model's completion queue (an eventfd the event loop reads: one
wake-up per batch of responses, whichever threads sent them), never through Python code per API call.
An execute returns None: the streams are answered as the backend sends; the batch statistics it
reported (``TRITONBACKEND_ModelInstanceReportBatchStatistics``) are the pool's timings.

``execution_mode`` (the model's parameter, else ``--backend-config=<backend>,execution-mode=...``; read
where a Python model's is, ``containment.execution_mode``): ``thread`` runs the library in the server's
process (the fastest: no copy, no hop between processes); ``process`` in worker processes, one per
instance (``backends/process``: the worker loads this same backend, so everything behaves alike), where
a crash in the backend fails the requests that instance held and the instance restarts, the server
serving on; its auto-complete runs in a short-lived worker too, so the library is never opened in the
server. ``auto`` (the default) is ``thread`` unless the model asks for a ``memory_limit_bytes``, which
holds in a worker only: a backend is compiled code its operator installed, with nothing to read for
risk as a ``model.py`` is read; a model a client uploaded runs in workers whatever it asks
(``process/uploaded.py``). In a worker no event loop drains the completion queue: a thread does
(``_Drainer``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import select
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from inferd.backends.base import BackendInstance, BackendModel, InstanceSpec, LoadContext
from inferd.backends.process import IN_WORKER, in_worker_process
from inferd.backends.tritonc import bls, build, library, search
from inferd.core.request import InferRequest
from inferd.core.response import InferResponse
from inferd.errors import InferdError, InvalidArgumentError

if TYPE_CHECKING:
    from inferd.repository.config.schema import ModelConfig

log = logging.getLogger("inferd.tritonc")

#: InstanceSpec.kind -> TRITONSERVER_InstanceGroupKind
_KINDS = {"AUTO": 0, "CPU": 1, "GPU": 2, "MODEL": 3}


def _io(tensors: Any) -> list[tuple[str, tuple[int, ...], tuple[int, ...] | None]]:
    """A config's inputs or outputs as the host keeps them: (name, dims, reshape or None)."""
    return [
        (t.name, tuple(t.dims), tuple(t.reshape.shape) if t.HasField("reshape") else None) for t in tensors
    ]


def _config_json(config: ModelConfig) -> str:
    import json

    from inferd.repository.config import config_to_json

    return json.dumps(config_to_json(config), separators=(",", ":"))


def _backend_config(backend_config: dict[str, str] | None, auto_complete: bool) -> dict[str, Any]:
    """The backend's config message: ``{"cmdline": {...}}``, the reference's global settings first."""
    settings = {
        "auto-complete-config": "true" if auto_complete else "false",
        "backend-directory": search.backend_directory(),
        "default-max-batch-size": "4",
        "min-compute-capability": "6.000000",
    }
    settings.update(backend_config or {})
    return {"cmdline": dict(sorted(settings.items()))}


class TritonCBackend:
    """A C/C++ backend named ``name``: each model finds its library (``search.find_library``)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def find_library(self, config: ModelConfig, model_dir: Path, version_dir: Path | None) -> Path:
        """The model's backend library (what ``inferd check`` asks: it runs no native code)."""
        return search.find_library(config, model_dir, version_dir)

    def _open(
        self, config: ModelConfig, model_dir: Path, version_dir: Path | None, settings: dict[str, str] | None
    ) -> Any:
        path = search.find_library(config, model_dir, version_dir)
        if build.find() is None:
            raise build.missing(self.name)
        return library.open_backend(self.name, path, _backend_config(settings, True))

    def auto_complete(
        self,
        config: ModelConfig,
        model_dir: Path,
        version_dir: Path | None,
        *,
        default_max_batch_size: int = 4,
    ) -> None:
        """The backend's ``ModelInitialize`` with auto-complete on: what it sets with
        ``TRITONBACKEND_ModelSetConfig`` becomes ``config``. That model is finalized at once: the load
        that follows (if any: a check, an instance_group update in place, a config that fails
        validation load none) initializes its own, with the completed config.

        A library that is not found or does not load, and a ``ModelInitialize`` that fails, fail the
        version's load instead, as the reference's do (unless the config has no tensors at all: then
        nothing else would say why)."""
        if version_dir is None or not version_dir.name.isdigit():
            return
        if _asks_process(config) and not in_worker_process():  # never opened in the server's process
            from inferd.backends.process.uploaded import UploadLimits, complete_in_worker

            complete_in_worker(config, model_dir, version_dir, default_max_batch_size, UploadLimits(0))
            return
        try:
            backend = self._open(config, model_dir, version_dir, None)
        except InferdError as e:
            if not config.input and not config.output:  # nothing else would say why
                raise
            log.debug("model %r: not auto-completed (%s)", config.name, e)
            return
        from google.protobuf import json_format

        model = _new_model(backend, config, config.name, int(version_dir.name), model_dir, True)
        try:
            set_config = model.initialize()
        except Exception as e:
            model.close()
            if not config.input and not config.output:
                raise _error(e, "") from None
            log.debug("model %r: not auto-completed (%s)", config.name, e)
            return
        _finalize(model)
        if set_config is None:
            return
        try:
            completed = json_format.Parse(set_config, config.__class__(), ignore_unknown_fields=False)
        except json_format.ParseError as e:
            raise InvalidArgumentError(
                f"the configuration backend '{self.name}' set for model '{config.name}' is invalid: {e}"
            ) from None
        config.CopyFrom(completed)

    def load(self, ctx: LoadContext) -> BackendModel:
        if _execution_mode(ctx) == "process":
            from inferd.backends.process.model import ProcessModel

            log.info(
                "model '%s' version %d: backend '%s' runs in worker processes, one per instance "
                "(execution_mode process)",
                ctx.model_name,
                ctx.version,
                self.name,
            )
            return ProcessModel(ctx)
        # the backend's config message says what the operator set, not how inferd runs it
        settings = {k: v for k, v in ctx.backend_config.items() if k != IN_WORKER}
        library.set_links(ctx.links)  # first: a worker's TRITONBACKEND_Initialize creates metrics too
        backend = self._open(ctx.config, ctx.model_dir, ctx.version_dir, settings)
        return TritonCModel(ctx, backend)


def _execution_mode(ctx: LoadContext) -> str:
    """``thread`` or ``process`` (see the module's doc): ``auto`` is ``process`` only for a model with
    a memory limit, which holds in a worker only."""
    from inferd.backends.process.memory import memory_limit
    from inferd.backends.python.containment import execution_mode  # the one reading of the parameter

    mode = execution_mode(ctx)  # (``thread`` in a worker: there the instance is in-process)
    if mode == "auto":
        mode = "process" if memory_limit(ctx) > 0 else "thread"
    return mode


def _asks_process(config: Any) -> bool:
    """Whether the config's own parameters run the model in worker processes (its auto-complete
    reads no ``--backend-config``: the server's settings of a backend move its instances only)."""
    params = config.parameters
    mode = params["execution_mode"].string_value if "execution_mode" in params else "auto"
    if mode == "auto" and "memory_limit_bytes" in params:
        try:
            return int(params["memory_limit_bytes"].string_value.strip() or "0") > 0
        except ValueError:
            return False  # the load says what is wrong with it
    return mode == "process"


def _error(e: Exception, what: str) -> InferdError:
    if isinstance(e, InferdError):
        return e
    return library.translate(e, what)


def _new_model(
    backend: Any, config: ModelConfig, name: str, version: int, model_dir: Path, auto_complete: bool
) -> Any:
    return backend.model(
        name,
        version,
        str(model_dir),
        _config_json(config),
        auto_complete,
        bool(config.model_transaction_policy.decoupled),
        int(config.max_batch_size),
        _io(config.input),
        _io(config.output),
        [(s.output_name, tuple(s.dims), None) for s in config.sequence_batching.state],
    )


def _finalize(model: Any) -> None:
    try:
        model.finalize()
    except Exception as e:
        log.error("%s", _error(e, "TRITONBACKEND_ModelFinalize failed: "))
    model.close()


class TritonCModel:
    """A model version served by a C backend: its ``TRITONBACKEND_Model`` and instances."""

    def __init__(self, ctx: LoadContext, backend: Any) -> None:
        self.ctx = ctx
        self.name = ctx.model_name
        self._backend = backend
        self._lock = threading.Lock()
        self._instances = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self.decoupled = bool(ctx.config.model_transaction_policy.decoupled)
        #: in a worker process: no event loop drains the completion queue, a thread does
        self.in_worker = bool(ctx.backend_config.get(IN_WORKER))
        self._drainer: _Drainer | None = None
        self._model: Any = self._initialize()

    def _initialize(self) -> Any:
        cfg = self.ctx.config
        model = _new_model(self._backend, cfg, self.name, self.ctx.version, self.ctx.model_dir, False)
        try:
            model.initialize()
        except Exception as e:
            model.close()
            raise _error(e, "") from None
        if self.in_worker:
            self._drainer = _Drainer(model, self.name)
        return model

    def create_instance(self, spec: InstanceSpec) -> BackendInstance:
        with self._lock:
            if self._model is None:  # every instance went (an instance_group update): initialize again
                self._model = self._initialize()
            model = self._model
            self._instances += 1
        kind = _KINDS.get(spec.kind, 1)
        policy = "gpu_" + str(spec.device_id) if spec.kind == "GPU" else spec.kind.lower()
        try:
            inst = model.instance(spec.name, kind, spec.device_id, False, f'{{"{policy}":{{}}}}')
            inst.initialize()
        except Exception as e:
            self._instance_gone()
            raise _error(
                e, f"TRITONBACKEND_ModelInstanceInitialize of instance '{spec.name}' failed: "
            ) from None
        return TritonCInstance(self, inst)

    def _instance_gone(self) -> None:
        """An instance was finalized (or failed to initialize): the last one finalizes the model."""
        with self._lock:
            self._instances -= 1
            model = self._model if self._instances == 0 else None
            if model is not None:
                self._model = None
        if model is not None:
            self._close(model)

    def _close(self, model: Any) -> None:
        try:
            model.finalize()
        except Exception as e:
            log.error("model '%s': %s", self.name, _error(e, "TRITONBACKEND_ModelFinalize failed: "))
        drainer, self._drainer = self._drainer, None
        if drainer is not None:
            drainer.stop()  # before close, which drains what is left in this thread
        loop = self._loop
        if loop is None or loop.is_closed():
            model.close()
            return

        def close() -> None:
            loop.remove_reader(model.fd)
            if not model.close():
                log.warning(
                    "model '%s': the backend still holds %d request(s) after ModelFinalize; they stay open",
                    self.name,
                    model.open_requests,
                )

        try:
            loop.call_soon_threadsafe(close)
        except RuntimeError:  # the loop closed meanwhile
            model.close()

    def watch(self, loop: asyncio.AbstractEventLoop) -> None:
        """Have ``loop`` deliver this model's responses (once; from any thread)."""
        with self._lock:
            if self._loop is not None:
                return
            self._loop = loop
            model = self._model
        assert model is not None
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            loop.add_reader(model.fd, model.drain)
        else:
            loop.call_soon_threadsafe(loop.add_reader, model.fd, model.drain)

    def promotion(self) -> Callable[[InstanceSpec], BackendInstance] | None:
        return None  # a native backend runs in this process: no worker-process variant

    def unload(self) -> None:
        """Nothing of its own: the last instance's unload finalizes the model."""


class TritonCInstance:
    """One ``TRITONBACKEND_ModelInstance``; ``execute`` runs in the pool's worker (or inline)."""

    def __init__(self, model: TritonCModel, instance: Any) -> None:
        self._model = model
        self._instance = instance
        self._timings: tuple[int, int, int] | None = None
        #: the positions in the last batch of the requests the backend reported as failed
        #: (TRITONBACKEND_ModelInstanceReportStatistics): the pool counts them as failures
        self.last_failed: tuple[int, ...] = ()
        self._unloaded = False

    @property
    def inline_ok(self) -> bool:
        # a decoupled backend may block its execute until it has answered: never on the loop
        return not self._model.decoupled

    @property
    def uses_bls(self) -> bool:
        """Once a backend of this process sent a request to another model, never inline (bls.py)."""
        return bls.used()

    @property
    def last_timings(self) -> tuple[int, int, int] | None:
        return self._timings

    def execute(self, requests: list[InferRequest]) -> list[InferResponse] | None:
        drainer = self._model._drainer
        if drainer is not None:  # in a worker process
            self._execute_in_worker(requests, drainer)
            return None
        loop = self._model._loop
        if loop is None:
            stream = requests[0].stream
            if stream is not None:
                self._model.watch(stream.loop)
                loop = stream.loop
        # inline (on the loop's thread): the loop delivers what the backend sent as soon as it returns
        on_loop = loop is not None and asyncio._get_running_loop() is loop
        try:
            self._timings, self.last_failed = self._instance.execute(requests, on_loop)
        except InferdError:
            raise
        except Exception as e:
            if type(e).__name__ != "Error":
                raise
            raise library.translate(e) from None
        return None

    def _execute_in_worker(self, requests: list[InferRequest], drainer: _Drainer) -> None:
        """Not decoupled: the responses sent during the execute go out from this thread as it
        returns (no hop to the drain thread, which waits meanwhile), before the worker says it ended.
        Decoupled: the drain thread sends them as they come (an execute may wait until they went)."""
        try:
            if self._model.decoupled:
                self._timings, self.last_failed = self._instance.execute(requests, False)
            else:
                with drainer.lock:
                    self._timings, self.last_failed = self._instance.execute(requests, True)
        except Exception as e:
            if type(e).__name__ != "Error":
                raise
            raise library.translate(e) from None

    def unload(self) -> None:
        if self._unloaded:
            return
        self._unloaded = True
        try:
            self._instance.finalize()
        except Exception as e:
            log.error("%s", _error(e, "TRITONBACKEND_ModelInstanceFinalize failed: "))
        self._model._instance_gone()


class _Drainer:
    """A worker process's stand-in for the event loop's reader: a thread that drains the model's
    completion queue each time its eventfd is written (responses go out through the requests'
    ``ProxyStream``s as the backend sends them, from whichever thread). ``stop`` ends it."""

    def __init__(self, model: Any, name: str) -> None:
        self._model = model
        #: one drain at a time (a drain sends on the channel, letting go of the GIL meanwhile): the
        #: events of a request go out in their order
        self.lock = threading.Lock()
        self._stop_r, self._stop_w = os.pipe()
        self._thread = threading.Thread(target=self._run, name=f"inferd-tritonc-drain-{name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        poller = select.poll()
        poller.register(self._model.fd, select.POLLIN)
        poller.register(self._stop_r, select.POLLIN)
        while True:
            ready = poller.poll()
            if any(fd == self._stop_r for fd, _ in ready):
                return
            with self.lock:
                self._model.drain()

    def stop(self) -> None:
        os.write(self._stop_w, b"x")
        self._thread.join()
        os.close(self._stop_r)
        os.close(self._stop_w)
