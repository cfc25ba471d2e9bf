"""Triton core's config checks (``ValidateModelConfig``, ``ValidateInstanceGroup``,
``ValidateModelIOConfig``), with its messages; :func:`config_checks` lists them one by one."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import partial
from typing import Any

from inferd.errors import InvalidArgumentError
from inferd.gpu.devices import NO_GPUS, SupportedGpus
from inferd.repository.config.instance_group import validate_instance_group
from inferd.repository.config.limits import limit_checks
from inferd.repository.config.schema import (
    ENSEMBLE_PLATFORM,
    KNOWN_PLATFORM_BACKENDS,
    TENSORRT_PLATFORM,
    BatchInput,
    BatchOutput,
    DataType,
    ModelConfig,
    ModelInput,
    ModelOutput,
    ModelQueuePolicy,
    ModelSequenceBatching,
)
from inferd.repository.config.validate_ensemble import validate_ensemble

_KNOWN_BACKENDS = frozenset(KNOWN_PLATFORM_BACKENDS.values())
_WILDCARD_DIM = -1


def _invalid(message: str) -> InvalidArgumentError:
    return InvalidArgumentError(message)


#: a config field's path: names and occurrence indices, ``("input", 1)`` for the second input
FieldPath = tuple[str | int, ...]


def validate_config(cfg: ModelConfig, gpus: SupportedGpus = NO_GPUS) -> None:
    """Triton core's config checks; raises InvalidArgumentError (InternalError for an impossible kind).

    Run it after :func:`normalize_config` (a missing version policy is an error here).  Inputs and
    outputs that are present are validated; whether they must be present is :func:`require_io`.
    ``gpus``: the GPUs instance groups may name (none by default).
    """
    for _, check in config_checks(cfg, gpus):
        check()


def config_checks(
    cfg: ModelConfig, gpus: SupportedGpus = NO_GPUS
) -> list[tuple[FieldPath, Callable[[], None]]]:
    """:func:`validate_config`'s checks in its order, each with the field it is about.

    The server stops at the first that raises; ``inferd check`` runs them all and reports each
    failure at its field. A check of one input or output looks at that tensor alone (and at the
    names before it, for duplicates), so one bad tensor hides no other.
    """
    checks: list[tuple[FieldPath, Callable[[], None]]] = [
        (("name",), partial(_validate_name, cfg)),
        (("backend",), partial(_validate_platform, cfg)),
        (("max_batch_size",), partial(_validate_max_batch_size, cfg)),
        (("version_policy",), partial(_validate_version_policy, cfg)),
        *limit_checks(cfg),
    ]
    if cfg.HasField("dynamic_batching"):
        checks.append((("dynamic_batching",), partial(_validate_dynamic_batching, cfg)))
    if cfg.HasField("sequence_batching"):
        checks.append((("sequence_batching",), partial(_validate_sequence_batching, cfg)))
    checks.append((("ensemble_scheduling",), partial(_validate_scheduling, cfg)))
    checks.append((("model_transaction_policy",), partial(_validate_response_cache, cfg)))
    if cfg.HasField("model_metrics"):
        checks.append((("model_metrics",), partial(_validate_model_metrics, cfg)))
    if not cfg.HasField("ensemble_scheduling"):
        for index in range(len(cfg.instance_group)):
            checks.append((("instance_group", index), partial(validate_instance_group, cfg, index, gpus)))
    first_input, first_output = _first_indices(cfg.input), _first_indices(cfg.output)
    for index in range(len(cfg.input)):
        checks.append((("input", index), partial(_for_model, cfg, _validate_input, cfg, index, first_input)))
    for index in range(len(cfg.output)):
        checks.append(
            (("output", index), partial(_for_model, cfg, _validate_output, cfg, index, first_output))
        )
    checks.append((("batch_input",), partial(_for_model, cfg, _validate_batch_io, cfg)))
    return checks


def _validate_name(cfg: ModelConfig) -> None:
    if not cfg.name:
        raise _invalid("model configuration must specify 'name'")


def _validate_platform(cfg: ModelConfig) -> None:
    name = cfg.name
    if not cfg.backend:
        if cfg.platform != ENSEMBLE_PLATFORM:
            raise _invalid(f"unexpected platform type '{cfg.platform}' for {name}")
    elif cfg.platform == ENSEMBLE_PLATFORM:
        raise _invalid(
            f"Ensemble model '{name}' must have platform type '{cfg.platform}' and empty backend type"
        )
    if cfg.backend in _KNOWN_BACKENDS and KNOWN_PLATFORM_BACKENDS.get(cfg.platform) != cfg.backend:
        raise _invalid(f"unexpected 'platform' and 'backend' pair, got:{cfg.platform}, {cfg.backend}")


def _validate_max_batch_size(cfg: ModelConfig) -> None:
    if cfg.max_batch_size < 0:
        raise _invalid(f"'max_batch_size' must be non-negative value for {cfg.name}")


def _validate_version_policy(cfg: ModelConfig) -> None:
    if not cfg.HasField("version_policy"):
        raise _invalid(f"must specify 'version policy' for {cfg.name}")


def _validate_scheduling(cfg: ModelConfig) -> None:
    if cfg.HasField("ensemble_scheduling"):
        validate_ensemble(cfg)
    elif cfg.platform == ENSEMBLE_PLATFORM:
        raise _invalid(
            f"ensemble scheduling must be set for ensemble {cfg.name} whose platform is {ENSEMBLE_PLATFORM}"
        )


def _validate_response_cache(cfg: ModelConfig) -> None:
    if cfg.model_transaction_policy.decoupled and cfg.response_cache.enable:
        raise _invalid(
            f"Response Cache does not currently support model {cfg.name} with 'decoupled' transaction "
            "policy. Please disable the response cache."
        )


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


def _check_sequence_control(
    sb: ModelSequenceBatching, name: str, kind: int, *, typed: bool
) -> tuple[str, int]:
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


def _validate_io_shape(io: ModelInput | ModelOutput, max_batch_size: int, prefix: str) -> None:
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


def _validate_non_linear(io: ModelInput | ModelOutput, platform: str, is_input: bool) -> None:
    if not io.is_non_linear_format_io:
        return
    if platform != TENSORRT_PLATFORM:
        raise _invalid("Non-linear IO format is only supported for the TensorRT platform")
    if len(io.dims) != 3:
        raise _invalid(f"Non-linear IO format {'input' if is_input else 'output'} requires 3 dims")


def _for_model(cfg: ModelConfig, check: Callable[..., None], *args: Any) -> None:
    """``ValidateModelIOConfig``'s messages end `` for <model>``."""
    try:
        check(*args)
    except InvalidArgumentError as e:
        raise InvalidArgumentError(f"{e.message} for {cfg.name}") from None


def _first_indices(tensors: Iterable[Any]) -> dict[str, int]:
    """Each name's first index among ``tensors``: a duplicate is one whose index is not its name's
    first (one pass, not a look back at every earlier tensor: a config may list thousands)."""
    first: dict[str, int] = {}
    for index, tensor in enumerate(tensors):
        first.setdefault(tensor.name, index)
    return first


def _validate_input(cfg: ModelConfig, index: int, first: dict[str, int]) -> None:
    """One input of ``ValidateModelIOConfig``, then that its name is not an earlier input's."""
    model_input = cfg.input[index]
    _validate_io_shape(model_input, cfg.max_batch_size, "model input ")
    if model_input.format in (ModelInput.FORMAT_NHWC, ModelInput.FORMAT_NCHW) and len(model_input.dims) != 3:
        raise _invalid("model input NHWC/NCHW require 3 dims")
    if cfg.platform != TENSORRT_PLATFORM and model_input.is_shape_tensor:
        raise _invalid("shape tensors are only supported for TensorRT platform")
    _validate_non_linear(model_input, cfg.platform, True)
    if first[model_input.name] != index:
        raise _invalid(f"model input '{model_input.name}' is specified more than once")


def _validate_output(cfg: ModelConfig, index: int, first: dict[str, int]) -> None:
    """One output of ``ValidateModelIOConfig``, then that its name is not an earlier output's."""
    model_output = cfg.output[index]
    _validate_io_shape(model_output, cfg.max_batch_size, "model output ")
    if cfg.platform != TENSORRT_PLATFORM and model_output.is_shape_tensor:
        raise _invalid("shape tensors are only supported for TensorRT platform")
    _validate_non_linear(model_output, cfg.platform, False)
    if first[model_output.name] != index:
        raise _invalid(f"model output '{model_output.name}' is specified more than once")


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
