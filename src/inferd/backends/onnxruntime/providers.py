"""The execution providers of an instance's session, as the reference's onnxruntime backend sets them.

A ``KIND_GPU`` instance gets the CUDA execution provider on its GPU (``device_id``), after TensorRT's
when ``gpu_execution_accelerator`` names ``tensorrt``, and the CPU provider last. The options are
the reference's (onnxruntime_backend's ``onnxruntime.cc``), passed through ONNX Runtime's Python API:

- ``gpu_execution_accelerator [ { name: "cuda" parameters {...} } ]``: CUDA provider options as
  given (``do_copy_in_default_stream`` and ``use_ep_level_unified_stream`` checked as booleans);
- then the model's ``parameters`` ``cudnn_conv_algo_search`` (0 EXHAUSTIVE, 1 HEURISTIC, 2 DEFAULT),
  ``gpu_mem_limit``, ``arena_extend_strategy`` (0 kNextPowerOfTwo, 1 kSameAsRequested) and
  ``do_copy_in_default_stream``, each with the reference's default when absent; as there, they
  override an accelerator's value for the same key (the reference always finds ``parameters`` in the
  config's JSON);
- ``tensorrt``: ``precision_mode`` FP16/INT8/FP32, ``max_workspace_size_bytes`` and the ``trt_*``
  keys, mapped and checked as the reference does (an unknown key fails the load); inferd also sets
  the instance's ``device_id``, which the reference leaves at TensorRT's default;
- the CUDA stream: ONNX Runtime's own (the reference hands the provider the stream of its instance).

No ONNX Runtime import here: the backend passes ``ort.get_available_providers()`` in, and a provider
the installation lacks fails the load with what to install.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from inferd.backends.base import InstanceSpec
from inferd.errors import InvalidArgumentError, UnavailableError

if TYPE_CHECKING:
    from inferd.backends.onnxruntime.options import SessionSettings

CPU_PROVIDER = "CPUExecutionProvider"
CUDA_PROVIDER = "CUDAExecutionProvider"
TENSORRT_PROVIDER = "TensorrtExecutionProvider"
OPENVINO_PROVIDER = "OpenVINOExecutionProvider"

_CUDNN_CONV_ALGO_SEARCH = {0: "EXHAUSTIVE", 1: "HEURISTIC", 2: "DEFAULT"}
_ARENA_EXTEND_STRATEGY = {0: "kNextPowerOfTwo", 1: "kSameAsRequested"}
_SIZE_MAX = str((1 << 64) - 1)  # std::numeric_limits<size_t>::max()

#: tensorrt accelerator parameter -> (TensorRT provider option, how its value is checked)
_TRT_KEYS: dict[str, tuple[str, str]] = {
    "max_workspace_size_bytes": ("trt_max_workspace_size", "ull"),
    "trt_max_partition_iterations": ("trt_max_partition_iterations", "int"),
    "trt_min_subgraph_size": ("trt_min_subgraph_size", "int"),
    "int8_calibration_table_name": ("trt_int8_calibration_table_name", "str"),
    "int8_use_native_calibration_table": ("trt_int8_use_native_calibration_table", "bool"),
    "trt_dla_enable": ("trt_dla_enable", "bool"),
    "trt_dla_core": ("trt_dla_core", "int"),
    "trt_engine_cache_enable": ("trt_engine_cache_enable", "bool"),
    "trt_engine_cache_path": ("trt_engine_cache_path", "str"),
    "trt_engine_cache_prefix": ("trt_engine_cache_prefix", "str"),
    "trt_dump_subgraphs": ("trt_dump_subgraphs", "bool"),
    "trt_force_sequential_engine_build": ("trt_force_sequential_engine_build", "bool"),
    "trt_context_memory_sharing_enable": ("trt_context_memory_sharing_enable", "bool"),
    "trt_layer_norm_fp32_fallback": ("trt_layer_norm_fp32_fallback", "bool"),
    "trt_timing_cache_enable": ("trt_timing_cache_enable", "bool"),
    "trt_timing_cache_path": ("trt_timing_cache_path", "str"),
    "trt_force_timing_cache": ("trt_force_timing_cache", "bool"),
    "trt_detailed_build_log": ("trt_detailed_build_log", "bool"),
    "trt_build_heuristics_enable": ("trt_build_heuristics_enable", "bool"),
    "trt_sparsity_enable": ("trt_sparsity_enable", "bool"),
    "trt_builder_optimization_level": ("trt_builder_optimization_level", "int"),
    "trt_auxiliary_streams": ("trt_auxiliary_streams", "int"),
    "trt_tactic_sources": ("trt_tactic_sources", "str"),
    "trt_extra_plugin_lib_paths": ("trt_extra_plugin_lib_paths", "str"),
    "trt_profile_min_shapes": ("trt_profile_min_shapes", "str"),
    "trt_profile_max_shapes": ("trt_profile_max_shapes", "str"),
    "trt_profile_opt_shapes": ("trt_profile_opt_shapes", "str"),
    "trt_cuda_graph_enable": ("trt_cuda_graph_enable", "bool"),
    "trt_dump_ep_context_model": ("trt_dump_ep_context_model", "bool"),
    "trt_ep_context_file_path": ("trt_ep_context_file_path", "str"),
    "trt_ep_context_embed_mode": ("trt_ep_context_embed_mode", "int"),
}


def execution_providers(
    s: SessionSettings,
    spec: InstanceSpec,
    available: Sequence[str],
    model: str = "",
    runtime: str = "onnxruntime",
) -> list[Any]:
    """The providers of one instance's session, in priority order (CPU always last). ``model`` and
    ``runtime`` (``onnxruntime <version>``) name what a missing CUDA provider's message speaks of."""
    providers: list[Any] = []
    if spec.kind == "GPU":
        cuda: dict[str, str] = {}
        for name, params in s.gpu_accelerators:
            if name == "tensorrt":
                _require(TENSORRT_PROVIDER, "tensorrt", "onnxruntime-gpu with TensorRT", available)
                providers.append(
                    (TENSORRT_PROVIDER, {"device_id": str(spec.device_id), **tensorrt_options(params)})
                )
            elif name == "cuda":
                cuda.update(_cuda_accelerator_options(params))
            else:
                raise InvalidArgumentError(f"unknown Execution Accelerator '{name}' is requested")
        if CUDA_PROVIDER not in available:
            raise UnavailableError(
                f"unable to load model '{model}': instance '{spec.name}' is KIND_GPU (GPU {spec.device_id}), but "
                f"the installed {runtime} has no {CUDA_PROVIDER}: it is a CPU-only build (its providers: "
                f"{', '.join(available)}); install onnxruntime-gpu in place of onnxruntime, or use "
                "instance_group [ { kind: KIND_CPU } ]"
            )
        cuda["device_id"] = str(spec.device_id)
        cuda.update(cuda_model_options(dict(s.parameters)))
        providers.append((CUDA_PROVIDER, cuda))
    for name, params in s.cpu_accelerators:
        if name == "openvino":
            _require(OPENVINO_PROVIDER, "openvino", "onnxruntime-openvino", available)
            providers.append((OPENVINO_PROVIDER, {"device_type": "CPU", **dict(params)}))
        else:
            raise InvalidArgumentError(f"unknown Execution Accelerator '{name}' is requested")
    providers.append(CPU_PROVIDER)
    return providers


def _cuda_accelerator_options(params: Sequence[tuple[str, str]]) -> dict[str, str]:
    """A ``cuda`` accelerator's parameters as CUDA provider options (empty keys and values dropped)."""
    out: dict[str, str] = {}
    for key, value in params:
        if key in ("do_copy_in_default_stream", "use_ep_level_unified_stream"):
            _parse_bool(value)
        if key and value:
            out[key] = value
    return out


def cuda_model_options(parameters: dict[str, str]) -> dict[str, str]:
    """The four CUDA provider options the reference reads from the model's ``parameters`` (with its
    defaults), in the reference's order."""
    algo = _parse_int(parameters.get("cudnn_conv_algo_search", "0"))
    if algo not in _CUDNN_CONV_ALGO_SEARCH:
        raise InvalidArgumentError(f"unsupported cudnn_conv_algo_search value '{algo}' is requested")
    arena = _parse_int(parameters.get("arena_extend_strategy", "0"))
    if arena not in _ARENA_EXTEND_STRATEGY:
        raise InvalidArgumentError(f"unsupported arena_extend_strategy value '{arena}' is requested")
    return {
        "cudnn_conv_algo_search": _CUDNN_CONV_ALGO_SEARCH[algo],
        "gpu_mem_limit": parameters.get("gpu_mem_limit", _SIZE_MAX),
        "arena_extend_strategy": _ARENA_EXTEND_STRATEGY[arena],
        "do_copy_in_default_stream": parameters.get("do_copy_in_default_stream", "1"),
    }


def tensorrt_options(params: Sequence[tuple[str, str]]) -> dict[str, str]:
    """A ``tensorrt`` accelerator's parameters as TensorRT provider options (the reference's mapping)."""
    out: dict[str, str] = {}
    for key, value in params:
        if key == "precision_mode":
            if value == "FP16":
                out["trt_fp16_enable"] = "1"
            elif value == "INT8":
                out["trt_int8_enable"] = "1"
            elif value != "FP32":
                raise InvalidArgumentError(f"unsupported precision mode '{value}' is requested")
            continue
        if key not in _TRT_KEYS:
            raise InvalidArgumentError(
                f"unknown parameter '{key}' is provided for TensorRT Execution Accelerator"
            )
        option, kind = _TRT_KEYS[key]
        if kind == "int":
            _parse_int(value)
        elif kind == "ull":
            _parse_ull(value)
        elif kind == "bool":
            _parse_bool(value)
        if value:
            out[option] = value
    return out


def _parse_bool(value: str) -> bool:
    """``ParseBoolValue`` of the reference's backend utilities."""
    lowered = value.lower()
    if lowered in ("true", "on", "1"):
        return True
    if lowered in ("false", "off", "0"):
        return False
    raise InvalidArgumentError(f"failed to convert '{value}' to boolean")


def _leading_integer(value: str) -> int | None:
    """The integer ``std::stoi``/``std::stoull`` read: leading whitespace, a sign, digits; the rest
    ignored (None: no digits)."""
    text = value.lstrip(" \t\n\v\f\r")
    sign = ""
    if text[:1] in ("+", "-"):
        sign, text = text[0], text[1:]
    digits = len(text) - len(text.lstrip("0123456789"))
    return int(sign + text[:digits]) if digits else None


def _parse_int(value: str) -> int:
    """``ParseIntValue``: ``std::stoi``'s reading of ``value`` (out of range: refused the same way)."""
    n = _leading_integer(value)
    if n is None or not -(1 << 31) <= n < (1 << 31):
        raise InvalidArgumentError(f"failed to convert '{value}' to integral number")
    return n


def _parse_ull(value: str) -> int:
    """``ParseUnsignedLongLongValue``: ``std::stoull``'s reading of ``value``."""
    n = _leading_integer(value)
    if n is None or abs(n) >= (1 << 64):
        raise InvalidArgumentError(f"failed to convert '{value}' to unsigned long long integral number")
    return n % (1 << 64)  # stoull wraps a negative number


def _require(provider: str, what: str, package: str, available: Sequence[str]) -> None:
    if provider not in available:
        raise UnavailableError(
            f"'{what}' needs ONNX Runtime's {provider}, which this installation lacks (it has "
            f"{', '.join(available)}): install {package} in place of onnxruntime"
        )
