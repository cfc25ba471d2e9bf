"""ServerCore: lifecycle, health, metadata, the request lifecycle, statistics, repository index.

Front ends and the in-process API are its clients; request semantics live here, codecs there.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from inferd._version import __version__
from inferd.backends import registry as backend_registry
from inferd.backends.base import BackendLookup, MetricRegistry, ResponseCallback, ServerLinks, WorkerProcesses
from inferd.backends.tritonc.library import configure as configure_c_backends
from inferd.core.request import InferRequest
from inferd.core.response import InferResponse, ResponseStream
from inferd.core.response_path import Post, ResponsePath, TracedPath
from inferd.core.stream_flow import StreamLimits
from inferd.core.unsent import UnsentBudget
from inferd.engine import reports
from inferd.engine.cache import ResponseCache, look_up
from inferd.engine.classification import apply_classification
from inferd.engine.facade import Decoder
from inferd.engine.lifecycle import ModelLifecycle
from inferd.engine.links import ModelLinks
from inferd.engine.model import Model
from inferd.engine.model_control import ModelControl
from inferd.engine.on_demand import MemoryBudget, worker_bytes
from inferd.engine.overrides import Uploads
from inferd.engine.readiness import ReadinessCheck
from inferd.engine.repository_manager import Loader, LoadSettings
from inferd.engine.status import status
from inferd.engine.validate import validate_request, validation_key
from inferd.errors import (
    InferdError,
    InternalError,
    NotFoundError,
    UnavailableError,
    UnsupportedError,
)
from inferd.gpu.devices import gpus_for_models
from inferd.logs import LogSettings
from inferd.scheduling.rate_limiter import RateLimiter
from inferd.scheduling.watchdog import Watchdog
from inferd.server_config import CoreConfig

if TYPE_CHECKING:
    from inferd.metrics.gpu import GpuMetrics

log = logging.getLogger("inferd")

#: The Triton protocol version inferd answers as (clients compare it, not inferd's own version).
PROTOCOL_VERSION = "2.51.0"
#: The extensions, as the reference lists them and in its order: inferd serves every one (sequence
#: batching, unload_dependents and the dynamic batcher's queue policies included); front ends may add
EXTENSIONS = (
    "classification",
    "sequence",
    "model_repository",
    "model_repository(unload_dependents)",
    "schedule_policy",
    "model_configuration",
    "system_shared_memory",
    "cuda_shared_memory",
    "binary_tensor_data",
    "parameters",
    "statistics",
    "trace",
    "logging",
)


#: (request, response) validations remembered per model version
VALIDATION_CACHE_SIZE = 256


class ServerCore:
    """The core of one inference server: models, their schedulers, the request lifecycle, statistics.

    Front ends (HTTP, gRPC, the in-process API) are codecs around it: they decode, call
    ``submit`` once, and encode what arrives on the stream; ``inferd.runtime`` composes them.
    """

    def __init__(
        self,
        config: CoreConfig,
        custom_metrics: MetricRegistry | None = None,
        rate_limiter: RateLimiter | None = None,
        unsent: UnsentBudget | None = None,
        watchdog: Watchdog | None = None,
        logs: LogSettings | None = None,
        backends: BackendLookup = backend_registry,
    ) -> None:
        """``backends``: where its models' backends are found (a test's fake: tests/unit/engine)."""
        #: its part of the server's configuration (server_config.py), parsed once by the Runtime
        self.config = config
        #: the execute watchdog of this server's models (the Runtime's; None: one of its own, which
        #: ``stop`` ends)
        self.watchdog = watchdog if watchdog is not None else Watchdog()
        self._own_watchdog = watchdog is None
        #: the server's log switches (the Runtime's), which its worker processes start with
        self.logs = logs
        #: the process's budget of response bytes held for clients (core/unsent.py; the Runtime's),
        #: which decoupled models' streams count in; None: streams are bounded by their windows alone
        self.unsent = unsent
        #: ``--rate-limit execution_count`` (scheduling/rate_limiter.py; None: off)
        self.rate_limiter = rate_limiter
        #: the custom metrics its models define (``inferd.metrics.custom``; the Runtime gives one)
        self.custom_metrics = custom_metrics
        #: every model version, and the one writer of their states (engine/lifecycle.py)
        self.registry = ModelLifecycle(config.control.namespacing)
        #: how its models' threads call back into it (BLS, pb_utils' model control: engine/links.py)
        self.links = ModelLinks(self)
        self._backends = backends
        #: its models' worker processes and what befell them (on /metrics: metrics/collector.py)
        self.worker_processes = WorkerProcesses()
        self.loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._live = False
        self._stopping = False  # new requests are refused (``refuse_requests``)
        self._stopped = False  # ``stop`` has begun
        self.version = __version__
        #: streams of the requests submitted and not answered yet (failed at a forced shutdown)
        self._open: set[ResponseStream] = set()
        #: a stream's final response takes it out of ``_open`` (one bound method for all of them)
        self._closed = self._open.discard
        #: the response path (core/response_path.py) of every request that needs no other stage
        self._plain_path = ResponsePath(self._closed)
        #: how far a decoupled model's responses may run ahead of their client (core/stream_flow.py)
        self.stream_limits = StreamLimits(
            config.stream_max_unread_bytes, config.stream_stall_timeout_s, unsent
        )
        #: loads and unloads after start (engine/model_control.py); made by ``start``
        self.control: ModelControl | None = None
        self._poll: asyncio.Task[None] | None = None
        #: the response cache (--cache-config local,size=N), None when off (engine/cache.py)
        self.response_cache = ResponseCache(config.cache_bytes) if config.cache_bytes is not None else None
        #: ``--model-memory-budget``: requests load models on demand (engine/on_demand.py)
        self.budget: MemoryBudget | None = None
        #: requests waiting for their model's load on demand
        self._later: set[asyncio.Task[None]] = set()
        #: the GPUs' families on /metrics and the status page (metrics/gpu.py; the Runtime sets it
        #: where GPUs are found, None elsewhere)
        self.gpu_metrics: GpuMetrics | None = None

    # -- lifecycle -------------------------------------------------------------------------------
    async def start(self) -> None:
        """Load the repositories: every model, or in explicit mode those of ``--load-model``."""
        self.loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._live = True
        control, backends = self.config.control, self.config.backends
        settings = LoadSettings(
            loop=self.loop,
            submit_step=self.submit_step,
            links=ServerLinks(
                self.links.infer_blocking,
                self.links.infer_async,
                self.model_ready,
                self.custom_metrics,
                self.links.model_control_blocking,
                processes=self.worker_processes,
                log_settings=self.logs.settings if self.logs is not None else None,
            ),
            strict_model_config=control.strict_model_config,
            config_name=control.config_name,
            default_max_batch_size=backends.default_max_batch_size,
            load_threads=control.load_threads,
            load_timeout_s=control.load_timeout_s,
            execute_timeout_s=backends.execute_timeout_s,
            backend_config=backends.as_dicts(),
            rate_limiter=self.rate_limiter,
            load_retries=control.load_retries,
            model_namespacing=control.namespacing,
            gpus=gpus_for_models(backends.min_compute_capability),
            backends=self._backends,
            metrics=self.config.metrics,
            watchdog=self.watchdog,
        )
        # C/C++ backends (backends/tritonc): where their libraries are, and what they call back into (their
        # Initialize may create custom metrics before any model loads)
        configure_c_backends(backends.directory, settings.links)
        self.control = ModelControl(
            control.mode,
            list(control.repositories),
            Loader(settings, self.registry),
            drain_timeout_s=self.config.exit_timeout_s,
            uploads=Uploads(control.upload_max_bytes),
        )
        if control.memory_budget is not None:
            self.budget = self.control.budget = MemoryBudget(
                control.memory_budget, self.registry, partial(worker_bytes, self.worker_processes)
            )
        await self.control.start(list(control.load_models))
        if control.mode == "poll" and control.poll_secs > 0:
            self._poll = self.loop.create_task(self.control.poll_forever(control.poll_secs))

    async def stop(self, timeout_s: float | None = None) -> None:
        """Stop taking requests, finish in-flight ones (up to the exit timeout), unload."""
        if self._stopped:
            return
        self._stopped = self._stopping = True
        if self._poll is not None:
            self._poll.cancel()
        for task in list(self._later):  # requests still waiting for a load on demand
            task.cancel()
        timeout = self.config.exit_timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout  # one deadline for all: not one timeout per model
        models = self.registry.all_versions()
        # ensembles first: they feed the others
        models.sort(key=lambda m: 0 if m.platform == "ensemble" else 1)
        for m in models:
            if m.scheduler is not None:
                await m.scheduler.stop(max(0.0, deadline - time.monotonic()))
            self.registry.unloaded(m)
        self._live = False
        if self._own_watchdog:
            self.watchdog.close()

    def inflight(self) -> int:
        """Requests not answered yet: queued, executing, or answered later (decoupled and async
        Python models hand a request back before its final response)."""
        queued = sum(
            m.scheduler.inflight()
            for versions in self.registry.models.values()
            for m in versions.values()
            if m.scheduler is not None
        )
        return max(queued, len(self._open))

    def load_failures(self) -> list[tuple[str, str, str]]:
        """(model, version, reason) of every model or version that failed to load."""
        return reports.load_failures(self.registry)

    def model_table(self) -> list[tuple[str, str, str]]:
        """(model, version, status) rows as the reference prints them at start."""
        return reports.model_table(self.registry)

    # -- health and metadata ----------------------------------------------------------------------
    def live(self) -> bool:
        return self._live and not self._stopping

    def ready(self) -> bool:
        if not self.live():
            return False
        return not (self.config.strict_readiness and self.load_failures())

    def metadata(self, extra_extensions: tuple[str, ...] = ()) -> dict[str, Any]:
        return {
            "name": self.config.id,
            "version": PROTOCOL_VERSION,
            "extensions": list(EXTENSIONS + extra_extensions),
        }

    def get_model(self, name: str, version: str = "") -> Model:
        """The READY model version (default: the highest READY one) or NotFoundError."""
        registry = self.registry
        if not version:
            m = registry.ready_default.get(name)
            if m is not None:
                return m
        key = registry.resolve(name)  # --model-namespacing: the key of that name (or ambiguous)
        if not version:
            m = registry.ready_default.get(key)
            if m is not None:
                return m
            if key in registry.models or key in registry.failed:
                raise NotFoundError(f"Request for unknown model: '{name}' has no available versions")
            raise registry.unknown(name)
        versions = registry.models.get(key)
        if versions is None:
            if key in registry.failed:
                raise NotFoundError(f"Request for unknown model: '{name}' has no available versions")
            raise registry.unknown(name)
        m = versions.get(int(version))
        if m is None:
            raise NotFoundError(f"Request for unknown model: '{name}' version {int(version)} is not found")
        if not m.ready:
            raise UnavailableError(
                f"Request for unknown model: '{name}' version {int(version)} is not at ready state"
            )
        return m

    def model_ready(self, name: str, version: str = "") -> bool:
        try:
            return self.get_model(name, version).ready
        except InferdError:
            return False

    def ready_check(self, name: str, version: str = "") -> ReadinessCheck | None:
        """The READY model version's own readiness check (a Python model's ``is_ready``), if it has one."""
        try:
            return self.get_model(name, version).ready_check
        except InferdError:
            return None

    async def model_ready_checked(self, name: str, version: str = "") -> bool:
        """What the model-ready endpoints answer: READY, and its own check (engine/readiness.py) passes."""
        if not self.model_ready(name, version):
            return False
        check = self.ready_check(name, version)
        return check is None or await check()

    def model_metadata(self, name: str, version: str = "") -> dict[str, Any]:
        m = self.get_model(name, version)
        inputs, outputs = m.io_metadata()
        if version:  # asked for one version: the reference lists that one alone
            versions = [m.version_str]
        else:
            versions = [str(v) for v, mm in sorted(self.registry.models[m.key].items()) if mm.ready]
        return {
            "name": m.name,
            "versions": versions,
            "platform": m.platform,
            "inputs": inputs,
            "outputs": outputs,
        }

    def model_config(self, name: str, version: str = "") -> dict[str, Any]:
        return self.get_model(name, version).config_json()

    # -- inference --------------------------------------------------------------------------------
    def submit(
        self, name: str, version: str, decode: Decoder, *, decoupled_error: str | None = None
    ) -> ResponseStream:
        """The one way a request enters the core; its responses arrive on the returned stream.

        Refused while the server stops; then, in the reference's order: the model is looked up (READY, ``version`` "" the default one),
        refused with ``decoupled_error`` when the caller takes exactly one response and the model
        is decoupled, ``decode(model)`` turns the caller's wire data into the request, the request
        is validated (once per model version and validation key: the decoder's, else
        ``engine.validate.validation_key``), the classification extension is set
        to run on its responses, and it is queued on the model's scheduler. Statistics are the
        scheduler's; cancellation is ``stream.cancel(reason)``.
        """
        if self._stopping:
            raise UnavailableError("Server is stopping")
        registry = self.registry
        route = None if version else registry.routes.get(name)
        if route is not None:
            model = route.pick()
        else:
            found = None if version else registry.ready_default.get(name)
            if found is not None:
                model = found
            else:
                try:
                    model = self.get_model(name, version)
                except InferdError as e:
                    if self.budget is None:
                        raise
                    return self._submit_later(name, version, decode, decoupled_error, e)
        if self.budget is not None:
            self.budget.touch(model.key)
        return self._enqueue(model, decode, decoupled_error, None)

    def _enqueue(
        self, model: Model, decode: Decoder, decoupled_error: str | None, stream: ResponseStream | None
    ) -> ResponseStream:
        """``submit`` once the model is found: decode, validate, queue (on ``stream``, else a new one)."""
        if decoupled_error is not None and model.decoupled:
            raise UnsupportedError(decoupled_error)
        request = decode(model)
        key = request.validation_key
        if key is None:
            key = validation_key(request)
        validated = model.validated
        batch_size = None if key is None else validated.get(key)
        if batch_size is not None:  # validated before: the same names, datatypes, shapes and sizes
            request.batch_size = batch_size
        else:
            validate_request(request, model)
            if key is not None:
                if len(validated) >= VALIDATION_CACHE_SIZE:
                    validated.pop(next(iter(validated)))
                validated[key] = request.batch_size
        assert self.loop is not None and model.scheduler is not None
        if stream is None:
            stream = ResponseStream(self.loop)
        if model.decoupled:
            stream.limit(self.stream_limits)
        request.stream = stream
        self._open.add(stream)
        classify = None
        outputs = request.outputs
        if outputs is not None:
            for o in outputs:
                if o.classification > 0:
                    wanted = {o.name: o.classification for o in outputs if o.classification > 0}
                    classify = partial(apply_classification, wanted, model)
                    break
        if (
            classify is None
            and request.trace is None
            and self.response_cache is None
            and model.stats.first_response is None
        ):
            stream.path = self._plain_path  # nothing but the count of open requests
        else:
            hit = self._build_path(model, request, stream, classify)
            if hit is not None:  # a response cache hit: answered, never queued
                stream.deliver(hit, True)
                return stream
        try:
            model.scheduler.enqueue(request)
        except BaseException:
            self._open.discard(stream)
            raise
        return stream

    def _build_path(
        self, model: Model, request: InferRequest, stream: ResponseStream, classify: Post | None
    ) -> InferResponse | None:
        """The request's response path (core/response_path.py): every stage the core knows of
        (``classify``: the classification extension's, found by ``_enqueue``); a response cache
        hit's answer instead of queueing (None: queue it)."""
        histogram = model.stats.first_response  # --metrics-config histogram_latencies=true
        first = None if histogram is None else partial(histogram.observe_since, request.t_start_ns)
        trace = request.trace  # sampled by its front end, or a traced request's child
        if trace is not None:
            trace.attach(request, model.name, model.version_str)
        hit = cache_post = None
        if self.response_cache is not None:
            hit, cache_post = look_up(self.response_cache, model, request)
        if first is None and cache_post is None and classify is None:
            if trace is None:
                stream.path = self._plain_path
            elif trace.output_capture is None:
                stream.path = TracedPath(self._closed, trace.ended)
            else:
                stream.path = ResponsePath(self._closed, None, trace.ended, trace.output_capture)
        else:
            stream.path = ResponsePath(
                self._closed,
                first,
                None if trace is None else trace.ended,
                None if trace is None else trace.output_capture,
                cache_post,
                classify,
            )
        return hit

    def _submit_later(
        self, name: str, version: str, decode: Decoder, decoupled_error: str | None, lookup: InferdError
    ) -> ResponseStream:
        """A request for a model that is not loaded, under a memory budget: its stream now, the request
        queued once the model loaded (or the error on the stream: ``lookup`` for a model no
        repository holds, the reference's text)."""
        assert self.loop is not None
        stream = ResponseStream(self.loop)
        self._open.add(stream)
        stream.path = self._plain_path
        task = self.loop.create_task(
            self._load_then_enqueue(name, version, decode, decoupled_error, lookup, stream)
        )
        self._later.add(task)
        task.add_done_callback(self._later.discard)
        return stream

    async def _load_then_enqueue(
        self,
        name: str,
        version: str,
        decode: Decoder,
        decoupled_error: str | None,
        lookup: InferdError,
        stream: ResponseStream,
    ) -> None:
        control, budget = self.control, self.budget
        assert control is not None and budget is not None
        try:
            if not await asyncio.to_thread(control.knows, name):
                raise lookup
            for attempt in range(3):  # a model unloaded again before this request reached it: reload
                await budget.ensure_loaded(name, control.load_if_needed)
                if self._stopping:
                    raise UnavailableError("Server is stopping")
                try:
                    model = self.get_model(name, version)
                except InferdError:
                    if attempt == 2 or self.registry.is_ready(name):  # the version asked is not there
                        raise
                    continue
                budget.touch(model.key)
                self._enqueue(model, decode, decoupled_error, stream)
                return
        except InferdError as e:
            stream.deliver(InferResponse(name, version, error=e), True)
        except asyncio.CancelledError:
            stream.deliver(InferResponse(name, version, error=UnavailableError("Server is stopping")), True)
            raise
        except Exception as e:  # a decoder's bug: answered, logged
            log.exception("queueing a request for '%s' after its load failed", name)
            stream.deliver(InferResponse(name, version, error=InternalError(str(e))), True)

    def refuse_requests(self) -> None:
        """From now on a new request is answered UNAVAILABLE "Server is stopping"; at once, not at
        ``stop``'s first step: a request read in between would reach a scheduler already failing."""
        self._stopping = True

    def fail_open_requests(self, error: InferdError) -> int:
        """Answer every request still open with ``error`` (a shutdown past its exit timeout: an error
        answer, not an empty reply); the number answered."""
        streams = list(self._open)
        for s in streams:
            s.cancel(error.message)
            s.deliver(InferResponse("", "", error=error), True)
        return len(streams)

    def submit_step(self, request: InferRequest, callback: ResponseCallback) -> None:
        """On the loop: queue ``request`` (an ensemble step's), its responses handed to ``callback``;
        a request refused before it is queued raises, as ``submit`` does."""
        self.submit(request.model_name, request.model_version, lambda _model: request).set_callback(callback)

    async def infer(self, request: InferRequest) -> InferResponse:
        """Run a whole request built in-process (the in-process API, ensemble steps, BLS); errors of
        the model come back in ``response.error``, errors before it is queued are raised."""
        stream = self.submit(request.model_name, request.model_version, lambda _model: request)
        return await stream.first()

    # -- statistics and repository ----------------------------------------------------------------
    def statistics(self, name: str = "", version: str = "") -> dict[str, Any]:
        return reports.statistics(self.registry, name, version)

    async def gather_statistics(self, name: str = "", version: str = "") -> dict[str, Any]:
        """The whole server's statistics: one process's are its own."""
        return self.statistics(name, version)

    def status(self) -> dict[str, Any] | None:
        """The live status page's data, or None with ``--allow-status-page=false``."""
        if not self.config.status_page:
            return None
        server = {"id": self.config.id, "version": self.version, "live": self.live(), "ready": self.ready()}
        gpus = self.gpu_metrics.status() if self.gpu_metrics is not None else None
        return status(self.repository_index(), self.registry.models, server, gpus)

    def repository_index(self, ready_only: bool = False) -> list[dict[str, Any]]:
        known = self.control.known_models() if self.control is not None else []
        return reports.repository_index(self.registry, known, ready_only)

    async def load_model(
        self, name: str, config: str | None = None, files: dict[str, bytes] | None = None
    ) -> None:
        """The repository API's load: ``config`` a JSON config override, ``files`` the ``file:``
        overrides (path -> contents); returns once the model is READY (or raises why not)."""
        if self.control is None:
            raise UnavailableError("the server has not started")
        await self.control.load(name, config, files)

    async def unload_model(self, name: str, unload_dependents: bool = False) -> None:
        """The repository API's unload: returns once the model drained and was released."""
        if self.control is None:
            raise UnavailableError("the server has not started")
        await self.control.unload(name, unload_dependents)

    async def register_repository(self, path: str, mapping: dict[str, str], label: str = "") -> None:
        """Serve the models of folder ``path`` too (SageMaker's multi-model loads): ``mapping``
        model name -> subfolder (repository/registered.py); ``label`` the caller's name for it."""
        if self.control is None:
            raise UnavailableError("the server has not started")
        await self.control.register_repository(Path(path), mapping, label)

    async def unregister_repository(self, path: str) -> None:
        if self.control is None:
            raise UnavailableError("the server has not started")
        await self.control.unregister_repository(Path(path))

    def registrations(self) -> list[tuple[str, str, dict[str, str]]]:
        """The folders registered now, oldest first: (label, path, mapping)."""
        return self.control.registrations() if self.control is not None else []
