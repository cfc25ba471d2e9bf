"""Backend protocols: how the core loads a model version and executes batches of requests."""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from inferd.core.request import InferRequest
from inferd.core.response import InferResponse

if TYPE_CHECKING:
    from inferd.repository.config.schema import ModelConfig, ModelInstanceGroup


@dataclass(slots=True, frozen=True)
class InstanceSpec:
    """One model instance to create: its name (``<group>_<i>``; a ``KIND_GPU`` group's ``i``-th
    instance bears it on each of its GPUs, as in the reference), kind and device (the CUDA id of a
    ``KIND_GPU`` instance, else 0)."""

    name: str
    kind: str  # "CPU" | "GPU" | "MODEL"
    device_id: int


def instance_devices(group: ModelInstanceGroup) -> list[int]:
    """The devices a (normalised) instance group places its ``count`` instances on, each: every GPU
    it lists for ``KIND_GPU`` (``count`` x GPUs instances in all, as the reference's
    ``PrepareInstances``), else device 0 once."""
    return list(group.gpus) if group.kind == group.KIND_GPU else [0]


#: receives the responses of a request run for a model (BLS), on the server's loop: each response
#: (None: only the final flag) and whether it is the last
ResponseCallback = Callable[[InferResponse | None, bool], None]
#: ``ServerLinks.infer_async``: (request, callback, decoupled_error) -> what cancels it, or None
InferAsync = Callable[[InferRequest, ResponseCallback, str | None], Callable[[str], None] | None]


class MetricError(Exception):
    """A custom metric call the registry refused; ``str()`` is the reference's message. ``stub``: a
    check the reference's Python stub makes itself (its message gets no server prefix)."""

    def __init__(self, message: str, stub: bool = False) -> None:
        super().__init__(message)
        self.stub = stub


class MetricRegistry(Protocol):
    """The server's custom metrics as models reach them (``inferd.metrics.custom``): plain values in
    and out, so a model in another process can forward the calls. ``owner`` is the model version
    whose objects hold the references (``name:version``); every call may raise MetricError."""

    def family_new(self, owner: str, name: str, description: str, kind: int) -> None: ...

    def family_delete(self, owner: str, name: str) -> None: ...

    def metric_new(
        self, owner: str, family: str, labels: tuple[tuple[str, str], ...], buckets: tuple[float, ...] | None
    ) -> int: ...

    def metric_delete(self, owner: str, metric: int) -> None: ...

    def metric_op(self, metric: int, op: str, value: float = 0.0) -> float: ...

    def release_owner(self, owner: str) -> None: ...


class WorkerProcess(Protocol):
    """A model instance in a worker process of its own (backends/process/instance.py)."""

    def running_pid(self) -> int:
        """Its worker's process id while one runs, else 0."""
        ...


class WorkerProcesses:
    """One server's worker processes of model instances: those live now, by model (their memory
    counts in the model's size under a memory budget: engine/on_demand.py), and what befell them
    (``events``: (model, version, "exited" | "restarted") -> count, on /metrics). Each server has its
    own (in its ``ServerLinks``): two servers in one process count apart."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._live: dict[str, set[WorkerProcess]] = {}
        self.events: collections.Counter[tuple[str, str, str]] = collections.Counter()

    def add(self, model: str, worker: WorkerProcess) -> None:
        with self._lock:
            self._live.setdefault(model, set()).add(worker)

    def discard(self, model: str, worker: WorkerProcess) -> None:
        with self._lock:
            workers = self._live.get(model)
            if workers is not None:
                workers.discard(worker)
                if not workers:
                    del self._live[model]

    def pids(self, model: str) -> list[int]:
        """The worker processes running now for ``model``'s instances (every version's)."""
        with self._lock:
            workers = list(self._live.get(model, ()))
        return [pid for pid in (w.running_pid() for w in workers) if pid]

    def count(self, model: str, version: int, event: str) -> None:
        """A worker of ``model`` ``version`` ``event`` ("exited" unexpectedly, "restarted")."""
        with self._lock:
            self.events[(model, str(version), event)] += 1


ModelControlLink = Callable[[str, str, str, str, "dict[str, bytes] | None", bool], None]


@dataclass(slots=True, frozen=True)
class ServerLinks:
    """What a loaded model may call back into: its server (None outside one)."""

    #: runs a request on another model from a worker thread and waits for its first response (BLS)
    infer_blocking: Callable[[InferRequest], list[InferResponse]] | None = None
    #: submits a request to another model from any thread; its responses go to the callback on the
    #: server's loop (in a worker process: on its read thread). The third argument, when not None,
    #: refuses a decoupled model with that text. It may return what cancels the request (with a
    #: reason); None: the caller cancels ``request.stream`` on the server's loop itself.
    infer_async: InferAsync | None = None
    #: whether model (name, version "" for any) is READY
    model_ready: Callable[[str, str], bool] | None = None
    #: the server's custom metrics
    metrics: MetricRegistry | None = None
    #: the repository API for a model's pb_utils.load_model / unload_model, from a worker thread:
    #: (calling model, "load" | "unload", model name, config JSON, file overrides, unload_dependents);
    #: waits until done and raises InferdError as the API answers
    model_control: ModelControlLink | None = None
    #: the server's worker processes of model instances, and what befell them
    processes: WorkerProcesses = field(default_factory=WorkerProcesses)
    #: the server's log switches now (``logs.LogSettings.settings``): the worker processes it starts
    #: log as it does (None: the defaults)
    log_settings: Callable[[], dict[str, Any]] | None = None


@dataclass(slots=True)
class LoadContext:
    """What a backend gets at load: the model's folder, version folder and normalised config."""

    model_name: str
    version: int
    model_dir: Path
    version_dir: Path
    config: ModelConfig
    #: runs a request on another model of the same server from a worker thread (BLS); None outside a server
    infer_blocking: Callable[[InferRequest], list[InferResponse]] | None = None
    #: the rest of what the server offers its models (``infer_blocking`` above is also there)
    links: ServerLinks = field(default_factory=ServerLinks)
    #: ``--backend-config=<this backend>,<setting>=<value>`` settings (the global ones too)
    backend_config: Mapping[str, str] = field(default_factory=dict)
    #: seconds an instance may take to initialize (0: no limit); a worker process past it is killed
    load_timeout_s: float = 0.0
    #: the model's files came from a client (``file:`` overrides), not from a repository: untrusted
    #: input that must not be read or run in the server's own process
    uploaded: bool = False


class BackendInstance(Protocol):
    """One instance: executes a batch of requests in its own worker thread.

    Besides ``execute`` and ``unload`` an instance tells the pool (``scheduling/instances.py``)
    three things, each read after every execute; every backend's instance declares them.
    """

    @property
    def inline_ok(self) -> bool:
        """The pool may run this instance's short executes on the event loop; it decides on
        measurement (see inline mode in ``scheduling/instances.py``) and never moves a long one there."""
        ...

    @property
    def uses_bls(self) -> bool:
        """True once an execute called another model (BLS): it may wait on the event loop, so the
        pool never runs this instance inline again."""
        ...

    @property
    def last_timings(self) -> tuple[int, int, int] | None:
        """(input, infer, output) nanoseconds of the last execute, for the statistics; None: the
        pool counts the whole execute as infer."""
        ...

    def execute(self, requests: list[InferRequest]) -> list[InferResponse] | None:
        """Responses in request order, or None when the instance answers through request streams."""
        ...

    def unload(self) -> None:
        """Release the instance (Python: ``finalize``)."""
        ...


@runtime_checkable
class Reschedulable(Protocol):
    """An instance whose model may release a request for another execute instead of answering it
    (a Python model's ``set_release_flags(TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)``).

    ``rescheduler`` takes such a request back, from any thread: set by a scheduler that serves
    ``iterative_sequence`` (scheduling/sequence.py); None: the request is refused, as the reference
    refuses it for a model not configured so.
    """

    rescheduler: Callable[[InferRequest], None] | None


class BackendModel(Protocol):
    """A model version loaded by a backend: creates its instances."""

    def create_instance(self, spec: InstanceSpec) -> BackendInstance: ...

    def promotion(self) -> Callable[[InstanceSpec], BackendInstance] | None:
        """For ``execution_mode: auto``: what makes an instance of this model in a worker process,
        should the pool measure that its thread instances hold the GIL (None: never)."""
        ...

    def unload(self) -> None: ...


class Backend(Protocol):
    """A backend (python, onnxruntime, ...): completes configs and loads model versions.

    Optional: ``gpu_available() -> bool``, whether it can place an instance on a GPU in this process
    (``KIND_AUTO`` becomes ``KIND_GPU`` only then: ``registry.runs_on_gpu``); a backend without it
    is taken to, as the reference takes every backend.
    """

    name: str

    def auto_complete(
        self,
        config: ModelConfig,
        model_dir: Path,
        version_dir: Path | None,
        *,
        default_max_batch_size: int = 4,
    ) -> None:
        """Fill what the config leaves out (inputs, outputs, max_batch_size, ...) in place.

        ``default_max_batch_size`` is ``--backend-config=default-max-batch-size``: the
        max_batch_size a backend gives a model whose graph batches and whose config says 0.
        """
        ...

    def load(self, ctx: LoadContext) -> BackendModel: ...


class BackendLookup(Protocol):
    """Where the engine finds a model's backend: ``backends.registry`` (a module satisfies this),
    or a test's fake (tests/unit/engine/fake_backend.py)."""

    def backend_for(self, config: Any) -> Backend: ...

    def auto_gpu(self, cfg: Any, have_gpus: bool) -> bool: ...
