"""A KIND_GPU instance's execution providers (backends/onnxruntime/providers.py): the CUDA provider on
its GPU with the reference's options (the ``cuda`` accelerator's, then the model parameters it reads,
with its defaults), TensorRT's mapped as the reference maps them, and an onnxruntime without CUDA
refused with what to install. No GPU needed: the available providers are handed in."""

from __future__ import annotations

from typing import Any

import pytest

from inferd.backends.base import InstanceSpec
from inferd.backends.onnxruntime.options import session_settings
from inferd.backends.onnxruntime.providers import execution_providers, tensorrt_options
from inferd.errors import InvalidArgumentError, UnavailableError
from inferd.repository import parse_config_text

GPU1 = InstanceSpec("m_0", "GPU", 1)
CPU = InstanceSpec("m_0", "CPU", 0)
WITH_CUDA = ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]
#: the CUDA options the reference sets from the model's parameters when they leave them out
DEFAULTS = {
    "cudnn_conv_algo_search": "EXHAUSTIVE",
    "gpu_mem_limit": "18446744073709551615",
    "arena_extend_strategy": "kNextPowerOfTwo",
    "do_copy_in_default_stream": "1",
}


def _settings(text: str) -> Any:
    cfg = parse_config_text(text, "x")
    cfg.name = "m"
    return session_settings(cfg, instances=1, cpus=2)


def _gpu(accelerators: str) -> str:
    return f"optimization {{ execution_accelerators {{ gpu_execution_accelerator [ {accelerators} ] }} }}"


def test_a_gpu_instance_runs_on_cuda_on_its_device_then_the_cpu() -> None:
    assert execution_providers(_settings(""), GPU1, WITH_CUDA) == [
        ("CUDAExecutionProvider", {"device_id": "1", **DEFAULTS}),
        "CPUExecutionProvider",
    ]


def test_a_cpu_instance_gets_no_gpu_provider() -> None:
    assert execution_providers(_settings(_gpu('{ name: "cuda" }')), CPU, WITH_CUDA) == [
        "CPUExecutionProvider"
    ]


def test_the_cuda_accelerators_options_then_the_model_parameters_as_the_reference() -> None:
    text = _gpu(
        '{ name: "cuda" parameters [ { key: "cudnn_conv_use_max_workspace" value: "0" }, '
        '{ key: "cudnn_conv_algo_search" value: "HEURISTIC" }, { key: "device_id" value: "5" } ] }'
    )
    # the reference sets device_id and the four parameter options after the accelerator's: they win
    assert execution_providers(_settings(text), GPU1, WITH_CUDA)[0] == (
        "CUDAExecutionProvider",
        {"cudnn_conv_use_max_workspace": "0", "device_id": "1", **DEFAULTS},
    )
    params = (
        'parameters [ { key: "cudnn_conv_algo_search" value: { string_value: "1" } }, '
        '{ key: "gpu_mem_limit" value: { string_value: "1073741824" } }, '
        '{ key: "arena_extend_strategy" value: { string_value: "1" } }, '
        '{ key: "do_copy_in_default_stream" value: { string_value: "0" } } ]'
    )
    assert execution_providers(_settings(params), GPU1, WITH_CUDA)[0] == (
        "CUDAExecutionProvider",
        {
            "device_id": "1",
            "cudnn_conv_algo_search": "HEURISTIC",
            "gpu_mem_limit": "1073741824",
            "arena_extend_strategy": "kSameAsRequested",
            "do_copy_in_default_stream": "0",
        },
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            'parameters [ { key: "cudnn_conv_algo_search" value: { string_value: "3" } } ]',
            "unsupported cudnn_conv_algo_search value '3' is requested",
        ),
        (
            'parameters [ { key: "arena_extend_strategy" value: { string_value: "x" } } ]',
            "failed to convert 'x' to integral number",
        ),
        (
            'parameters [ { key: "arena_extend_strategy" value: { string_value: "2" } } ]',
            "unsupported arena_extend_strategy value '2' is requested",
        ),
        (
            _gpu('{ name: "cuda" parameters [ { key: "do_copy_in_default_stream" value: "maybe" } ] }'),
            "failed to convert 'maybe' to boolean",
        ),
        (_gpu('{ name: "magic" }'), "unknown Execution Accelerator 'magic' is requested"),
    ],
)
def test_bad_cuda_settings_fail_the_load_with_the_references_text(text: str, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        execution_providers(_settings(text), GPU1, WITH_CUDA)


def test_an_onnxruntime_without_cuda_refuses_a_gpu_instance_saying_it_is_cpu_only() -> None:
    with pytest.raises(UnavailableError) as e:
        execution_providers(_settings(""), GPU1, ["CPUExecutionProvider"], "m", "onnxruntime 1.30.0")
    assert e.value.message == (
        "unable to load model 'm': instance 'm_0' is KIND_GPU (GPU 1), but the installed onnxruntime 1.30.0 has "
        "no CUDAExecutionProvider: it is a CPU-only build (its providers: CPUExecutionProvider); install "
        "onnxruntime-gpu in place of onnxruntime, or use instance_group [ { kind: KIND_CPU } ]"
    )


def test_tensorrt_comes_first_with_the_references_option_names() -> None:
    text = _gpu(
        '{ name: "tensorrt" parameters [ { key: "precision_mode" value: "FP16" }, '
        '{ key: "max_workspace_size_bytes" value: "1073741824" }, { key: "trt_engine_cache_enable" value: "1" }, '
        '{ key: "int8_calibration_table_name" value: "" } ] }'
    )
    providers = execution_providers(_settings(text), GPU1, WITH_CUDA)
    assert providers[0] == (
        "TensorrtExecutionProvider",
        {
            "device_id": "1",
            "trt_fp16_enable": "1",
            "trt_max_workspace_size": "1073741824",
            "trt_engine_cache_enable": "1",
        },
    )
    assert [p if isinstance(p, str) else p[0] for p in providers] == [
        "TensorrtExecutionProvider",
        "CUDAExecutionProvider",
        "CPUExecutionProvider",
    ]
    with pytest.raises(UnavailableError, match="install onnxruntime-gpu with TensorRT"):
        execution_providers(_settings(text), GPU1, ["CUDAExecutionProvider", "CPUExecutionProvider"])


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ([("precision_mode", "FP8")], "unsupported precision mode 'FP8' is requested"),
        (
            [("max_workspace_size_bytes", "lots")],
            "failed to convert 'lots' to unsigned long long integral number",
        ),
        ([("trt_dla_core", "x1")], "failed to convert 'x1' to integral number"),
        ([("trt_dla_enable", "yes")], "failed to convert 'yes' to boolean"),
        (
            [("workspace", "1")],
            "unknown parameter 'workspace' is provided for TensorRT Execution Accelerator",
        ),
    ],
)
def test_bad_tensorrt_parameters_fail_with_the_references_text(
    params: list[tuple[str, str]], message: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        tensorrt_options(params)


def test_tensorrt_reads_numbers_as_the_references_stoi() -> None:
    # std::stoi reads a leading integer and ignores the rest; FP32 sets nothing
    assert tensorrt_options(
        [("trt_dla_core", " 2x"), ("precision_mode", "FP32"), ("trt_dla_enable", "ON")]
    ) == {
        "trt_dla_core": " 2x",
        "trt_dla_enable": "ON",
    }
