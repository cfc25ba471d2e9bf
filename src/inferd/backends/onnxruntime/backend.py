"""The ONNX Runtime backend: ``model.onnx`` served with one InferenceSession per instance.

Backend ``onnxruntime``, platform ``onnxruntime_onnx``. ``<version>/model.onnx`` (or
``default_model_filename``) is a file, or a folder holding ``model.onnx`` and its external data.
Each instance owns a session and runs it in its worker thread; ONNX Runtime releases the GIL
while it runs, so instances execute in parallel. A graph whose runs are shorter than a thread
hand-off (tiny_mlp: ~14 us) may still run inline on the loop (``inline_ok``: the pool decides on
measurement and never moves a long-running graph there). The requests of
one execute are stacked along the batch dimension, run once, and the outputs split back.

Config auto-complete follows Triton's ``onnxruntime_backend`` (``backends/signature.py``); the
graph is then checked against the config at load, so a contradiction makes the model
UNAVAILABLE with a reason naming the tensor, rather than failing every request. Session options
come from the config (``options.py``), execution providers from the instance's kind
(``providers.py``: a KIND_GPU instance runs on ONNX Runtime's CUDA provider, which onnxruntime-gpu
has and the onnxruntime wheel lacks). ONNX Runtime exceptions become inferd errors where they
enter (:func:`_translate`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import onnxruntime as ort

from inferd.backends.base import InstanceSpec, LoadContext
from inferd.backends.batched import BatchedInstance, split, unreshape_shape
from inferd.backends.native import NativeBackend, NativeModel
from inferd.backends.onnxruntime.graph import check_config_against_graph, graph_signature
from inferd.backends.onnxruntime.options import (
    SessionSettings,
    intra_op_threads,
    session_options,
    session_settings,
)
from inferd.backends.onnxruntime.providers import CUDA_PROVIDER, execution_providers
from inferd.backends.sequence_io import sequence_tensors
from inferd.backends.signature import GraphTensor
from inferd.core.request import InferRequest
from inferd.core.response import InferResponse
from inferd.core.tensor import Tensor, TensorSpec
from inferd.core.types import BYTES
from inferd.errors import InferdError, InternalError, InvalidArgumentError, UnavailableError

if TYPE_CHECKING:
    from inferd.repository.config.schema import ModelConfig

log = logging.getLogger("inferd.backends.onnxruntime")

DEFAULT_FILENAME = "model.onnx"


def model_path(config: ModelConfig, version_dir: Path) -> Path:
    """``<version>/<default_model_filename>``, or ``model.onnx`` inside it when that is a folder."""
    path = version_dir / (config.default_model_filename or DEFAULT_FILENAME)
    if path.is_dir():
        path = path / DEFAULT_FILENAME
    if not path.is_file():
        raise UnavailableError(
            f"unable to find '{path}' for model '{config.name}': the version folder must hold the ONNX "
            f"model as '{config.default_model_filename or DEFAULT_FILENAME}' (a file, or a folder with "
            "model.onnx and its external data)"
        )
    return path


def _translate(e: Exception, what: str) -> InferdError:
    """An ONNX Runtime exception as the inferd error a client or the model table shows."""
    kind = type(e).__name__
    text = str(e).strip()
    if kind in ("InvalidArgument", "NotImplemented"):
        return InvalidArgumentError(f"{what}: {text}")
    if kind in ("InvalidProtobuf", "InvalidGraph", "NoModel", "ModelLoaded"):
        return InvalidArgumentError(
            f"{what}: {text}. The file is not a loadable ONNX model: export it again, or check that it "
            "was copied completely (external data files included)"
        )
    if kind == "NoSuchFile":
        return UnavailableError(f"{what}: {text}")
    return InternalError(f"{what}: {text}")


def _open_session(path: Path, options: Any, providers: list[Any], what: str) -> Any:
    try:
        return ort.InferenceSession(str(path), sess_options=options, providers=providers)
    except Exception as e:
        raise _translate(e, what) from e


def open_instance_session(
    settings: SessionSettings,
    path: Path,
    spec: InstanceSpec,
    first: bool,
    available: Sequence[str],
    model: str = "",
) -> tuple[Any, list[Any]]:
    """One instance's InferenceSession and the providers it was asked for: the options
    (``options.session_options``: threads, spinning, graph level, execution mode) and providers
    (``providers.execution_providers``) inferd gives instance ``spec`` (``first``: the model's
    first instance, which gets every core). benchmarks/floor_server.py opens its session here too,
    so that the floor row times the very session inferd serves."""
    providers = execution_providers(settings, spec, available, model, f"onnxruntime {ort.__version__}")
    options = session_options(settings, first)
    session = _open_session(path, options, providers, f"failed to load '{path}'")
    if spec.kind == "GPU" and CUDA_PROVIDER not in session.get_providers():
        # ONNX Runtime falls back to the CPU when the CUDA provider cannot start (its log says why)
        raise UnavailableError(
            f"unable to load model '{model}': instance '{spec.name}' asked ONNX Runtime for the "
            f"{CUDA_PROVIDER} on GPU {spec.device_id}, but its session has only "
            f"{', '.join(session.get_providers())}: ONNX Runtime could not start CUDA (see its error above)"
        )
    return session, providers


# --------------------------------------------------------------------------------------------------
# The backend


class OnnxModel(NativeModel):
    """A loaded model.onnx version: checks it against the config, then makes a session per instance."""

    find = staticmethod(model_path)

    def __init__(self, ctx: LoadContext) -> None:
        super().__init__(ctx)
        # a stateful model's control and state tensors are graph inputs and outputs too
        extra_inputs, extra_outputs = sequence_tensors(ctx.config)
        self.inputs += extra_inputs
        self.outputs += extra_outputs
        self.settings = session_settings(ctx.config, self.instance_count)
        self.available = list(ort.get_available_providers())
        self._checked = False
        self._lock = threading.Lock()
        self.sessions = 0
        self._first_taken = False  # the first instance gets every core (options.wide_first_instance)

    def create_instance(self, spec: InstanceSpec) -> OnnxInstance:
        with self._lock:
            first = not self._first_taken
            self._first_taken = True
        session, providers = open_instance_session(
            self.settings, self.path, spec, first, self.available, self.name
        )
        with self._lock:
            if not self._checked:
                extra_inputs, extra_outputs = sequence_tensors(self.ctx.config)
                check_config_against_graph(
                    self.ctx.config, *graph_signature(session), extra_inputs, extra_outputs
                )
                self._checked = True
            self.sessions += 1
        log.info(
            "model '%s' version %s: session for instance %s (%d intra-op thread(s), providers %s)",
            self.name,
            self.version_str,
            spec.name,
            intra_op_threads(self.settings, first),
            ", ".join(p if isinstance(p, str) else p[0] for p in providers),
        )
        return OnnxInstance(self, session, spec.name)

    def unload(self) -> None:
        """Nothing held here: each instance owns its session and drops it at its own unload."""


class OnnxRuntimeBackend(NativeBackend):
    """Backend ``onnxruntime``: auto-complete from the graph (Triton's rules), a session per instance."""

    name = "onnxruntime"
    model_type = OnnxModel

    def gpu_available(self) -> bool:
        """Whether this onnxruntime has the CUDA execution provider (onnxruntime-gpu does; the
        onnxruntime wheel is CPU-only): ``KIND_AUTO`` stays ``KIND_CPU`` without it."""
        return CUDA_PROVIDER in ort.get_available_providers()

    def signature(
        self, config: ModelConfig, version_dir: Path
    ) -> tuple[list[GraphTensor], list[GraphTensor]]:
        """The graph's inputs and outputs, read from a session that only loads it (no optimisation)."""
        path = model_path(config, version_dir)
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        options.intra_op_num_threads = 1
        options.log_severity_level = 3
        session = _open_session(path, options, ["CPUExecutionProvider"], f"failed to load '{path}'")
        inputs, outputs, _ = graph_signature(session)
        return inputs, outputs


class OnnxInstance(BatchedInstance):
    """One InferenceSession; ``execute`` runs in the instance's worker thread (the GIL is released)."""

    #: the pool may run very short graphs on the loop (it keeps long ones in their threads)
    inline_ok = True
    model: OnnxModel

    def __init__(self, model: OnnxModel, session: Any, name: str) -> None:
        super().__init__(model, name)
        self._run_options: Any = None
        if model.settings.run_entries:
            self._run_options = ort.RunOptions()
            for k, v in model.settings.run_entries:
                self._run_options.add_run_config_entry(k, v)
        self.session = session

    @property
    def session(self) -> Any:
        return self._session

    @session.setter
    def session(self, session: Any) -> None:
        self._session = session
        # the binding's run, without the Python wrapper's per-call checks (the core has validated
        # the request, and the config was checked against the graph at load): about 5 us a call
        inner = getattr(session, "_sess", None)
        self._run: Any = getattr(inner, "run", None) or getattr(session, "run", None)

    def execute(self, requests: list[InferRequest]) -> list[InferResponse]:
        if len(requests) == 1:  # the common case: nothing to group or stack
            return [self._run_one(requests[0])]
        return super().execute(requests)

    def _session_run(self, names: list[str], feed: dict[str, Any]) -> list[Any]:
        try:
            results: list[Any] = self._run(names, feed, self._run_options)
        except Exception as e:
            raise _translate(e, f"onnx runtime error running model '{self.model.name}'") from e
        return results

    def _run_one(self, r: InferRequest) -> InferResponse:
        """One request: its tensors go to the session as they are (views over the received bytes)."""
        model = self.model
        clock = time.monotonic_ns
        t0 = clock()
        try:
            feed = self._feed([r])
            if r.outputs is None:
                names = self._output_names
            else:
                wanted = self._wanted(r)
                names = [o for o in self._output_names if o in wanted]
            t1 = clock()
            results = self._session_run(names, feed)
            t2 = clock()
            outputs = []
            for name, arr in zip(names, results, strict=True):
                spec = self._outputs[name]
                arr = self._output_array(spec, arr)
                if self._batching and (arr.ndim == 0 or arr.shape[0] != r.batch_size):
                    split(arr, [r.batch_size], name)  # raises: the batch is not dimension 0
                if spec.reshape is not None:
                    arr = arr.reshape(unreshape_shape(arr.shape, spec.dims, spec.reshape, self._batching))
                outputs.append(Tensor(name, spec.datatype, arr.shape, array=arr))
        except InferdError as e:
            self.last_timings = (0, clock() - t0, 0)
            return InferResponse(r.model_name, model.version_str, r.id, error=e)
        self.last_timings = (t1 - t0, t2 - t1, clock() - t2)
        return InferResponse(r.model_name, model.version_str, r.id, outputs=outputs)

    def _group_inputs(
        self, requests: list[InferRequest], wanted: list[frozenset[str]]
    ) -> tuple[list[str], dict[str, Any]]:
        names = [o for o in self._output_names if any(o in w for w in wanted)]
        return names, self._feed(requests)

    def _group_run(self, prepared: tuple[list[str], dict[str, Any]]) -> tuple[list[str], list[Any]]:
        names, feed = prepared
        return names, self._session_run(names, feed)

    def _group_outputs(
        self, requests: list[InferRequest], result: tuple[list[str], list[Any]], wanted: list[frozenset[str]]
    ) -> list[list[Tensor]]:
        names, results = result
        outputs = self._outputs
        return self._split_outputs(
            requests,
            ((outputs[n], self._output_array(outputs[n], r)) for n, r in zip(names, results, strict=True)),
            wanted,
        )

    def _feed(self, requests: list[InferRequest]) -> dict[str, Any]:
        feed: dict[str, Any] = {}
        for spec in self.model.inputs:
            arr = self._stacked(requests, spec)
            if arr is None:
                continue  # an optional input left out
            if spec.datatype is BYTES:
                arr = _to_ort_strings(arr, spec.name)
            feed[spec.name] = arr
        return feed

    def _output_array(self, spec: TensorSpec, arr: Any) -> np.ndarray[Any, Any]:
        if not isinstance(arr, np.ndarray):
            raise InternalError(f"output '{spec.name}' of model '{self.model.name}' is not a tensor")
        if spec.datatype is BYTES:
            return _from_ort_strings(arr)
        return arr

    def unload(self) -> None:
        self.session = None


def _to_ort_strings(arr: np.ndarray[Any, Any], name: str) -> np.ndarray[Any, Any]:
    """BYTES elements as the str ONNX Runtime's string tensors take (UTF-8 text)."""
    flat = arr.reshape(-1)
    out = np.empty(flat.shape[0], dtype=np.object_)
    for i, v in enumerate(flat):
        if isinstance(v, (bytes, bytearray, memoryview)):
            try:
                out[i] = bytes(v).decode("utf-8")
            except UnicodeDecodeError:
                raise InvalidArgumentError(
                    f"input '{name}' element {i} is not UTF-8 text, which ONNX Runtime string tensors hold"
                ) from None
        else:
            out[i] = str(v)
    return out.reshape(arr.shape)


def _from_ort_strings(arr: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """ONNX Runtime's str elements as the bytes BYTES tensors hold."""
    flat = arr.reshape(-1)
    out = np.empty(flat.shape[0], dtype=np.object_)
    for i, v in enumerate(flat):
        out[i] = v.encode("utf-8") if isinstance(v, str) else bytes(v)
    return out.reshape(arr.shape)
