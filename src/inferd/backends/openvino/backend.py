"""The OpenVINO backend: ``model.xml`` + ``model.bin`` (or an ONNX file) served with one compiled model per instance.

Backend ``openvino`` (Triton has no platform name for it). ``<version>/model.xml`` (or
``default_model_filename``) is an OpenVINO IR whose weights lie beside it as ``model.bin``
(the same stem); a ``default_model_filename`` ending in ``.onnx`` is read through OpenVINO's ONNX
frontend. openvino is imported when the first OpenVINO model loads, never at start:
``pip install 'inferd[openvino]'``.

Config auto-complete fills inputs, outputs, max_batch_size and dynamic batching from the model's
ports, as Triton's openvino backend does, with the rules of the ONNX Runtime backend
(``signature.py``); the model is then checked against the config at load, so a contradiction makes
it UNAVAILABLE with a reason naming the tensor. Each instance owns a compiled model and an infer
request and runs them in its worker thread (OpenVINO releases the GIL while it infers); the
requests of one execute are stacked on the batch dimension, run once and split back
(``backends/batched.py``). OpenVINO exceptions become inferd errors where they enter
(:func:`_load_error`, :meth:`OpenVinoInstance._infer`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from inferd.backends.base import InstanceSpec, LoadContext
from inferd.backends.batched import BatchedInstance
from inferd.backends.native import NativeBackend, NativeModel, import_lazily
from inferd.backends.openvino.settings import compile_properties
from inferd.backends.openvino.signature import check_config_against_model, model_signature
from inferd.backends.signature import GraphTensor
from inferd.core.request import InferRequest
from inferd.core.tensor import Tensor, TensorSpec
from inferd.core.types import BYTES, DataType
from inferd.errors import InferdError, InternalError, InvalidArgumentError, UnavailableError

if TYPE_CHECKING:
    from inferd.repository.config.schema import ModelConfig

log = logging.getLogger("inferd.backends.openvino")

DEFAULT_FILENAME = "model.xml"

_core_lock = threading.Lock()
_core: Any = None


def _openvino() -> Any:
    """openvino, imported on first use."""
    return import_lazily("openvino", "openvino", "openvino")


def _get_core() -> Any:
    """One ``openvino.Core`` for the process (reading and compiling through it is thread-safe)."""
    global _core
    with _core_lock:
        if _core is None:
            _core = _openvino().Core()
        return _core


def model_path(config: ModelConfig, version_dir: Path) -> Path:
    """``<version>/<default_model_filename>``; an IR's ``.bin`` weights must lie beside its ``.xml``."""
    name = config.default_model_filename or DEFAULT_FILENAME
    path = version_dir / name
    if not path.is_file():
        raise UnavailableError(
            f"unable to find '{path}' for model '{config.name}': the version folder must hold the OpenVINO "
            f"model as '{name}' (an IR .xml with its .bin weights beside it, or an ONNX file named by "
            "default_model_filename)"
        )
    if path.suffix == ".xml" and not path.with_suffix(".bin").is_file():
        raise UnavailableError(
            f"unable to find '{path.with_suffix('.bin')}' for model '{config.name}': an OpenVINO IR keeps its "
            f"weights in a .bin file beside '{path.name}'; copy it there (openvino.save_model writes both)"
        )
    return path


def _load_error(e: Exception, path: Path, model: str) -> InferdError:
    """An OpenVINO read or compile failure as the reason the model table shows."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip() and not ln.startswith("Exception from")]
    text = lines[0] if lines else type(e).__name__
    kind = "ONNX model" if path.suffix == ".onnx" else "OpenVINO IR"
    return InvalidArgumentError(
        f"unable to load model '{model}': '{path}' is not a loadable {kind} ({text}): convert the model "
        "again (openvino.save_model(openvino.convert_model(...), 'model.xml')), or check that it was copied "
        "completely"
    )


def _read_model(path: Path, model: str) -> Any:
    try:
        return _get_core().read_model(str(path))
    except Exception as e:
        raise _load_error(e, path, model) from e


# --------------------------------------------------------------------------------------------------
# The backend


class OpenVinoModel(NativeModel):
    """A loaded OpenVINO version: reads the model once, checks it, then compiles it per instance."""

    find = staticmethod(model_path)

    def import_framework(self) -> None:
        self.core = _get_core()

    def unserved(self, datatype: DataType) -> str | None:
        return "is TYPE_STRING, which the openvino backend does not serve" if datatype is BYTES else None

    def __init__(self, ctx: LoadContext) -> None:
        super().__init__(ctx)
        self.properties = compile_properties(ctx.config, self.instance_count)
        self.model: Any = _read_model(self.path, self.name)
        check_config_against_model(ctx.config, *model_signature(self.model, self.name))
        self._lock = threading.Lock()
        self.compiled = 0

    def device_for(self, spec: InstanceSpec) -> str:
        """The OpenVINO device of an instance: ``CPU``, or ``GPU[.<id>]`` for ``KIND_GPU``."""
        if spec.kind != "GPU":
            return "CPU"
        available = list(self.core.available_devices)
        gpus = [d for d in available if d.startswith("GPU")]
        if not gpus:
            raise UnavailableError(
                f"unable to load model '{self.name}': instance '{spec.name}' is KIND_GPU, but OpenVINO finds "
                f"no GPU device (devices: {', '.join(available)}): use instance_group [ {{ kind: KIND_CPU }} ]"
            )
        return f"GPU.{spec.device_id}" if len(gpus) > 1 else "GPU"

    def create_instance(self, spec: InstanceSpec) -> OpenVinoInstance:
        device = self.device_for(spec)
        try:
            compiled = self.core.compile_model(self.model, device, self.properties)
            request = compiled.create_infer_request()
        except Exception as e:
            raise _load_error(e, self.path, self.name) from e
        with self._lock:
            self.compiled += 1
        log.info(
            "model '%s' version %s: compiled for instance %s on %s (%s inference thread(s))",
            self.name,
            self.version_str,
            spec.name,
            device,
            self.properties.get("INFERENCE_NUM_THREADS"),
        )
        return OpenVinoInstance(self, compiled, request, spec.name)

    def unload(self) -> None:
        self.model = None


class OpenVinoBackend(NativeBackend):
    """Backend ``openvino``: auto-complete from the model's ports, a compiled model per instance."""

    name = "openvino"
    model_type = OpenVinoModel

    def gpu_available(self) -> bool:
        """False: ``KIND_AUTO`` is ``KIND_CPU``, as the reference's OpenVINO backend prefers (its
        ``GPU`` device is an Intel GPU; an explicit ``KIND_GPU`` asks OpenVINO for one)."""
        return False

    def signature(
        self, config: ModelConfig, version_dir: Path
    ) -> tuple[list[GraphTensor], list[GraphTensor]]:
        path = model_path(config, version_dir)
        return model_signature(_read_model(path, config.name), config.name)


class OpenVinoInstance(BatchedInstance):
    """One compiled model and infer request; ``execute`` runs in the instance's worker thread."""

    #: the pool may run very short models on the loop (it keeps long ones in their threads)
    inline_ok = True
    model: OpenVinoModel

    def __init__(self, model: OpenVinoModel, compiled: Any, request: Any, name: str) -> None:
        super().__init__(model, name)
        self.compiled = compiled
        self.request = request
        self._ports = {name: compiled.output(name) for name in self._output_names}

    def _group_inputs(self, requests: list[InferRequest], wanted: list[frozenset[str]]) -> dict[str, Any]:
        return self._feed(requests)

    def _group_run(self, prepared: dict[str, Any]) -> dict[str, Any]:
        return self._infer(prepared)

    def _group_outputs(
        self, requests: list[InferRequest], result: dict[str, Any], wanted: list[frozenset[str]]
    ) -> list[list[Tensor]]:
        return self._split_outputs(requests, self._output_arrays(result, wanted), wanted)

    def _feed(self, requests: list[InferRequest]) -> dict[str, Any]:
        feed: dict[str, Any] = {}
        for spec in self.model.inputs:
            arr = self._stacked(requests, spec)
            if arr is None:
                continue
            feed[spec.name] = np.ascontiguousarray(arr)
        return feed

    def _infer(self, feed: dict[str, Any]) -> dict[str, Any]:
        try:
            results = self.request.infer(feed)
            return {name: results[port] for name, port in self._ports.items()}
        except Exception as e:
            lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
            text = next((ln for ln in lines if not ln.startswith("Exception from")), type(e).__name__)
            raise InternalError(f"openvino error running model '{self.model.name}': {text}") from e

    def _output_arrays(
        self, results: dict[str, Any], wanted: list[frozenset[str]]
    ) -> Iterator[tuple[TensorSpec, np.ndarray[Any, Any]]]:
        """The outputs some request of the group asked for, in config order."""
        for name in self._output_names:
            if not any(name in w for w in wanted):
                continue
            arr = results[name]
            if not isinstance(arr, np.ndarray):
                raise InternalError(f"output '{name}' of model '{self.model.name}' is not a tensor")
            yield self._outputs[name], arr

    def unload(self) -> None:
        self.request = None
        self.compiled = None
