"""The one load path (``Loader``): a model's config, its versions, each version's load, and their
registration in the ``ModelLifecycle``; every model at start (``Loader.load_all``), one model at a
time after it (engine/model_control.py)."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from google.protobuf import text_format

from inferd.backends import registry as backend_registry
from inferd.backends.base import BackendInstance, BackendLookup, BackendModel, LoadContext, ServerLinks
from inferd.core.summary import MetricsConfig
from inferd.engine.agents import AgentAction, AgentChain, load_agents
from inferd.engine.instance_update import wanted_instances
from inferd.engine.lifecycle import ModelLifecycle
from inferd.engine.model import Member, Model, ModelState
from inferd.engine.readiness import ReadinessCheck
from inferd.engine.routing import parse_weights
from inferd.engine.warmup import warm_up
from inferd.errors import ErrorCode, InferdError, InvalidArgumentError, UnavailableError
from inferd.gpu.devices import NO_GPUS, SupportedGpus
from inferd.logs import VERBOSE1
from inferd.repository import (
    DuplicateModel,
    ModelDir,
    autofill_backend_fields,
    load_model_config,
    normalize_config,
    require_io,
    select_versions,
    validate_config,
)
from inferd.repository.config.limits import check_limits
from inferd.repository.remote import RepositorySet, Unreadable
from inferd.repository.scan import key_namespace, scan_model_dir
from inferd.scheduling.ensemble import EnsembleScheduler, SubmitFn
from inferd.scheduling.instances import InstancePool
from inferd.scheduling.queue import BatchPolicy, queue_policy
from inferd.scheduling.rate_limiter import RateLimiter, held, open_gate
from inferd.scheduling.sequence import SequenceBatcher
from inferd.scheduling.watchdog import EXECUTE_TIMEOUT_PARAM, Watchdog

if TYPE_CHECKING:  # backends/process/uploaded.py is imported at the first upload, not at start
    from inferd.backends.process.uploaded import LoadAbort, UploadLimits
    from inferd.repository.config.schema import ModelConfig

log = logging.getLogger("inferd.repository")

#: Triton's Status::CodeString, which prefixes a load failure's reason
_STATUS_TEXT = {
    ErrorCode.UNKNOWN: "Unknown",
    ErrorCode.INTERNAL: "Internal",
    ErrorCode.NOT_FOUND: "Not found",
    ErrorCode.INVALID_ARG: "Invalid argument",
    ErrorCode.UNAVAILABLE: "Unavailable",
    ErrorCode.UNSUPPORTED: "Unsupported",
    ErrorCode.ALREADY_EXISTS: "Already exists",
    ErrorCode.CANCELLED: "Cancelled",
}


def status_text(e: InferdError) -> str:
    """An error as Triton prints a Status in a load failure's reason: "Internal: <message>"."""
    return f"{_STATUS_TEXT[e.code]}: {e.message}"


def without_paths(text: str, md: ModelDir) -> str:
    """``text`` (a failure's reason, which clients read) with the model's folder written as the
    model's name: ``/srv/models/m/1/model.py`` -> ``m/1/model.py``, an upload's private folder
    likewise. Clients learn nothing of the server's file system; the log keeps the full text."""
    for folder in sorted({str(md.path), str(md.path.resolve())}, key=len, reverse=True):
        text = text.replace(folder, md.name)
    return text


class FoundAtLoad(Exception):
    """A config problem the model's backend finds (its auto-complete: the model's file read, a
    Python model's ``auto_complete_config``): the reference's backend finds it when the version
    loads, so the version fails. Any other problem of ``prepare_config`` the reference finds when
    it reads the repository (the load fails before a version is tried)."""

    def __init__(self, error: InferdError) -> None:
        super().__init__(error.message)
        self.error = error


@dataclass(slots=True)
class Prepared:
    """A model ready to load: its config, the folder to load it from (a repository agent may have
    moved it) and its repository agents (engine/agents.py; None: it names none)."""

    config: ModelConfig
    md: ModelDir
    agents: AgentChain | None = None


def prepare_config(
    md: ModelDir,
    config_name: str | None,
    strict: bool,
    default_mbs: int,
    override: ModelConfig | None = None,
    gpus: SupportedGpus = NO_GPUS,
    settings: LoadSettings | None = None,
) -> Prepared:
    """The model's config, completed, normalised and checked; ``override``: a ModelConfig to use
    instead of the model's file (a load request's ``config``); ``gpus``: those its instance groups
    may use (``KIND_AUTO`` goes to them where the backend can run there: ``auto_gpu``). The
    config's repository agents act (``LOAD``) before anything reads the model's files. The
    auto-complete of a folder a client uploaded runs in a worker process, held to ``settings``'
    limits for uploaded models (backends/process/uploaded.py).
    FoundAtLoad for what the backend's auto-complete refuses, InferdError for the rest."""
    cfg = override if override is not None else load_model_config(md.path, config_name=config_name)[0]
    if md.mapped:  # served under a registration's name (repository/registered.py), as the reference
        cfg.name = md.name
    check_limits(cfg)  # before the backend reads a file or imports code the config names
    agents = load_agents(cfg, md.name, md.path)  # a checksum refused, a model decrypted elsewhere
    if agents is not None and agents.location is not None and agents.location != md.path:
        md = dataclasses.replace(
            scan_model_dir(agents.location, md.repository, name=md.name), uploaded=md.uploaded
        )
    try:
        return Prepared(_complete(md, cfg, strict, default_mbs, gpus, settings), md, agents)
    except BaseException:
        if agents is not None:
            agents.act(AgentAction.LOAD_FAIL)
            agents.release()
        raise


def _complete(
    md: ModelDir,
    cfg: ModelConfig,
    strict: bool,
    default_mbs: int,
    gpus: SupportedGpus,
    settings: LoadSettings | None,
) -> ModelConfig:
    """``prepare_config``'s steps once the config is read: auto-complete, normalise, check."""
    backends = settings.backends if settings is not None else backend_registry
    versions = [md.versions[v] for v in sorted(md.versions)]
    autofill_backend_fields(cfg, md.name, md.path, version_dirs=versions)
    if cfg.platform != "ensemble" and not strict:
        backend = backends.backend_for(cfg)
        first = versions[0] if versions else None
        try:
            if md.uploaded:  # it imports model.py or parses the model file: never in this process
                from inferd.backends.process.uploaded import UploadLimits, complete_in_worker

                limits = settings.uploads(cfg.backend) if settings is not None else UploadLimits()
                log_settings = settings.links.log_settings if settings is not None else None
                complete_in_worker(cfg, md.path, first, default_mbs, limits, log_settings and log_settings())
            else:
                backend.auto_complete(cfg, md.path, first, default_max_batch_size=default_mbs)
        except InferdError as e:
            raise FoundAtLoad(e) from e
    normalize_config(
        cfg,
        md.name,
        default_max_batch_size=default_mbs,
        gpus=gpus,
        auto_gpu=backends.auto_gpu(cfg, bool(gpus.gpus)),
    )
    validate_config(cfg, gpus)
    if cfg.platform != "ensemble" and cfg.backend != "python" and cfg.runtime != "model.py":
        # a Python model (a Python-based backend's too) may declare no tensors: the reference loads it READY
        require_io(cfg)
    if not strict and log.isEnabledFor(VERBOSE1):  # as the reference logs it (one escaped line here)
        log.log(VERBOSE1, "Server side auto-completed config: %s", text_format.MessageToString(cfg))
    return cfg


def _policy(cfg: ModelConfig) -> BatchPolicy:
    if cfg.max_batch_size > 0 and cfg.HasField("dynamic_batching"):
        db = cfg.dynamic_batching
        mbs = int(cfg.max_batch_size)
        preferred = tuple(int(x) for x in db.preferred_batch_size)
        # normalisation fills [max_batch_size] where none was given: batches then fill up to it,
        # exactly as without preferred sizes, on the cheaper path (queue.form_batch)
        if preferred == (mbs,):
            preferred = ()
        return BatchPolicy(
            max_batch_size=mbs,
            max_queue_delay_ns=int(db.max_queue_delay_microseconds) * 1000,
            preferred_batch_size=preferred,
            preserve_ordering=bool(db.preserve_ordering),
            optional_inputs=any(i.optional for i in cfg.input),
        )
    return BatchPolicy()


def _execute_timeout_ns(cfg: ModelConfig, default_s: float) -> int:
    """The model's ``execute_timeout_secs`` parameter, else the server's (scheduling/watchdog.py)."""
    param = cfg.parameters.get(EXECUTE_TIMEOUT_PARAM)
    if param is None:
        return int(default_s * 1e9)
    try:
        seconds = float(param.string_value)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0 or seconds == float("inf"):
        raise InvalidArgumentError(
            f"model '{cfg.name}': parameter '{EXECUTE_TIMEOUT_PARAM}' must be a number of seconds >= 0, "
            f"not '{param.string_value}'"
        )
    return int(seconds * 1e9)


@dataclass(slots=True)
class LoadSettings:
    """How the server loads models (from its options) and what loaded models get from it."""

    loop: asyncio.AbstractEventLoop
    #: queues an ensemble step's request, its responses to a callback (ServerCore.submit_step)
    submit_step: SubmitFn
    #: what loaded models may call back into (BLS, readiness, custom metrics)
    links: ServerLinks
    strict_model_config: bool = False
    config_name: str | None = None
    default_max_batch_size: int = 4
    load_threads: int = 4
    load_timeout_s: float = 0.0
    #: the execute watchdog's limit (``--model-execute-timeout-secs``; 0: none)
    execute_timeout_s: float = 0.0
    #: backend name -> its ``--backend-config`` settings ("" holds the global ones)
    backend_config: dict[str, dict[str, str]] = field(default_factory=dict)
    #: ``--rate-limit execution_count``: the server's rate limiter (None: off)
    rate_limiter: RateLimiter | None = None
    #: ``--model-load-retry-count``: loads of a version that failed, tried again before it is UNAVAILABLE
    load_retries: int = 0
    #: ``--model-namespacing``: models keyed by namespace (repository/namespaced.py)
    model_namespacing: bool = False
    #: the GPUs instance groups may use (gpu/devices.py: those NVML finds at or above
    #: ``--min-supported-compute-capability``; ServerCore passes them, none by default)
    gpus: SupportedGpus = NO_GPUS
    #: where a model's backend is found (a test's fake backend: tests/unit/engine/fake_backend.py)
    backends: BackendLookup = backend_registry
    #: ``--metrics-config``: the latency summaries and histograms its models keep
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    #: the server's execute watchdog (scheduling/watchdog.py), which watches pools with an execute
    #: timeout (None: each such pool has one of its own)
    watchdog: Watchdog | None = None

    def for_backend(self, name: str) -> dict[str, str]:
        return {**self.backend_config.get("", {}), **self.backend_config.get(name, {})}

    def uploads(self, backend: str) -> UploadLimits:
        """What the workers of an uploaded model of ``backend`` are held to."""
        from inferd.backends.process.uploaded import upload_limits

        return upload_limits(self.for_backend(backend), self.load_timeout_s)


def _step_key(lifecycle: ModelLifecycle, namespace: str, step: str) -> str:
    return lifecycle.step_key(step, namespace)


class Loader:
    """The one way a model loads, at start (``load_all``) and after it (engine/model_control.py):
    its config (``prepare``), its versions (``versions``), each version's load (``load_versions``,
    ``ensemble``) and their registration in the ``ModelLifecycle``, which alone writes their state."""

    def __init__(self, settings: LoadSettings, lifecycle: ModelLifecycle) -> None:
        self.settings = settings
        self.lifecycle = lifecycle

    async def prepare(self, md: ModelDir, override: ModelConfig | None = None) -> Prepared:
        """``prepare_config`` with the server's settings, on a thread (it reads the model's files,
        and an uploaded folder's auto-complete runs in a worker, held to its limits)."""
        s = self.settings
        return await asyncio.to_thread(
            prepare_config,
            md,
            s.config_name,
            s.strict_model_config,
            s.default_max_batch_size,
            override,
            s.gpus,
            s,
        )

    @staticmethod
    def versions(name: str, cfg: ModelConfig, md: ModelDir) -> list[int]:
        """The versions of ``md`` its config's ``version_policy`` serves."""
        return select_versions(cfg.version_policy, list(md.versions), model_name=name)

    async def load_versions(
        self, name: str, versions: list[int], md: ModelDir, cfg: ModelConfig
    ) -> list[Model]:
        """Each of ``versions`` of a non-ensemble model, one after the other (``load_bounded``);
        not registered yet."""
        return [await self.load_bounded(name, v, md, cfg) for v in versions]

    def ensemble(self, md: ModelDir, cfg: ModelConfig) -> list[Model]:
        """The versions of an ensemble, READY when its steps' models are (checked now, as at load)."""
        models = []
        lifecycle = self.lifecycle
        resolve: Callable[[str], str] | None = None
        if md.key:  # namespaced: a step goes to the model of the ensemble's own namespace first
            resolve = functools.partial(_step_key, lifecycle, key_namespace(md.key))
        for v in self.versions(md.name, cfg, md):
            model = Model(md.name, v, cfg, md.path, self.settings.metrics, key=md.key)
            try:
                model.scheduler = EnsembleScheduler(
                    model, lifecycle.is_ready, self.settings.submit_step, resolve
                )
                self.lifecycle.ready(model)
            except InferdError as e:
                self.lifecycle.unavailable(model, e.message)
            models.append(model)
        return models

    # -- at start ------------------------------------------------------------------------------------
    async def load_all(
        self, sources: RepositorySet, agents: dict[str, AgentChain] | None = None
    ) -> dict[str, ModelDir]:
        """Load every model of ``sources``: plain models in parallel (``load_threads`` at a time),
        then ensembles; the folders of the models it found; ``agents`` gets the repository agents of
        each model that names some (engine/agents.py). A model whose config fails is listed as
        failed by name; each version is registered as it loads, READY or not.

        A version whose load takes longer than ``load_timeout_s`` (0: no limit) is UNAVAILABLE with
        that reason and the others go on; if its load ever finishes, what it made is unloaded.
        """
        lifecycle = self.lifecycle
        found = await asyncio.to_thread(sources.scan)  # remote repositories are fetched: off the loop
        sem = asyncio.Semaphore(max(1, self.settings.load_threads))
        ensembles: list[tuple[ModelDir, ModelConfig]] = []

        async def one(name: str, entry: ModelDir | DuplicateModel | Unreadable) -> None:
            if not isinstance(entry, ModelDir):  # a duplicate, or a model or store that cannot be read
                lifecycle.refused(name, entry.reason)
                return
            async with sem:
                # the reference's error lines: a folder it cannot read a model from, then a model
                # whose version policy selects nothing (the log has the paths, the index not)
                try:
                    prepared = await self.prepare(entry)
                except FoundAtLoad as e:
                    log.error("Poll failed for model directory '%s': %s", name, e.error.message)
                    lifecycle.refused(name, without_paths(e.error.message, entry))
                    return
                except InferdError as e:
                    log.error("Poll failed for model directory '%s': %s", name, e.message)
                    lifecycle.refused(name, without_paths(e.message, entry))
                    return
                except Exception as e:
                    why = f"{type(e).__name__}: {e}"
                    log.error("Poll failed for model directory '%s': %s", name, why)
                    lifecycle.refused(name, without_paths(why, entry))
                    return
                cfg, entry = prepared.config, prepared.md
                if prepared.agents is not None and agents is not None:
                    agents[name] = prepared.agents
                try:
                    versions = self.versions(name, cfg, entry)
                except InferdError as e:
                    log.error("failed to load model '%s': %s", name, e.message)
                    lifecycle.refused(name, without_paths(e.message, entry))
                    return
                if cfg.platform == "ensemble":
                    ensembles.append((entry, cfg))
                    return
                loaded = []
                for v in versions:
                    model = (await self.load_versions(name, [v], entry, cfg))[0]
                    lifecycle.register(name, {v: model})
                    loaded.append(model)
                if prepared.agents is not None:
                    ok = all(m.ready for m in loaded)
                    prepared.agents.act(AgentAction.LOAD_COMPLETE if ok else AgentAction.LOAD_FAIL)

        await asyncio.gather(*(one(n, e) for n, e in sorted(found.items())))
        for entry, cfg in ensembles:
            lifecycle.register(entry.key or entry.name, {m.version: m for m in self.ensemble(entry, cfg)})
        return {name: entry for name, entry in found.items() if isinstance(entry, ModelDir)}

    # -- one version ---------------------------------------------------------------------------------
    async def load_bounded(self, name: str, version: int, md: ModelDir, cfg: ModelConfig) -> Model:
        """``load_version`` on a worker thread, given up on after the load timeout (the thread
        cannot be stopped: a load that finishes later is unloaded at once). An uploaded model's
        load always has a timeout, and is stopped there: its workers are killed, and what it made
        is released before this returns (backends/process/uploaded.py)."""
        settings = self.settings
        timeout_s, loop = settings.load_timeout_s, settings.loop
        abort = None
        if md.uploaded:
            from inferd.backends.process.uploaded import LoadAbort

            timeout_s, abort = settings.uploads(cfg.backend).load_timeout_s, LoadAbort()
        future = asyncio.ensure_future(asyncio.to_thread(self.load_version, name, version, md, cfg, abort))
        if not timeout_s:
            return await future
        done, _ = await asyncio.wait({future}, timeout=timeout_s)
        if done:
            return future.result()
        log.error("loading '%s' version %d did not finish within %g s", name, version, timeout_s)
        if abort is not None:
            abort.fire(f"loading did not finish within {timeout_s:g} s (--model-load-timeout-secs)")
            # its workers are gone, so the load's thread ends: wait for it to have released everything
            await asyncio.wait({future}, timeout=_ABORT_GRACE_S)

        def late(f: asyncio.Future[Model]) -> None:
            if f.cancelled() or f.exception() is not None:
                return
            model = f.result()
            if model.scheduler is not None:
                log.warning("'%s' version %d finished loading after its timeout: unloading it", name, version)
                task = loop.create_task(model.scheduler.stop(0))
                _LATE.add(task)
                task.add_done_callback(_LATE.discard)

        future.add_done_callback(late)
        model = Model(md.name, version, cfg, md.path, settings.metrics, key=name)
        self.lifecycle.unavailable(model, f"{_GIVEN_UP} {timeout_s:g} s (--model-load-timeout-secs)")
        return model

    def load_version(
        self, name: str, version: int, md: ModelDir, cfg: ModelConfig, abort: LoadAbort | None = None
    ) -> Model:
        """Load one version of a non-ensemble model in this thread; failures leave it UNAVAILABLE
        once ``load_retries`` more tries failed too (the reference's ``--model-load-retry-count``).
        ``abort``: an uploaded model's, which stops the load by killing its workers."""
        retries = self.settings.load_retries
        model = self._load_once(name, version, md, cfg, abort)
        for attempt in range(1, retries + 1):
            if model.state is ModelState.READY:
                break
            log.warning(
                "loading '%s' version %d failed: %s; retry %d of %d",
                name,
                version,
                model.reason,
                attempt,
                retries,
            )
            model = self._load_once(name, version, md, cfg, abort)
        if model.state is not ModelState.READY and model.reason:
            log.error(
                "failed to load '%s' version %d: %s", name, version, model.reason
            )  # the reference's line
            self.lifecycle.unavailable(
                model, without_paths(model.reason, md)
            )  # clients read it: no server paths
        return model

    def _load_once(
        self, name: str, version: int, md: ModelDir, cfg: ModelConfig, abort: LoadAbort | None
    ) -> Model:
        """One try at loading a version (see ``load_version``)."""
        settings = self.settings
        log.info("loading: %s:%d", name, version)  # as the reference logs it
        t0 = time.monotonic()
        model = Model(md.name, version, cfg, md.path, settings.metrics, key=name)
        try:
            execute_timeout_ns = _execute_timeout_ns(cfg, settings.execute_timeout_s)
            parse_weights(cfg)  # a bad version_weights fails the load, not the routing
            backend = settings.backends.backend_for(cfg)
            ctx = LoadContext(
                md.name,
                version,
                md.path,
                md.versions[version],
                cfg,
                settings.links.infer_blocking,
                settings.links,
                # a Python-based backend's model (runtime model.py) has the python backend's, as the reference's
                settings.for_backend("python" if cfg.runtime == "model.py" else cfg.backend),
                settings.load_timeout_s,
                uploaded=md.uploaded,
            )
            bmodel: BackendModel
            if md.uploaded:  # a client's files: read and run in worker processes only
                from inferd.backends.process.uploaded import contained_model

                limits = settings.uploads(cfg.backend)
                contained = contained_model(ctx, limits, t0 + limits.load_timeout_s)
                if abort is not None:
                    abort.track(contained)
                bmodel = contained
            else:
                bmodel = backend.load(ctx)
            wanted = wanted_instances(cfg)
            specs = [spec for spec, _ in wanted]
            # registered first: a model the limiter cannot fit is refused before it initializes, and each
            # instance's initialize and warmup wait for its resources (scheduling/rate_limiter.py)
            gate = open_gate(settings.rate_limiter, cfg, [(s.name, s.device_id) for s in specs])
            instances: list[tuple[str, BackendInstance]] = []
            try:
                for i, spec in enumerate(specs):
                    with held(gate, i):
                        instances.append((spec.name, bmodel.create_instance(spec)))
                warm_up(cfg, md.path, instances, settings.loop, gate)
                promotion = bmodel.promotion()
                model.members = [Member(spec, sig, i) for i, (spec, sig) in enumerate(wanted)]
                # inside the try: a scheduler that cannot start (no thread left) releases the instances
                model.scheduler = _scheduler(
                    model, md, instances, settings, execute_timeout_ns, gate, promotion
                )
            except BaseException:
                for _, inst in instances:
                    inst.unload()
                if gate is not None:
                    gate.close()
                raise
            model.backend_model = bmodel
            check = getattr(bmodel, "ready_check", None)  # optional: a Python model's is_ready()
            ready_fn = check() if check is not None else None
            if ready_fn is not None:
                model.ready_check = ReadinessCheck(f"model '{name}' version {version}", ready_fn)
            self.lifecycle.ready(model)
            model.load_seconds = time.monotonic() - t0
            log.info("successfully loaded '%s' version %d", name, version)
            log.log(
                VERBOSE1,
                "'%s' version %d: backend %s, %d instance(s), loaded in %.0f ms",
                name,
                version,
                cfg.backend,
                len(instances),
                model.load_seconds * 1000,
            )
        except InferdError as e:
            self.lifecycle.unavailable(model, status_text(e))
        except Exception as e:  # a model's own import or initialize error: keep the others serving
            self.lifecycle.unavailable(model, f"{type(e).__name__}: {e}")
        return model


def _scheduler(
    model: Model,
    md: ModelDir,
    instances: list[tuple[str, BackendInstance]],
    settings: LoadSettings,
    execute_timeout_ns: int,
    gate: Any,
    promotion: Any,
) -> SequenceBatcher | InstancePool:
    """The scheduler of a version whose instances are up: a SequenceBatcher for a stateful model
    (scheduling/sequence.py), else an InstancePool."""
    cfg, name, version = model.config, model.name, str(model.version)
    if cfg.HasField("sequence_batching"):
        return SequenceBatcher(
            name,
            version,
            cfg,
            instances,
            model.stats,
            settings.loop,
            model_dir=md.path,
            execute_timeout_ns=execute_timeout_ns,
            gate=gate,
            watchdog=settings.watchdog,
        )
    return InstancePool(
        name,
        version,
        instances,
        _policy(cfg),
        model.stats,
        settings.loop,
        promote=None if promotion is None else (lambda: {m.index: promotion(m.spec) for m in model.members}),
        queue=queue_policy(cfg),
        execute_timeout_ns=execute_timeout_ns,
        gate=gate,
        watchdog=settings.watchdog,
    )


_GIVEN_UP = "Unavailable: loading did not finish within"
#: how long an uploaded model's stopped load may take to release what it made (its instances'
#: unloads, each bounded by backends/process/instance.py STOP_TIMEOUT_S)
_ABORT_GRACE_S = 15.0
#: unloads of loads that finished after their timeout (owned until they end)
_LATE: set[asyncio.Task[None]] = set()


def check_mode_allows_load(mode: str) -> None:
    """Load/unload requests are refused unless the control mode is explicit."""
    if mode != "explicit":
        raise UnavailableError("explicit model load / unload is not allowed if polling is enabled")
