"""What the native backends (onnxruntime, pytorch, openvino, tensorflow, fil) share at load.

:class:`NativeBackend` is a backend's auto-complete guard (Triton's: a config that lists inputs
and outputs is left as it is; without a version folder there is no model to read) around the
backend's reading of the model's signature, then the rules of ``signature.py``; and ``load``.
:class:`NativeModel` is the load preamble of a model version: the config's TensorSpecs (with
``reshape``), whether it batches, the model file, the instance count. Their instances are
:class:`~inferd.backends.batched.BatchedInstance`. The framework, its file and its checks stay in
each backend's package. The threads an instance gets when its config sets none are sized here too
(:func:`available_cpus`, :func:`default_intra_op_threads`).
"""

from __future__ import annotations

import importlib
import logging
import os
from abc import ABC, abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from inferd.backends.base import BackendInstance, InstanceSpec, LoadContext, instance_devices
from inferd.backends.signature import GraphTensor, complete_config
from inferd.core.tensor import TensorSpec
from inferd.core.types import DataType
from inferd.errors import InvalidArgumentError, UnavailableError

if TYPE_CHECKING:
    from inferd.repository.config.schema import ModelConfig


def import_lazily(module: str, backend: str, extra: str) -> Any:
    """``module``, imported on first use (``Any``: inferd type-checks without the framework's stubs).

    UnavailableError when it is not installed, naming the ``pip install 'inferd[extra]'`` that adds it.
    """
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise UnavailableError(
            f"the {backend} backend needs {module}, which is not installed ({e}): pip install 'inferd[{extra}]'"
        ) from e


def available_cpus() -> int:
    """Cores this process may run on (the affinity mask, which containers and taskset narrow)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def default_intra_op_threads(cpus: int, instances: int) -> int:
    """Threads per instance when the config says none: the cores shared out among the instances.

    A framework's own default (every core per call: ONNX Runtime's sessions, OpenMP's teams)
    oversubscribes the machine as soon as two instances run at once: their thread pools then
    fight over the same cores. The ONNX Runtime and fil backends size their threads with it.
    """
    return max(1, cpus // max(1, instances))


class NativeModel(ABC):
    """A loaded native model version: what its instances read of the config.

    A subclass's constructor takes the :class:`LoadContext` and calls this one first, which runs
    the steps every native load starts with, in this order: the config's TensorSpecs, the model
    file (:meth:`find`), the framework (:meth:`import_framework`), the datatypes the backend does
    not serve (:meth:`unserved`). The subclass then reads the model and checks it against the config.
    """

    @staticmethod
    @abstractmethod
    def find(config: ModelConfig, version_dir: Path) -> Path:
        """The version's model file or folder; UnavailableError saying what is missing."""

    def import_framework(self) -> None:
        """Import the framework (at first load, not at start: :func:`import_lazily`) and keep what
        the instances use; ONNX Runtime, imported with its backend, has nothing to do here."""
        return None

    def unserved(self, datatype: DataType) -> str | None:
        """Why the backend cannot serve a tensor of ``datatype`` ("is TYPE_STRING, which ..."), or None."""
        return None

    def __init__(self, ctx: LoadContext) -> None:
        config = ctx.config
        self.ctx = ctx
        self.name = ctx.model_name
        self.version_str = str(ctx.version)
        self.max_batch_size = int(config.max_batch_size)
        self.inputs = [TensorSpec.from_config(i) for i in config.input]
        self.outputs = [TensorSpec.from_config(o) for o in config.output]
        #: instances the config asks for (a group of count 0 makes one; a KIND_GPU group that many on
        #: each of its GPUs): thread defaults divide by it
        self.instance_count = (
            sum(max(1, g.count) * len(instance_devices(g)) for g in config.instance_group) or 1
        )
        self.path = self.find(config, ctx.version_dir)
        self.import_framework()
        for kind, specs in (("input", self.inputs), ("output", self.outputs)):
            for spec in specs:
                reason = self.unserved(spec.datatype)
                if reason is not None:
                    raise InvalidArgumentError(
                        f"unable to load model '{self.name}': {kind} '{spec.name}' {reason}"
                    )

    @abstractmethod
    def create_instance(self, spec: InstanceSpec) -> BackendInstance: ...

    def promotion(self) -> None:
        """Native frameworks release the GIL: their instances stay threads."""
        return None

    @abstractmethod
    def unload(self) -> None: ...


class NativeBackend:
    """A native backend: auto-complete from the model's signature, and ``load``."""

    name: ClassVar[str]
    #: what ``load`` makes of a model version
    model_type: ClassVar[type[NativeModel]]

    def auto_complete(
        self,
        config: ModelConfig,
        model_dir: Path,
        version_dir: Path | None,
        *,
        default_max_batch_size: int = 4,
    ) -> None:
        """Inputs, outputs and batching from the model's signature; skipped when the config lists them."""
        if len(config.input) + len(config.batch_input) > 0 and len(config.output) > 0:
            return
        if version_dir is None:
            return
        inputs, outputs = self.signature(config, version_dir)
        # warnings under the backend's own logger (``inferd.backends.<name>``)
        log = logging.getLogger(f"inferd.backends.{self.name}")
        complete_config(config, inputs, outputs, default_max_batch_size, log=log)

    def signature(
        self, config: ModelConfig, version_dir: Path
    ) -> tuple[list[GraphTensor], list[GraphTensor]]:
        """The model's inputs and outputs, read from its file for auto-complete."""
        raise NotImplementedError(f"the {self.name} backend reads no signature to complete a config from")

    def load(self, ctx: LoadContext) -> NativeModel:
        return self.model_type(ctx)
