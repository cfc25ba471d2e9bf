"""config.pbtxt: parse, auto-fill, normalise, validate, and print as Triton's ``/config`` JSON.

Everything here is pure: it reads the file system at most and loads no model.  The order a
loader follows is Triton's (``InitializeModelInfo`` / ``TritonModel::Create``)::

    cfg, had_file = load_model_config(model_dir)
    normalize_config(cfg, name, model_dir=model_dir)   # core auto-fill + normalisation
    validate_config(cfg)
    ... backend auto-complete (Python ``auto_complete_config``) ...
    normalize_config(cfg, name)                        # idempotent: fills what auto-complete added
    validate_config(cfg); require_io(cfg)

The messages reproduce the wording of Triton core's ``model_config_utils.cc`` where it has one.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from google.protobuf import json_format, text_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from inferd.errors import InternalError, InvalidArgumentError
from inferd.repository._proto import pb2

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig
else:
    ModelConfig = pb2.ModelConfig

BatchInput: Any = pb2.BatchInput
BatchOutput: Any = pb2.BatchOutput
DataType: Any = pb2.DataType
ModelInput: Any = pb2.ModelInput
ModelInstanceGroup: Any = pb2.ModelInstanceGroup
ModelQueuePolicy: Any = pb2.ModelQueuePolicy
ModelSequenceBatching: Any = pb2.ModelSequenceBatching

__all__ = [
    "CONFIG_FILENAME",
    "KNOWN_PLATFORM_BACKENDS",
    "ModelConfig",
    "autofill_backend_fields",
    "config_to_json",
    "detect_backend",
    "load_model_config",
    "normalize_config",
    "parse_config_text",
    "require_io",
    "validate_config",
]

CONFIG_FILENAME = "config.pbtxt"
CONFIG_FOLDER = "configs"

ENSEMBLE_PLATFORM = "ensemble"

TENSORFLOW_BACKEND = "tensorflow"
TF_GRAPHDEF_PLATFORM = "tensorflow_graphdef"
TF_SAVEDMODEL_PLATFORM = "tensorflow_savedmodel"
TF_GRAPHDEF_FILENAME = "model.graphdef"
TF_SAVEDMODEL_FILENAME = "model.savedmodel"

TENSORRT_BACKEND = "tensorrt"
TENSORRT_PLATFORM = "tensorrt_plan"
TENSORRT_FILENAME = "model.plan"

ONNXRUNTIME_BACKEND = "onnxruntime"
ONNXRUNTIME_PLATFORM = "onnxruntime_onnx"
ONNXRUNTIME_FILENAME = "model.onnx"

OPENVINO_BACKEND = "openvino"
OPENVINO_FILENAME = "model.xml"

PYTORCH_BACKEND = "pytorch"
PYTORCH_PLATFORM = "pytorch_libtorch"
PYTORCH_FILENAME = "model.pt"

PYTHON_BACKEND = "python"
PYTHON_FILENAME = "model.py"

#: Legacy platform name -> the backend that serves it (Triton ``GetBackendTypeFromPlatform``).
KNOWN_PLATFORM_BACKENDS: dict[str, str] = {
    TF_GRAPHDEF_PLATFORM: TENSORFLOW_BACKEND,
    TF_SAVEDMODEL_PLATFORM: TENSORFLOW_BACKEND,
    TENSORRT_PLATFORM: TENSORRT_BACKEND,
    ONNXRUNTIME_PLATFORM: ONNXRUNTIME_BACKEND,
    PYTORCH_PLATFORM: PYTORCH_BACKEND,
}
_KNOWN_BACKENDS = frozenset(KNOWN_PLATFORM_BACKENDS.values())

SEQUENCE_IDLE_DEFAULT_MICROSECONDS = 1_000_000
_DEFAULT_CPU_INSTANCE_COUNT = 2
_WILDCARD_DIM = -1


# --------------------------------------------------------------------------------------------------
# Parsing


def parse_config_text(text: str, path: str) -> ModelConfig:
    """Parse protobuf text format into a ``ModelConfig``; errors name the file, line and column."""
    cfg = ModelConfig()
    try:
        text_format.Parse(text, cfg)
    except text_format.ParseError as e:
        raise InvalidArgumentError(f"failed to parse model configuration '{path}': {e}") from e
    return cfg


def load_model_config(model_dir: Path, *, config_name: str | None = None) -> tuple[ModelConfig, bool]:
    """Read ``config.pbtxt`` (or ``configs/<config_name>.pbtxt`` when given and present).

    Returns ``(config, had_file)``.  Without a file the config is empty but for ``name`` (the
    directory name), for backends that complete it themselves (Python ``auto_complete_config``).
    """
    path = model_dir / CONFIG_FILENAME
    if config_name:
        custom = model_dir / CONFIG_FOLDER / f"{config_name}.pbtxt"
        if custom.is_file():
            path = custom
    if not path.is_file():
        return ModelConfig(name=model_dir.name), False
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise InvalidArgumentError(f"failed to parse model configuration '{path}': {e}") from e
    except OSError as e:
        raise InternalError(f"failed to read model configuration '{path}': {e.strerror or e}") from e
    return parse_config_text(text, str(path)), True


# --------------------------------------------------------------------------------------------------
# Core auto-fill (Triton ``AutoCompleteBackendFields``)


#: (backend, platform it implies or "", default model file, the file must not be a directory).
#: OpenVINO and Python have no platform name: the reference prints "platform": "" for Python.
_AUTOFILL_ORDER: tuple[tuple[str, str, str, bool], ...] = (
    (TENSORRT_BACKEND, TENSORRT_PLATFORM, TENSORRT_FILENAME, True),
    (ONNXRUNTIME_BACKEND, ONNXRUNTIME_PLATFORM, ONNXRUNTIME_FILENAME, False),  # file or directory
    (OPENVINO_BACKEND, "", OPENVINO_FILENAME, False),
    (PYTORCH_BACKEND, PYTORCH_PLATFORM, PYTORCH_FILENAME, True),
    (PYTHON_BACKEND, "", PYTHON_FILENAME, False),
)


def _first_version_dir(model_dir: Path, version_dirs: Iterable[Path] | None) -> Path | None:
    """Triton inspects the first subdirectory in name order (``std::set<std::string>``)."""
    if version_dirs is None:
        try:
            candidates = [p for p in model_dir.iterdir() if p.is_dir()]
        except OSError:
            return None
    else:
        candidates = list(version_dirs)
    if not candidates:
        return None
    return min(candidates, key=lambda p: p.name)


def _dir_contents(version_dir: Path | None) -> set[str]:
    if version_dir is None:
        return set()
    try:
        return {p.name for p in version_dir.iterdir()}
    except OSError:
        return set()


def _fill_backend_fields(
    cfg: ModelConfig, model_name: str, version_dir: Path | None, *, custom_fallback: bool
) -> None:
    """Port of ``AutoCompleteBackendFields``.  ``version_dir`` None: nothing on disk to inspect."""
    if not cfg.name:
        cfg.name = model_name
    has_version = version_dir is not None
    contents = _dir_contents(version_dir)

    def is_dir(name: str) -> bool:
        return version_dir is not None and (version_dir / name).is_dir()

    def probe(filename: str, *, file_only: bool = False) -> bool:
        """Nothing in the config says; the version directory holds ``filename``."""
        if cfg.platform or cfg.default_model_filename or filename not in contents:
            return False
        return not (file_only and is_dir(filename))

    # TensorFlow: the platform is required.
    if not cfg.platform and cfg.backend in ("", TENSORFLOW_BACKEND):
        if cfg.default_model_filename == TF_SAVEDMODEL_FILENAME:
            cfg.platform = TF_SAVEDMODEL_PLATFORM
        elif cfg.default_model_filename == TF_GRAPHDEF_FILENAME:
            cfg.platform = TF_GRAPHDEF_PLATFORM
        elif not cfg.default_model_filename and has_version:
            if TF_SAVEDMODEL_FILENAME in contents and is_dir(TF_SAVEDMODEL_FILENAME):
                cfg.platform = TF_SAVEDMODEL_PLATFORM
            if TF_GRAPHDEF_FILENAME in contents and not is_dir(TF_GRAPHDEF_FILENAME):
                cfg.platform = TF_GRAPHDEF_PLATFORM
    if cfg.platform in (TF_SAVEDMODEL_PLATFORM, TF_GRAPHDEF_PLATFORM):
        if not cfg.backend:
            cfg.backend = TENSORFLOW_BACKEND
        if not cfg.default_model_filename:
            saved = cfg.platform == TF_SAVEDMODEL_PLATFORM
            cfg.default_model_filename = TF_SAVEDMODEL_FILENAME if saved else TF_GRAPHDEF_FILENAME
        return

    # Then the first of these (in Triton's order) the config names or the version directory holds.
    for backend, platform, filename, file_only in _AUTOFILL_ORDER:
        if not cfg.backend:
            named = bool(platform) and cfg.platform == platform
            if named or cfg.default_model_filename == filename or probe(filename, file_only=file_only):
                cfg.backend = backend
        if cfg.backend == backend:
            if platform and not cfg.platform:
                cfg.platform = platform
            python_runtime = backend == PYTORCH_BACKEND and cfg.runtime == PYTHON_FILENAME
            if not cfg.default_model_filename and not python_runtime:
                cfg.default_model_filename = filename
            return

    # Custom backend, only when nothing at all is given: model name 'x.<backend>'.
    if custom_fallback and not cfg.backend and not cfg.platform and not cfg.default_model_filename:
        _, dot, backend = model_name.partition(".")
        if not dot:
            raise InvalidArgumentError(
                f"Invalid model name: Could not determine backend for model '{model_name}' with no "
                "backend in model configuration. Expected model name of the form 'model.<backend_name>'."
            )
        cfg.backend = backend
        cfg.default_model_filename = f"model.{backend}"


def autofill_backend_fields(
    cfg: ModelConfig, model_name: str, model_dir: Path, *, version_dirs: Iterable[Path] | None = None
) -> None:
    """Fill ``name``, ``platform``, ``backend`` and ``default_model_filename`` as Triton core does.

    Inspects the first version directory (by name; ``version_dirs`` when given, else every
    subdirectory of ``model_dir``, as Triton does).  Raises InvalidArgumentError when no backend
    can be determined.
    """
    version_dir = _first_version_dir(model_dir, version_dirs)
    _fill_backend_fields(cfg, model_name, version_dir, custom_fallback=True)


def detect_backend(model_dir: Path, version_dirs: Iterable[Path] | None = None) -> tuple[str, str]:
    """``(backend, platform)`` Triton's auto-fill gives a model directory with no config at all."""
    cfg = ModelConfig()
    autofill_backend_fields(cfg, model_dir.name, model_dir, version_dirs=version_dirs)
    return cfg.backend, cfg.platform


# --------------------------------------------------------------------------------------------------
# Normalisation (``NormalizeModelConfig`` + ``NormalizeInstanceGroup`` + ensemble policy)


def normalize_config(
    cfg: ModelConfig,
    model_name: str,
    *,
    default_max_batch_size: int = 4,
    model_dir: Path | None = None,
) -> None:
    """Fill defaults the way Triton 2.51 prints them at ``/config`` (mutates ``cfg``; idempotent).

    With ``model_dir`` the core auto-fill inspects the file system first (backend detection);
    without it only what the config itself implies is filled.  ``default_max_batch_size`` is the
    ``--backend-config=default-max-batch-size`` value: Triton hands it to backend auto-complete
    (ONNX Runtime / TensorFlow), never applies it in core normalisation, so nothing here uses it.
    """
    del default_max_batch_size  # see docstring: consumed by backend auto-complete only
    if cfg.name and cfg.name != model_name:
        raise InvalidArgumentError(
            f"unexpected directory name '{model_name}' for model '{cfg.name}', "
            "directory name must equal model name"
        )
    if model_dir is not None:
        autofill_backend_fields(cfg, model_name, model_dir)
    else:
        _fill_backend_fields(cfg, model_name, None, custom_fallback=False)

    if not cfg.HasField("version_policy"):
        cfg.version_policy.latest.num_versions = 1

    if cfg.HasField("dynamic_batching"):
        db = cfg.dynamic_batching
        if len(db.preferred_batch_size) == 0 and cfg.max_batch_size > 0:
            db.preferred_batch_size.append(cfg.max_batch_size)

    if cfg.HasField("sequence_batching"):
        sb = cfg.sequence_batching
        if sb.max_sequence_idle_microseconds == 0:
            sb.max_sequence_idle_microseconds = SEQUENCE_IDLE_DEFAULT_MICROSECONDS
        if sb.HasField("oldest") and len(sb.oldest.preferred_batch_size) == 0 and cfg.max_batch_size > 0:
            sb.oldest.preferred_batch_size.append(cfg.max_batch_size)

    if cfg.HasField("ensemble_scheduling"):
        # Triton sets this from the composing models (decoupled if any step is): the caller may
        # flip it to true once it knows them.
        if not cfg.HasField("model_transaction_policy"):
            cfg.model_transaction_policy.SetInParent()
            cfg.model_transaction_policy.decoupled = False
        return

    opt = cfg.optimization
    if not opt.HasField("input_pinned_memory"):
        opt.input_pinned_memory.enable = True
    if not opt.HasField("output_pinned_memory"):
        opt.output_pinned_memory.enable = True

    _normalize_instance_groups(cfg)


def _normalize_instance_groups(cfg: ModelConfig) -> None:
    """``NormalizeInstanceGroup`` on a machine without GPUs and with no backend-preferred groups."""
    if len(cfg.instance_group) == 0:
        group = cfg.instance_group.add()
        group.name = cfg.name  # a default group is named after the model, without a suffix
    for index, group in enumerate(cfg.instance_group):
        if not group.name:
            group.name = f"{cfg.name}_{index}"
        if group.kind == ModelInstanceGroup.KIND_AUTO:
            group.kind = ModelInstanceGroup.KIND_CPU
        if group.count < 1:
            group.count = 1
            if group.kind == ModelInstanceGroup.KIND_CPU and cfg.backend in (
                TENSORFLOW_BACKEND,
                ONNXRUNTIME_BACKEND,
            ):
                group.count = _DEFAULT_CPU_INSTANCE_COUNT


# --------------------------------------------------------------------------------------------------
# Validation (``ValidateModelConfig``, ``ValidateInstanceGroup``, ``ValidateModelIOConfig``)


def _invalid(message: str) -> InvalidArgumentError:
    return InvalidArgumentError(message)


def validate_config(cfg: ModelConfig) -> None:
    """Triton core's config checks; raises InvalidArgumentError (InternalError for an impossible kind).

    Run it after :func:`normalize_config` (a missing version policy is an error here).  Inputs and
    outputs that are present are validated; whether they must be present is :func:`require_io`.
    """
    name = cfg.name
    if not name:
        raise _invalid("model configuration must specify 'name'")

    if not cfg.backend:
        if cfg.platform != ENSEMBLE_PLATFORM:
            raise _invalid(f"unexpected platform type '{cfg.platform}' for {name}")
    elif cfg.platform == ENSEMBLE_PLATFORM:
        raise _invalid(
            f"Ensemble model '{name}' must have platform type '{cfg.platform}' and empty backend type"
        )

    if cfg.backend in _KNOWN_BACKENDS and KNOWN_PLATFORM_BACKENDS.get(cfg.platform) != cfg.backend:
        raise _invalid(f"unexpected 'platform' and 'backend' pair, got:{cfg.platform}, {cfg.backend}")

    if cfg.max_batch_size < 0:
        raise _invalid(f"'max_batch_size' must be non-negative value for {name}")

    if not cfg.HasField("version_policy"):
        raise _invalid(f"must specify 'version policy' for {name}")

    if cfg.HasField("dynamic_batching"):
        _validate_dynamic_batching(cfg)

    if cfg.HasField("sequence_batching"):
        _validate_sequence_batching(cfg)

    if cfg.HasField("ensemble_scheduling"):
        _validate_ensemble(cfg)
    elif cfg.platform == ENSEMBLE_PLATFORM:
        raise _invalid(
            f"ensemble scheduling must be set for ensemble {name} whose platform is {ENSEMBLE_PLATFORM}"
        )

    if cfg.model_transaction_policy.decoupled and cfg.response_cache.enable:
        raise _invalid(
            f"Response Cache does not currently support model {name} with 'decoupled' transaction "
            "policy. Please disable the response cache."
        )

    if cfg.HasField("model_metrics"):
        _validate_model_metrics(cfg)

    _validate_instance_groups(cfg)
    _validate_io(cfg)


def _validate_dynamic_batching(cfg: ModelConfig) -> None:
    name = cfg.name
    db = cfg.dynamic_batching
    for size in db.preferred_batch_size:
        if size <= 0:
            raise _invalid(f"dynamic batching preferred size must be positive for {name}")
        if size > cfg.max_batch_size:
            raise _invalid(f"dynamic batching preferred size must be <= max batch size for {name}")
    levels = db.priority_levels
    if levels != 0:
        if db.default_priority_level == 0 or db.default_priority_level > levels:
            raise _invalid(f"default priority level must be in range [1, {levels}] for {name}")
        for level in db.priority_queue_policy:
            if level == 0 or level > levels:
                raise _invalid(
                    f"priority queue policy must have priority level in range [1, {levels}] for {name}"
                )
    if db.preserve_ordering:
        if levels > 1:
            raise _invalid(f"Only one priority level is allowed when 'preserve_ordering' is true for {name}")
        policies = [db.default_queue_policy, *db.priority_queue_policy.values()]
        for policy in policies:
            if policy.default_timeout_microseconds != 0 and policy.timeout_action == ModelQueuePolicy.DELAY:
                raise _invalid(
                    "Queue policy can not have DELAY as timeout action when 'preserve_ordering' is "
                    f"true for {name}"
                )


_Control = ModelSequenceBatching.Control


def _control_kind_name(kind: int) -> str:
    return str(_Control.Kind.Name(kind))


def _check_sequence_control(sb: Any, name: str, kind: int, *, typed: bool) -> tuple[str, int]:
    """``Get{Boolean,Typed}SequenceControlProperties``: returns (tensor name or "", data type)."""
    kind_name = _control_kind_name(kind)
    seen_tensors: set[str] = set()
    found_name = ""
    found_type = DataType.TYPE_INVALID
    for control_input in sb.control_input:
        if not control_input.name:
            raise _invalid(f"sequence batching control tensor must have a name for {name}")
        if control_input.name in seen_tensors:
            raise _invalid(
                f"sequence batching control tensor '{control_input.name}' is specified for multiple "
                f"control kinds for {name}"
            )
        seen_tensors.add(control_input.name)
        for control in control_input.control:
            if control.kind != kind:
                continue
            if found_name:
                raise _invalid(f"sequence batching specifies multiple {kind_name} tensors for {name}")
            found_name = control_input.name
            n_int = len(control.int32_false_true)
            n_fp = len(control.fp32_false_true)
            n_bool = len(control.bool_false_true)
            if typed:
                found_type = control.data_type
                if n_int or n_fp or n_bool:
                    raise _invalid(
                        "sequence batching must not specify either 'int32_false_true', 'fp32_false_true' "
                        f"or 'bool_false_true' for {kind_name} for {name}"
                    )
                continue
            if not (n_int or n_fp or n_bool):
                raise _invalid(
                    "sequence batching must specify either 'int32_false_true', 'fp32_false_true' or "
                    f"'bool_false_true' for {kind_name} for {name}"
                )
            if sum(1 for n in (n_int, n_fp, n_bool) if n) > 1:
                raise _invalid(
                    "sequence batching specifies more than one from 'int32_false_true', "
                    f"'fp32_false_true' and 'bool_false_true' for {kind_name} for {name}"
                )
            for field, count, dtype in (
                ("int32_false_true", n_int, DataType.TYPE_INT32),
                ("fp32_false_true", n_fp, DataType.TYPE_FP32),
                ("bool_false_true", n_bool, DataType.TYPE_BOOL),
            ):
                if count:
                    if count != 2:
                        raise _invalid(
                            f"sequence batching control '{field}' must have exactly 2 entries for "
                            f"{kind_name} for {name}"
                        )
                    found_type = dtype
    return found_name, found_type


_CORRID_TYPES = frozenset(
    {
        DataType.TYPE_UINT64,
        DataType.TYPE_INT64,
        DataType.TYPE_UINT32,
        DataType.TYPE_INT32,
        DataType.TYPE_STRING,
    }
)


def _validate_sequence_batching(cfg: ModelConfig) -> None:
    name = cfg.name
    sb = cfg.sequence_batching
    if cfg.response_cache.enable:
        raise _invalid(
            f"Response Cache does not currently support model {name} with sequence batching scheduler. "
            "Please disable the response cache."
        )
    for kind in (
        _Control.CONTROL_SEQUENCE_START,
        _Control.CONTROL_SEQUENCE_END,
        _Control.CONTROL_SEQUENCE_READY,
    ):
        _check_sequence_control(sb, name, kind, typed=False)
    corrid_name, corrid_type = _check_sequence_control(sb, name, _Control.CONTROL_SEQUENCE_CORRID, typed=True)
    if corrid_name and corrid_type not in _CORRID_TYPES:
        raise _invalid(
            f"unexpected data type for control {_control_kind_name(_Control.CONTROL_SEQUENCE_CORRID)} for "
            f"{name}. Allowed data types are TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 and TYPE_STRING"
        )
    if sb.HasField("oldest"):
        for size in sb.oldest.preferred_batch_size:
            if size <= 0:
                raise _invalid(f"sequence batching preferred batch size must be positive for {name}")
            if size > cfg.max_batch_size:
                raise _invalid(f"sequence batching preferred batch size must be <= max batch size for {name}")
    if sb.HasField("direct"):
        utilization = sb.direct.minimum_slot_utilization
        if utilization < 0.0 or utilization > 1.0:
            raise _invalid(
                f"sequence batching minimum slot utilization must be in range (0.0, 1.0] for {name}"
            )


class _EnsembleTensor:
    __slots__ = ("is_output", "name", "next_nodes", "prev_nodes", "ready")

    def __init__(self, name: str, is_output: bool) -> None:
        self.name = name
        self.is_output = is_output
        self.ready = False
        self.prev_nodes: list[_EnsembleTensor] = []
        self.next_nodes: list[_EnsembleTensor] = []


def _validate_ensemble(cfg: ModelConfig) -> None:
    """``ValidateEnsembleSchedulingConfig``: structure and data flow of the steps."""
    name = cfg.name
    if cfg.platform != ENSEMBLE_PLATFORM:
        raise _invalid(
            f"ensemble scheduling cannot be set for model '{name}' whose platform is not {ENSEMBLE_PLATFORM}"
        )
    if len(cfg.instance_group) != 0:
        raise _invalid(f"instance group should not be specified for ensemble '{name}'")
    if cfg.HasField("optimization"):
        raise _invalid(f"optimization should not be specified for ensemble '{name}'")
    if len(cfg.model_warmup) != 0:
        raise _invalid(f"model_warmup can not be specified for ensemble '{name}'")
    steps = cfg.ensemble_scheduling.step
    if len(steps) == 0:
        raise _invalid(f"must specify 'step' for ensemble '{name}'")

    tensors: dict[str, _EnsembleTensor] = {}
    for index, step in enumerate(steps):
        if not step.model_name:
            raise _invalid(f"must specify 'model_name' in step {index} of ensemble '{name}'")
        if len(step.input_map) == 0:
            raise _invalid(f"must specify 'input_map' in step {index} of ensemble '{name}'")
        if len(step.output_map) == 0:
            raise _invalid(f"must specify 'output_map' in step {index} of ensemble '{name}'")
        produced: list[_EnsembleTensor] = []
        for tensor_name in step.output_map.values():
            node = tensors.get(tensor_name)
            if node is None:
                node = tensors[tensor_name] = _EnsembleTensor(tensor_name, True)
            elif node.is_output:
                raise _invalid(
                    f"ensemble tensor '{tensor_name}' can appear in an output map only once for "
                    f"ensemble '{name}' step {index}"
                )
            else:
                node.is_output = True
            produced.append(node)
        for tensor_name in step.input_map.values():
            node = tensors.get(tensor_name)
            if node is None:
                node = tensors[tensor_name] = _EnsembleTensor(tensor_name, False)
            for out in produced:
                out.prev_nodes.append(node)
                node.next_nodes.append(out)

    queue: list[_EnsembleTensor] = []
    for model_input in cfg.input:
        node = tensors.get(model_input.name)
        if node is None:
            # (sic) Triton's message has an unbalanced quote
            raise _invalid(f"ensemble input '{model_input.name}' for ensemble {name}' is not used")
        node.ready = True
        queue.append(node)
    while queue:
        ready_node = queue.pop(0)
        for next_node in ready_node.next_nodes:
            if next_node.ready:
                continue
            next_node.ready = all(prev.ready for prev in next_node.prev_nodes)
            if next_node.ready:
                queue.append(next_node)

    outputs: set[str] = set()
    for model_output in cfg.output:
        node = tensors.get(model_output.name)
        if node is None:
            raise _invalid(f"ensemble output '{model_output.name}' for ensemble {name}' is not used")
        if not node.ready:
            message = f"output '{model_output.name}' for ensemble '{name}' is not written"
            last = node
            seen: set[str] = set()
            prevs: list[_EnsembleTensor] | None = node.prev_nodes
            while prevs:
                current, prevs = prevs, None
                for candidate in current:
                    if not candidate.ready and candidate.name not in seen:
                        seen.add(candidate.name)
                        last = candidate
                        prevs = candidate.prev_nodes
                        break
            if last.name != node.name:
                message += f": at least one of its depending tensors, '{last.name}', is not connected"
            raise _invalid(message)
        outputs.add(model_output.name)
    for tensor_name, node in tensors.items():
        if tensor_name in outputs:
            continue
        if not node.ready or not node.next_nodes:
            raise _invalid(f"ensemble tensor '{tensor_name}' is unused in ensemble '{name}'")


def _validate_model_metrics(cfg: ModelConfig) -> None:
    for control in cfg.model_metrics.metric_control:
        if not control.HasField("metric_identifier"):
            raise _invalid("metric control must specify 'metric_identifier'")
        if not control.metric_identifier.family:
            raise _invalid("metric identifier must specify non-empty 'family'")
        if not control.HasField("histogram_options"):
            raise _invalid("metric control must specify 'histogram_options'")
        if len(control.histogram_options.buckets) == 0:
            raise _invalid("histogram options must specify non-empty 'buckets'")


def _validate_instance_groups(cfg: ModelConfig) -> None:
    """``ValidateInstanceGroup`` for a server without GPUs; KIND_AUTO is left to normalisation."""
    if cfg.HasField("ensemble_scheduling"):
        return
    name = cfg.name
    for group in cfg.instance_group:
        prefix = f"instance group {group.name} of model {name}"
        if group.kind == ModelInstanceGroup.KIND_MODEL:
            if len(group.gpus) > 0:
                raise _invalid(f"{prefix} has kind KIND_MODEL but specifies one or more GPUs")
        elif group.kind == ModelInstanceGroup.KIND_GPU:
            raise _invalid(f"{prefix} has kind KIND_GPU but no GPUs are available")
        elif group.kind == ModelInstanceGroup.KIND_CPU and len(group.gpus) > 0:
            raise _invalid(f"{prefix} has kind KIND_CPU but specifies one or more GPUs")
        if len(group.profile) > 0:
            if cfg.platform != TENSORRT_PLATFORM:
                # (sic) no space before "specifies" in Triton's message
                raise _invalid(
                    f"{prefix} and platform {cfg.platform}specifies profile field which is only "
                    "supported for TensorRT models"
                )
            for profile in group.profile:
                if not profile:
                    raise _invalid("profile name must not be empty")
                leading = _LEADING_INT.match(profile)  # std::stoi parses a leading integer
                if leading is None:
                    raise _invalid(f"unable to parse '{profile}': stoi")
                if int(leading.group()) < 0:
                    raise _invalid(
                        f"{prefix} and platform {cfg.platform} specifies invalid profile {profile}. The "
                        "field should contain the string representation of a non-negative integer."
                    )


_LEADING_INT = re.compile(r"\s*[+-]?\d+")


def _element_count(dims: Iterable[int]) -> int:
    """``triton::common::GetElementCount``: -1 if any wildcard, 0 for no dims."""
    count = 0
    first = True
    for dim in dims:
        if dim == _WILDCARD_DIM:
            return -1
        count = dim if first else count * dim
        first = False
    return count


def _segment_counts(dims: Iterable[int]) -> list[int]:
    counts: list[int] = []
    current = 1
    for dim in dims:
        if dim != _WILDCARD_DIM:
            current *= dim
        else:
            counts.append(current)
            current = 1
    counts.append(current)
    return counts


def _validate_io_shape(io: Any, max_batch_size: int, prefix: str) -> None:
    """``ValidateIOShape``; messages get `` for <model>`` appended by the caller."""
    if not io.name:
        raise _invalid(f"{prefix}must specify 'name'")
    pname = f"{prefix}'{io.name}' "
    if io.data_type == DataType.TYPE_INVALID:
        raise _invalid(f"{pname}must specify 'data_type'")
    if len(io.dims) == 0:
        raise _invalid(f"{pname}must specify 'dims'")
    has_reshape = io.HasField("reshape")
    if has_reshape and len(io.reshape.shape) == 0 and max_batch_size == 0:
        raise _invalid(
            f"{pname}cannot have empty reshape for non-batching model as scalar tensors are not supported"
        )
    for dim in io.dims:
        if dim < 1 and dim != _WILDCARD_DIM:
            raise _invalid(
                f"{pname}dimension must be integer >= 1, or {_WILDCARD_DIM} to indicate a "
                "variable-size dimension"
            )
    if not has_reshape:
        return
    for dim in io.reshape.shape:
        if dim < 1 and dim != _WILDCARD_DIM:
            raise _invalid(
                f"{pname}reshape dimensions must be integer >= 1, or {_WILDCARD_DIM} to indicate a "
                "variable-size dimension"
            )
    dims_size = _element_count(io.dims)
    reshape_size = _element_count(io.reshape.shape)
    if dims_size != reshape_size and (reshape_size != 0 or dims_size != 1):
        raise _invalid(f"{pname}has different size for dims and reshape")
    if dims_size == -1:
        dim_counts = _segment_counts(io.dims)
        reshape_counts = _segment_counts(io.reshape.shape)
        if len(dim_counts) != len(reshape_counts):
            raise _invalid(f"{pname}has different number of variable-size dimensions for dims and reshape")
        if dim_counts != reshape_counts:
            raise _invalid(f"{pname}has different size for dims and reshape")


def _validate_non_linear(io: Any, platform: str, is_input: bool) -> None:
    if not io.is_non_linear_format_io:
        return
    if platform != TENSORRT_PLATFORM:
        raise _invalid("Non-linear IO format is only supported for the TensorRT platform")
    if len(io.dims) != 3:
        raise _invalid(f"Non-linear IO format {'input' if is_input else 'output'} requires 3 dims")


def _validate_io(cfg: ModelConfig) -> None:
    """``ValidateModelIOConfig`` plus unique tensor names; every message ends `` for <model>``."""
    name = cfg.name
    try:
        seen: set[str] = set()
        for model_input in cfg.input:
            _validate_io_shape(model_input, cfg.max_batch_size, "model input ")
            if (
                model_input.format in (ModelInput.FORMAT_NHWC, ModelInput.FORMAT_NCHW)
                and len(model_input.dims) != 3
            ):
                raise _invalid("model input NHWC/NCHW require 3 dims")
            if cfg.platform != TENSORRT_PLATFORM and model_input.is_shape_tensor:
                raise _invalid("shape tensors are only supported for TensorRT platform")
            _validate_non_linear(model_input, cfg.platform, True)
            if model_input.name in seen:
                raise _invalid(f"model input '{model_input.name}' is specified more than once")
            seen.add(model_input.name)
        seen = set()
        for model_output in cfg.output:
            _validate_io_shape(model_output, cfg.max_batch_size, "model output ")
            if cfg.platform != TENSORRT_PLATFORM and model_output.is_shape_tensor:
                raise _invalid("shape tensors are only supported for TensorRT platform")
            _validate_non_linear(model_output, cfg.platform, False)
            if model_output.name in seen:
                raise _invalid(f"model output '{model_output.name}' is specified more than once")
            seen.add(model_output.name)
        _validate_batch_io(cfg)
    except InvalidArgumentError as e:
        raise InvalidArgumentError(f"{e.message} for {name}") from None


def _validate_batch_io(cfg: ModelConfig) -> None:
    input_names = {i.name for i in cfg.input}
    output_names = {o.name for o in cfg.output}
    for batch_input in cfg.batch_input:
        if len(batch_input.source_input) != 1:
            raise _invalid(
                f"batch input kind '{BatchInput.Kind.Name(batch_input.kind)}' expects 1 source input, "
                f"got {len(batch_input.source_input)}"
            )
        if batch_input.data_type not in (DataType.TYPE_INT32, DataType.TYPE_FP32):
            raise _invalid("batch input data type must be TYPE_INT32 or TYPE_FP32")
        for source in batch_input.source_input:
            if source not in input_names:
                raise _invalid(f"unknown source input name '{source}'")
    for batch_output in cfg.batch_output:
        if len(batch_output.source_input) != 1:
            raise _invalid(
                f"batch output kind '{BatchOutput.Kind.Name(batch_output.kind)}' expects 1 source input, "
                f"got {len(batch_output.source_input)}"
            )
        for source in batch_output.source_input:
            if source not in input_names:
                raise _invalid(f"unknown source input name '{source}'")
        targets: set[str] = set()
        for target in batch_output.target_name:
            if target not in output_names:
                raise _invalid(f"unknown target output name '{target}'")
            if target in targets:
                raise _invalid(f"target output name '{target}' can only be specified once")
            targets.add(target)


def require_io(cfg: ModelConfig) -> None:
    """Raise unless ``cfg`` declares at least one input and one output.

    Not part of :func:`validate_config`: a Python model may omit both from ``config.pbtxt`` and
    have ``auto_complete_config`` add them, so call this after backend auto-complete.
    """
    if len(cfg.input) == 0:
        raise _invalid(f"model configuration for '{cfg.name}' must specify one or more 'input'")
    if len(cfg.output) == 0:
        raise _invalid(f"model configuration for '{cfg.name}' must specify one or more 'output'")


# --------------------------------------------------------------------------------------------------
# JSON (``ModelConfigToJson``)

_INT64_TYPES = frozenset(
    {
        FieldDescriptor.TYPE_INT64,
        FieldDescriptor.TYPE_UINT64,
        FieldDescriptor.TYPE_SINT64,
        FieldDescriptor.TYPE_FIXED64,
        FieldDescriptor.TYPE_SFIXED64,
    }
)
_FLOAT_TYPES = frozenset({FieldDescriptor.TYPE_FLOAT, FieldDescriptor.TYPE_DOUBLE})

#: 64-bit fields Triton 2.51's ModelConfigToJson leaves as JSON strings (it fixes a hard-coded
#: list; these are not on it, or, for initial_state, looked up in the wrong object).
_TRITON_STRING_INT64 = frozenset(
    {
        "instance_group.secondary_devices.device_id",
        "optimization.cuda.graph_spec.input.value.dim",
        "optimization.cuda.graph_spec.graph_lower_bound.input.value.dim",
        "sequence_batching.state.initial_state.dims",
    }
)

#: Fields the installed (newer) model_config.proto has that Triton 2.51's has not: printed only
#: when set, so an ordinary config prints exactly as 2.51 does.
_NEWER_THAN_2_51 = frozenset({("inference.ModelEnsembling", "max_inflight_requests")})


def _fix_value(value: Any, field: FieldDescriptor, path: str) -> Any:
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        if isinstance(value, dict) and field.message_type is not None:
            _fix_message(value, field.message_type, f"{path}.")
        return value
    if field.type in _INT64_TYPES and isinstance(value, str) and path not in _TRITON_STRING_INT64:
        return int(value)
    if (
        field.type in _FLOAT_TYPES
        and isinstance(value, float)
        and math.isfinite(value)
        and value.is_integer()
    ):
        return int(value)  # the C++ printer writes 1.0 as 1
    return value


def _fix_message(obj: dict[str, Any], descriptor: Descriptor, prefix: str) -> None:
    """Fix 64-bit integers and floats in place and put the keys in declaration order (as C++ does)."""
    fixed: dict[str, Any] = {}
    for field in descriptor.fields:
        key = field.name
        if key not in obj:
            continue
        path = f"{prefix}{key}"
        value = obj[key]
        if (descriptor.full_name, key) in _NEWER_THAN_2_51 and not value:
            continue
        message_type = field.message_type
        if message_type is not None and message_type.GetOptions().map_entry:
            value_field = message_type.fields_by_name["value"]
            for map_key in list(value):
                value[map_key] = _fix_value(value[map_key], value_field, f"{path}.value")
        elif field.is_repeated:
            value[:] = [_fix_value(item, field, path) for item in value]
        else:
            value = _fix_value(value, field, path)
        fixed[key] = value
    obj.clear()
    obj.update(fixed)


def config_to_json(cfg: ModelConfig) -> dict[str, Any]:
    """The object ``GET /v2/models/{m}/config`` returns (Triton ``ModelConfigToJson``).

    All fields without presence are printed (proto field names, enums by name); 64-bit integers
    are numbers, not protobuf's strings (except where Triton 2.51 itself leaves strings).
    """
    obj: dict[str, Any] = json_format.MessageToDict(
        cfg, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    _fix_message(obj, cfg.DESCRIPTOR, "")
    return obj
