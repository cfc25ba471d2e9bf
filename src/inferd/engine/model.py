"""Model: one (name, version) with its config, state, scheduler, instances and statistics."""

from __future__ import annotations

import enum
from collections.abc import Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from inferd.core.histogram import first_response_histogram
from inferd.core.stats import ModelStats
from inferd.core.summary import MetricsConfig
from inferd.core.tensor import TensorSpec
from inferd.errors import InvalidArgumentError

if TYPE_CHECKING:
    from inferd.backends.base import BackendModel, InstanceSpec
    from inferd.engine.readiness import ReadinessCheck
    from inferd.repository.config.schema import ModelConfig
    from inferd.scheduling.base import Scheduler


class ModelState(enum.Enum):
    """The state of one model version, as Triton names them (written by engine/lifecycle.py alone)."""

    UNKNOWN = "UNKNOWN"
    LOADING = "LOADING"
    READY = "READY"
    UNLOADING = "UNLOADING"
    UNAVAILABLE = "UNAVAILABLE"


def _labels(model_dir: Path, filename: str) -> tuple[str, ...]:
    if not filename:
        return ()
    path = model_dir / filename
    try:
        return tuple(line.rstrip("\r\n") for line in path.read_text().splitlines())
    except OSError as e:
        raise InvalidArgumentError(f"unable to read label file '{path}': {e.strerror}") from e


def tensor_specs(config: ModelConfig, model_dir: Path) -> tuple[dict[str, TensorSpec], dict[str, TensorSpec]]:
    """Inputs and outputs of a ModelConfig as TensorSpecs, outputs with their labels."""
    inputs = {i.name: TensorSpec.from_config(i) for i in config.input}
    outputs = {o.name: TensorSpec.from_config(o, _labels(model_dir, o.label_filename)) for o in config.output}
    return inputs, outputs


@dataclass(slots=True)
class Member:
    """One serving instance: how it was made, its signature, its index in the scheduler."""

    spec: InstanceSpec
    signature: bytes
    index: int


class Model:
    """One loaded (or failed) version of a model."""

    def __init__(
        self,
        name: str,
        version: int,
        config: ModelConfig,
        model_dir: Path,
        metrics: MetricsConfig = MetricsConfig(),
        key: str = "",
    ) -> None:
        """``metrics``: the server's ``--metrics-config`` (the summaries and histograms the version
        keeps); ``key``: the registry's key (``--model-namespacing``'s ``<namespace>::<name>``;
        default the name)."""
        self.name = name
        #: what the registry lists it under (engine/lifecycle.py); the name clients use is ``name``
        self.key = key or name
        self.version = version
        self.version_str = str(version)
        self.config = config
        self.model_dir = model_dir
        # read through ``state`` and ``reason``; written by ``ModelLifecycle`` (engine/lifecycle.py) alone
        self._state = ModelState.LOADING
        self._reason = ""
        self.platform = config.platform or config.backend
        # the reference's ensembles report no cache metrics ("not supported at top level"), whatever they cache
        self.stats = ModelStats(
            cached=bool(config.response_cache.enable) and self.platform != "ensemble", metrics=metrics
        )
        self.stats.first_response = first_response_histogram(config, metrics.histogram_latencies)
        self.scheduler: Scheduler | None = None
        self.max_batch_size = int(config.max_batch_size)
        self.decoupled = bool(config.model_transaction_policy.decoupled)
        self.inputs, self.outputs = tensor_specs(config, model_dir)
        self.output_names = tuple(self.outputs)
        self.required_inputs = tuple(n for n, s in self.inputs.items() if not s.optional)
        self._config_json: dict[str, Any] | None = None
        #: seconds its load took (instances, initialize and warmup; nv_model_load_duration_secs)
        self.load_seconds = 0.0
        #: validation keys this version accepted -> the batch size they validated to (engine.server)
        self.validated: dict[Hashable, int] = {}
        #: the model's own readiness check (a Python model's ``is_ready``), asked by the ready endpoints
        self.ready_check: ReadinessCheck | None = None
        #: what made its instances, and the instances in the reference's order (an instance_group
        #: update made in place adds and removes them: engine/instance_update.py)
        self.backend_model: BackendModel | None = None
        self.members: list[Member] = []

    @property
    def state(self) -> ModelState:
        return self._state

    @property
    def reason(self) -> str:
        """Why it is not READY (the load's failure, "unloaded"); "" when it is."""
        return self._reason

    @property
    def ready(self) -> bool:
        return self._state is ModelState.READY

    def set_config(self, config: ModelConfig) -> None:
        """The config after an instance_group update (the rest of it is the same by definition)."""
        self.config = config
        self._config_json = None

    def config_json(self) -> dict[str, Any]:
        """The normalised config as the /config endpoint prints it (computed once)."""
        if self._config_json is None:
            from inferd.repository.config import config_to_json

            self._config_json = config_to_json(self.config)
        return self._config_json

    def io_metadata(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Inputs and outputs as model metadata lists them."""
        mbs = self.max_batch_size
        return (
            [
                {"name": s.name, "datatype": s.datatype.wire, "shape": s.full_shape(mbs)}
                for s in self.inputs.values()
            ],
            [
                {"name": s.name, "datatype": s.datatype.wire, "shape": s.full_shape(mbs)}
                for s in self.outputs.values()
            ],
        )

    def __repr__(self) -> str:
        return f"Model({self.name!r}, {self.version}, {self._state.value})"
