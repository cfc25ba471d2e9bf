"""The ONNX Runtime backend: ``model.onnx`` served with one InferenceSession per instance.

Backend ``onnxruntime``, platform ``onnxruntime_onnx``. ``<version>/model.onnx`` (or
``default_model_filename``) is a file, or a folder holding ``model.onnx`` and its external data.
Each instance owns a session and runs it in its worker thread; ONNX Runtime releases the GIL
while it runs, so instances execute in parallel (and ``inline_ok`` stays off). The requests of
one execute are stacked along the batch dimension, run once, and the outputs split back.

Config auto-complete follows Triton's ``onnxruntime_backend`` (``AutoCompleteConfig``); the
graph is then checked against the config at load, so a contradiction makes the model
UNAVAILABLE with a reason naming the tensor, rather than failing every request. Session options
come from the config (see :func:`session_settings`). ONNX Runtime exceptions become inferd
errors where they enter (:func:`_translate`).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from inferd.backends.base import InstanceSpec, LoadContext
from inferd.core.request import InferRequest
from inferd.core.response import InferResponse
from inferd.core.tensor import Tensor
from inferd.core.types import BY_CONFIG, BY_CONFIG_VALUE, BYTES, DataType
from inferd.errors import InferdError, InternalError, InvalidArgumentError, UnavailableError
from inferd.scheduling import batch as batching

log = logging.getLogger("inferd.backends.onnxruntime")

DEFAULT_FILENAME = "model.onnx"

#: ONNX Runtime's type strings -> ModelConfig data types
_ORT_TYPES: dict[str, str] = {
    "tensor(bool)": "TYPE_BOOL",
    "tensor(uint8)": "TYPE_UINT8",
    "tensor(uint16)": "TYPE_UINT16",
    "tensor(uint32)": "TYPE_UINT32",
    "tensor(uint64)": "TYPE_UINT64",
    "tensor(int8)": "TYPE_INT8",
    "tensor(int16)": "TYPE_INT16",
    "tensor(int32)": "TYPE_INT32",
    "tensor(int64)": "TYPE_INT64",
    "tensor(float16)": "TYPE_FP16",
    "tensor(float)": "TYPE_FP32",
    "tensor(double)": "TYPE_FP64",
    "tensor(string)": "TYPE_STRING",
}

#: ``optimization { graph { level } }`` -> ONNX Runtime's level (Triton's mapping; 0 = all)
_GRAPH_LEVELS = {
    -1: ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    0: ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    1: ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    2: ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
}

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


# --------------------------------------------------------------------------------------------------
# The graph's signature


@dataclass(frozen=True, slots=True)
class GraphTensor:
    """An input or output of the ONNX graph: ``data_type`` a ModelConfig name ("" if not a tensor)."""

    name: str
    data_type: str
    dims: tuple[int, ...]  # -1 where the graph leaves the size open (symbolic or unknown)
    onnx_type: str = ""

    @property
    def is_tensor(self) -> bool:
        return bool(self.data_type)


def _graph_tensor(arg: Any) -> GraphTensor:
    dims = tuple(d if isinstance(d, int) and d >= 0 else -1 for d in (arg.shape or []))
    return GraphTensor(arg.name, _ORT_TYPES.get(arg.type, ""), dims, arg.type)


def graph_signature(session: Any) -> tuple[list[GraphTensor], list[GraphTensor], list[GraphTensor]]:
    """Inputs, outputs and overridable initializers of a session, in graph order."""
    return (
        [_graph_tensor(a) for a in session.get_inputs()],
        [_graph_tensor(a) for a in session.get_outputs()],
        [_graph_tensor(a) for a in session.get_overridable_initializers()],
    )


def model_path(config: Any, version_dir: Path) -> Path:
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


# --------------------------------------------------------------------------------------------------
# Auto-complete (Triton ``ModelState::AutoCompleteConfig``)


def complete_config(
    config: Any, inputs: Sequence[GraphTensor], outputs: Sequence[GraphTensor], default_max_batch_size: int
) -> None:
    """Fill max_batch_size, dynamic_batching, and missing inputs/outputs of ``config`` from the graph."""
    had_inputs = len(config.input) + len(config.batch_input) > 0
    had_outputs = len(config.output) > 0
    # outputs that are not tensors (a ZipMap's sequence of maps) are left out below: they do not count
    served = [t for t in (*inputs, *outputs) if t.is_tensor or t in inputs]
    can_batch = all(t.dims and t.dims[0] == -1 for t in served)
    if can_batch:
        if config.max_batch_size == 0:
            config.max_batch_size = max(default_max_batch_size, 0)
            log.warning(
                "autofilled max_batch_size to %d for model '%s' since batching is supported but no "
                "max_batch_size is specified in model configuration",
                config.max_batch_size,
                config.name,
            )
        if (
            config.max_batch_size > 1
            and not config.HasField("dynamic_batching")
            and not config.HasField("sequence_batching")
        ):
            config.dynamic_batching.SetInParent()
    elif config.max_batch_size != 0:
        shapes = ", ".join(f"'{t.name}' {_shape(t.dims)}" for t in (*inputs, *outputs))
        raise InvalidArgumentError(
            f"autofill failed for model '{config.name}': model does not support batching while non-zero "
            f"max_batch_size is specified (every input and output needs a variable first dimension; the "
            f"graph has {shapes}): set max_batch_size to 0 or export the model with a dynamic batch axis"
        )
    if not had_inputs:
        _fill_io(config, config.input, inputs, "input")
    if not had_outputs:
        _fill_io(config, config.output, outputs, "output")


def _fill_io(config: Any, target: Any, tensors: Sequence[GraphTensor], kind: str) -> None:
    start = 1 if config.max_batch_size > 0 else 0
    for t in tensors:
        if not t.is_tensor:
            if kind == "input":
                raise InvalidArgumentError(
                    f"autofill failed for model '{config.name}': input '{t.name}' has type {t.onnx_type}; "
                    "inferd serves tensor inputs only"
                )
            log.warning(
                "model '%s': output '%s' has type %s and is left out of the configuration (inferd serves "
                "tensors only)",
                config.name,
                t.name,
                t.onnx_type,
            )
            continue
        io = target.add()
        io.name = t.name
        io.data_type = BY_CONFIG[t.data_type].config_value
        dims = list(t.dims[start:])
        if dims:
            io.dims.extend(dims)
        else:
            io.dims.append(1)
            if config.max_batch_size > 0:  # a scalar per batch item: dims [1] with an empty reshape
                io.reshape.SetInParent()


# --------------------------------------------------------------------------------------------------
# Load-time check of the config against the graph (Triton ``ValidateInputs`` / ``ValidateOutputs``)


def _shape(dims: Sequence[int]) -> str:
    return "[" + ",".join(str(d) for d in dims) + "]"


def check_config_against_graph(
    config: Any,
    inputs: Sequence[GraphTensor],
    outputs: Sequence[GraphTensor],
    initializers: Sequence[GraphTensor] = (),
) -> None:
    """Raise InvalidArgumentError naming the first tensor where ``config`` and the graph disagree."""
    name = config.name
    prefix = f"unable to load model '{name}'"
    mbs = int(config.max_batch_size)
    graph_inputs = {t.name: t for t in inputs}
    overridable = {t.name: t for t in initializers}
    configured = {i.name for i in config.input}
    missing = [t.name for t in inputs if t.name not in configured]
    if missing:
        raise InvalidArgumentError(
            f"{prefix}: the ONNX graph's input(s) {', '.join(repr(m) for m in missing)} are not in the "
            f"model configuration, which lists {sorted(configured) or 'no inputs'}: add them to config.pbtxt"
        )
    for io in config.input:
        g = graph_inputs.get(io.name) or overridable.get(io.name)
        if g is None:
            raise InvalidArgumentError(
                f"{prefix}: configuration input '{io.name}' is not an input of the ONNX graph, whose "
                f"inputs are: {', '.join(graph_inputs) or '(none)'}"
            )
        if io.optional and mbs != 0:
            raise InvalidArgumentError(
                f"{prefix}, optional input '{io.name}' is not supported for models that support batching"
            )
        _check_tensor(prefix, "input", io, g, mbs)
    graph_outputs = {t.name: t for t in outputs}
    for io in config.output:
        g = graph_outputs.get(io.name)
        if g is None:
            raise InvalidArgumentError(
                f"{prefix}: configuration output '{io.name}' is not an output of the ONNX graph, whose "
                f"outputs are: {', '.join(graph_outputs) or '(none)'}"
            )
        _check_tensor(prefix, "output", io, g, mbs)


def _check_tensor(prefix: str, kind: str, io: Any, g: GraphTensor, mbs: int) -> None:
    want = BY_CONFIG_VALUE.get(io.data_type)
    want_name = want.config if want is not None else "TYPE_INVALID"
    if not g.is_tensor:
        raise InvalidArgumentError(
            f"{prefix}: {kind} '{io.name}' of the ONNX graph has type {g.onnx_type}; inferd serves tensors "
            "only (for scikit-learn classifiers converted with skl2onnx, convert with zipmap disabled)"
        )
    if want_name != g.data_type:
        raise InvalidArgumentError(
            f"{prefix}, configuration expects datatype {want_name} for {kind} '{io.name}', model provides "
            f"{g.data_type}"
        )
    dims = list(io.reshape.shape) if io.HasField("reshape") else list(io.dims)
    model = list(g.dims)
    if not model:  # a scalar in the graph: the config must say 1 everywhere
        if mbs > 0 or any(d != 1 for d in dims):
            raise InvalidArgumentError(
                f"{prefix}, scalar tensor '{io.name}', should only provide 1 in the model configuration when "
                f"the model doesn't support batching. Model configuration provided: {_shape(dims)}."
            )
        return
    full = ([-1] if mbs > 0 else []) + dims
    if mbs > 0 and model[0] != -1:
        raise InvalidArgumentError(
            f"{prefix}, model configuration supports batching but first dimension of tensor '{io.name}' "
            f"expected by framework is not a variable-size batch dimension: {_shape(model)} whereas model "
            f"configuration shape is: {_shape(dims)} (set max_batch_size to 0 and list the full shape)"
        )
    ok = len(model) == len(full) and all(m == -1 or m == d for m, d in zip(model, full, strict=True))
    if not ok:
        batch_note = " (with the batch dimension of max_batch_size > 0 in front)" if mbs > 0 else ""
        raise InvalidArgumentError(
            f"{prefix}, {kind} '{io.name}': the model expects shape {_shape(model)} but the model "
            f"configuration specifies {_shape(full)}{batch_note}; fix dims (or reshape) in config.pbtxt"
        )


# --------------------------------------------------------------------------------------------------
# Session options


@dataclass(frozen=True, slots=True)
class SessionSettings:
    """What an instance's InferenceSession is made with (all from the config; see session_settings)."""

    intra_op_threads: int
    inter_op_threads: int
    parallel: bool
    graph_level: int
    mem_arena: bool | None = None
    mem_pattern: bool | None = None
    config_entries: tuple[tuple[str, str], ...] = ()
    run_entries: tuple[tuple[str, str], ...] = ()
    cpu_accelerators: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()
    gpu_accelerators: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()


def available_cpus() -> int:
    """Cores this process may run on (the affinity mask, which containers and taskset narrow)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def default_intra_op_threads(cpus: int, instances: int) -> int:
    """Threads per session when the config says none: the cores shared out among the instances.

    ONNX Runtime's own default (every core per session) oversubscribes the machine as soon as two
    instances run at once: their spinning thread pools then fight over the same cores.
    """
    return max(1, cpus // max(1, instances))


def _parse_bool(key: str, value: str) -> bool:
    v = value.strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise InvalidArgumentError(f"failed to convert '{value}' to a boolean for parameter '{key}'")


def _parse_int(key: str, value: str) -> int:
    try:
        return int(value.strip())
    except ValueError:
        raise InvalidArgumentError(
            f"failed to convert '{value}' to an integer for parameter '{key}'"
        ) from None


def _accelerators(items: Any) -> tuple[tuple[str, tuple[tuple[str, str], ...]], ...]:
    return tuple((a.name, tuple(sorted(a.parameters.items()))) for a in items)


def session_settings(config: Any, instances: int, cpus: int | None = None) -> SessionSettings:
    """Session options from ``parameters`` and ``optimization`` (Triton's keys, plus ``session.*``).

    ``intra_op_thread_count`` / ``inter_op_thread_count`` (0 or absent: the cores shared among the
    ``instances``; inter-op threads only count with ``execution_mode`` 1), ``execution_mode`` (0
    sequential, 1 parallel), ``enable_mem_arena``, ``enable_mem_pattern``,
    ``memory.enable_memory_arena_shrinkage`` (a run option), any ``session.*`` key as a session
    config entry (``session.intra_op.allow_spinning`` ...), ``optimization.graph.level`` (-1 basic,
    1 extended, 2 none, else all) and ``optimization.execution_accelerators``.
    """
    cpus = available_cpus() if cpus is None else cpus
    params = {k: v.string_value for k, v in config.parameters.items()}
    intra = _parse_int("intra_op_thread_count", params.get("intra_op_thread_count", "0"))
    inter = _parse_int("inter_op_thread_count", params.get("inter_op_thread_count", "0"))
    mode = _parse_int("execution_mode", params.get("execution_mode", "0"))
    if mode not in (0, 1):
        raise InvalidArgumentError(
            "Invalid configuration value provided. Expected values for  execution_mode are 0 or 1 but got "
            f"{mode} ."
        )
    if intra <= 0:
        intra = default_intra_op_threads(cpus, instances)
    if inter <= 0:
        inter = 1 if mode == 0 else default_intra_op_threads(cpus, instances)
    entries = {k: v for k, v in params.items() if k.startswith("session.")}
    run_entries = {k: v for k, v in params.items() if k.startswith("memory.")}
    opt = config.optimization
    level = int(opt.graph.level) if opt.HasField("graph") else 0
    return SessionSettings(
        intra_op_threads=intra,
        inter_op_threads=inter,
        parallel=mode == 1,
        graph_level=level if level in _GRAPH_LEVELS else 0,
        mem_arena=_parse_bool("enable_mem_arena", params["enable_mem_arena"])
        if "enable_mem_arena" in params
        else None,
        mem_pattern=_parse_bool("enable_mem_pattern", params["enable_mem_pattern"])
        if "enable_mem_pattern" in params
        else None,
        config_entries=tuple(sorted(entries.items())),
        run_entries=tuple(sorted(run_entries.items())),
        cpu_accelerators=_accelerators(opt.execution_accelerators.cpu_execution_accelerator),
        gpu_accelerators=_accelerators(opt.execution_accelerators.gpu_execution_accelerator),
    )


def session_options(s: SessionSettings) -> Any:
    """An ``ort.SessionOptions`` for ``s``."""
    o = ort.SessionOptions()
    o.intra_op_num_threads = s.intra_op_threads
    o.inter_op_num_threads = s.inter_op_threads
    o.execution_mode = ort.ExecutionMode.ORT_PARALLEL if s.parallel else ort.ExecutionMode.ORT_SEQUENTIAL
    o.graph_optimization_level = _GRAPH_LEVELS[s.graph_level]
    if s.mem_arena is not None:
        o.enable_cpu_mem_arena = s.mem_arena
    if s.mem_pattern is not None:
        o.enable_mem_pattern = s.mem_pattern
    o.log_severity_level = 3  # errors only: ORT's warnings go to stderr, unformatted
    for k, v in s.config_entries:
        o.add_session_config_entry(k, v)
    return o


def execution_providers(s: SessionSettings, spec: InstanceSpec, available: Sequence[str]) -> list[Any]:
    """The providers of one instance's session, in priority order (CPU always last)."""
    providers: list[Any] = []
    if spec.kind == "GPU":
        cuda: dict[str, str] = {"device_id": str(spec.device_id)}
        for name, params in s.gpu_accelerators:
            if name == "cuda":
                cuda.update(params)
            elif name == "tensorrt":
                _require("TensorrtExecutionProvider", "tensorrt", "onnxruntime-gpu with TensorRT", available)
                providers.append(
                    ("TensorrtExecutionProvider", {"device_id": str(spec.device_id), **dict(params)})
                )
            else:
                raise InvalidArgumentError(f"unknown Execution Accelerator '{name}' is requested")
        _require("CUDAExecutionProvider", "KIND_GPU", "onnxruntime-gpu", available)
        providers.append(("CUDAExecutionProvider", cuda))
    for name, params in s.cpu_accelerators:
        if name == "openvino":
            _require("OpenVINOExecutionProvider", "openvino", "onnxruntime-openvino", available)
            providers.append(("OpenVINOExecutionProvider", {"device_type": "CPU", **dict(params)}))
        else:
            raise InvalidArgumentError(f"unknown Execution Accelerator '{name}' is requested")
    providers.append("CPUExecutionProvider")
    return providers


def _require(provider: str, what: str, package: str, available: Sequence[str]) -> None:
    if provider not in available:
        raise UnavailableError(
            f"'{what}' needs ONNX Runtime's {provider}, which this installation lacks (it has "
            f"{', '.join(available)}): install {package} in place of onnxruntime"
        )


# --------------------------------------------------------------------------------------------------
# The backend


class OnnxRuntimeBackend:
    """Backend ``onnxruntime``."""

    name = "onnxruntime"

    def auto_complete(
        self, config: Any, model_dir: Path, version_dir: Path | None, *, default_max_batch_size: int = 4
    ) -> None:
        """Triton's auto-complete from the graph; skipped when the config lists inputs and outputs."""
        if len(config.input) + len(config.batch_input) > 0 and len(config.output) > 0:
            return
        if version_dir is None:
            return
        path = model_path(config, version_dir)
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        options.intra_op_num_threads = 1
        options.log_severity_level = 3
        session = _open_session(path, options, ["CPUExecutionProvider"], f"failed to load '{path}'")
        inputs, outputs, _ = graph_signature(session)
        complete_config(config, inputs, outputs, default_max_batch_size)

    def load(self, ctx: LoadContext) -> OnnxModel:
        return OnnxModel(ctx)


@dataclass(frozen=True, slots=True)
class _IO:
    """An input or output as the instances use it: its datatype and reshape, copied from the config."""

    name: str
    datatype: DataType
    dims: tuple[int, ...]
    reshape: tuple[int, ...] | None


def _io(io: Any) -> _IO:
    reshape = tuple(io.reshape.shape) if io.HasField("reshape") else None
    return _IO(io.name, BY_CONFIG_VALUE[io.data_type], tuple(io.dims), reshape)


class OnnxModel:
    """A loaded model.onnx version: checks it against the config, then makes a session per instance."""

    def __init__(self, ctx: LoadContext) -> None:
        config = ctx.config
        self.ctx = ctx
        self.name = ctx.model_name
        self.version_str = str(ctx.version)
        self.path = model_path(config, ctx.version_dir)
        self.max_batch_size = int(config.max_batch_size)
        self.inputs = [_io(i) for i in config.input]
        self.outputs = [_io(o) for o in config.output]
        count = sum(max(1, g.count) for g in config.instance_group) or 1
        self.settings = session_settings(config, count)
        self.available = list(ort.get_available_providers())
        self._checked = False
        self._lock = threading.Lock()
        self.sessions = 0

    def create_instance(self, spec: InstanceSpec) -> OnnxInstance:
        providers = execution_providers(self.settings, spec, self.available)
        options = session_options(self.settings)
        session = _open_session(self.path, options, providers, f"failed to load '{self.path}'")
        with self._lock:
            if not self._checked:
                check_config_against_graph(self.ctx.config, *graph_signature(session))
                self._checked = True
            self.sessions += 1
        log.info(
            "model '%s' version %s: session for instance %s (%d intra-op thread(s), providers %s)",
            self.name,
            self.version_str,
            spec.name,
            self.settings.intra_op_threads,
            ", ".join(p if isinstance(p, str) else p[0] for p in providers),
        )
        return OnnxInstance(self, session, spec.name)

    def unload(self) -> None:
        pass


class OnnxInstance:
    """One InferenceSession; ``execute`` runs in the instance's worker thread (the GIL is released)."""

    #: ONNX Runtime releases the GIL while it runs: instances overlap in their threads
    inline_ok = False

    def __init__(self, model: OnnxModel, session: Any, name: str) -> None:
        self.model = model
        self.session = session
        self.name = name
        self.last_timings: tuple[int, int, int] = (0, 0, 0)
        self._prep_ns = self._infer_ns = 0
        self._batching = model.max_batch_size > 0
        self._outputs = {o.name: o for o in model.outputs}
        self._all_outputs = frozenset(self._outputs)
        self._run_options: Any = None
        if model.settings.run_entries:
            self._run_options = ort.RunOptions()
            for k, v in model.settings.run_entries:
                self._run_options.add_run_config_entry(k, v)

    def execute(self, requests: list[InferRequest]) -> list[InferResponse]:
        t0 = time.monotonic_ns()
        self._prep_ns = self._infer_ns = 0
        if len(requests) == 1:  # the common case: nothing to group or stack
            responses = self._run_group(requests)
        else:
            slots: list[InferResponse | None] = [None] * len(requests)
            for group in batching.group_compatible(requests, self._batching):
                for i, resp in zip(group, self._run_group([requests[i] for i in group]), strict=True):
                    slots[i] = resp
            responses = [r for r in slots if r is not None]
        total = time.monotonic_ns() - t0
        prep, infer = self._prep_ns, self._infer_ns
        self.last_timings = (prep, infer, max(0, total - prep - infer))
        return responses

    def _wanted(self, r: InferRequest) -> frozenset[str]:
        if r.outputs is None:
            return self._all_outputs
        return r.output_names if r.output_names is not None else frozenset(o.name for o in r.outputs)

    def _run_group(self, requests: list[InferRequest]) -> list[InferResponse]:
        """Run requests of one shape signature as one batch; errors answer every request of it."""
        model = self.model
        clock = time.monotonic_ns
        t0 = clock()
        try:
            feed = self._feed(requests)
            wanted = [self._wanted(r) for r in requests]
            names = [o for o in self._outputs if any(o in w for w in wanted)]
            t1 = clock()
            self._prep_ns += t1 - t0
            try:
                results = self.session.run(names, feed, self._run_options)
            except Exception as e:
                raise _translate(e, f"onnx runtime error running model '{model.name}'") from e
            self._infer_ns += clock() - t1
            per_request = self._outputs_per_request(requests, names, results, wanted)
        except InferdError as e:
            return [InferResponse(r.model_name, model.version_str, r.id, error=e) for r in requests]
        return [
            InferResponse(r.model_name, model.version_str, r.id, outputs=outs)
            for r, outs in zip(requests, per_request, strict=True)
        ]

    def _feed(self, requests: list[InferRequest]) -> dict[str, Any]:
        feed: dict[str, Any] = {}
        batching_on = self._batching
        first = requests[0]
        for spec in self.model.inputs:
            t = first.inputs.get(spec.name)
            if t is None:
                continue  # an optional input left out (all requests of a group agree)
            if len(requests) == 1:
                arr = t.array
            else:
                arr = batching.stack([r.inputs[spec.name].array for r in requests])
            if spec.reshape is not None:
                arr = arr.reshape(batching.reshape_shape(arr.shape, spec.dims, spec.reshape, batching_on))
            if spec.datatype is BYTES:
                arr = _to_ort_strings(arr, spec.name)
            feed[spec.name] = arr
        return feed

    def _outputs_per_request(
        self,
        requests: list[InferRequest],
        names: list[str],
        results: list[Any],
        wanted: list[frozenset[str]],
    ) -> list[list[Tensor]]:
        per_request: list[list[Tensor]] = [[] for _ in requests]
        sizes = [r.batch_size for r in requests]
        for name, arr in zip(names, results, strict=True):
            spec = self._outputs[name]
            if not isinstance(arr, np.ndarray):
                raise InternalError(f"output '{name}' of model '{self.model.name}' is not a tensor")
            if spec.datatype is BYTES:
                arr = _from_ort_strings(arr)
            elif arr.dtype != spec.datatype.numpy:
                raise InternalError(
                    f"output '{name}' of model '{self.model.name}' has dtype {arr.dtype}, the config says "
                    f"{spec.datatype.config}"
                )
            parts = batching.split(arr, sizes, name) if self._batching else [arr]
            for i, part in enumerate(parts):
                if name not in wanted[i]:
                    continue
                if spec.reshape is not None:
                    part = part.reshape(
                        batching.unreshape_shape(part.shape, spec.dims, spec.reshape, self._batching)
                    )
                per_request[i].append(Tensor(name, spec.datatype, part.shape, array=part))
        return per_request

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
