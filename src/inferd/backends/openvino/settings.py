"""OpenVINO compile properties from the config: threads shared among the instances, and pass-through keys.

Pure (no openvino import). Triton's openvino backend passes config ``parameters`` named after
OpenVINO properties to ``compile_model``; inferd does the same for the keys below, and gives each
instance ``cores / instances`` inference threads unless ``INFERENCE_NUM_THREADS`` says otherwise,
one stream per compiled model (an instance is one stream of requests), and f32 precision.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from inferd.errors import InvalidArgumentError

if TYPE_CHECKING:
    from inferd.repository.config.schema import ModelConfig

#: config parameters handed to ``Core.compile_model`` as they are
PASSED_PROPERTIES = frozenset(
    {
        "INFERENCE_NUM_THREADS",
        "NUM_STREAMS",
        "PERFORMANCE_HINT",
        "INFERENCE_PRECISION_HINT",
        "ENABLE_CPU_PINNING",
        "ENABLE_HYPER_THREADING",
        "SCHEDULING_CORE_TYPE",
        "EXECUTION_MODE_HINT",
    }
)


def default_threads(instances: int, cores: int | None = None) -> int:
    """Each instance's share of the machine's cores (at least one)."""
    return max(1, (cores or os.cpu_count() or 1) // max(1, instances))


def compile_properties(config: ModelConfig, instances: int) -> dict[str, str]:
    """The properties each instance's ``compile_model`` gets."""
    props = {
        "INFERENCE_NUM_THREADS": str(default_threads(instances)),
        "NUM_STREAMS": "1",
        # OpenVINO computes in bf16 on CPUs with AMX or AVX512-BF16 unless told otherwise: inferd keeps the
        # model's own precision, so answers match the other backends (``INFERENCE_PRECISION_HINT: bf16``
        # in parameters trades that for speed)
        "INFERENCE_PRECISION_HINT": "f32",
    }
    for key, param in config.parameters.items():
        if key.upper() not in PASSED_PROPERTIES:
            continue
        value = param.string_value.strip()
        if key.upper() == "INFERENCE_NUM_THREADS" and not (value.isdigit() and int(value) > 0):
            raise InvalidArgumentError(
                f"unable to load model '{config.name}': parameter INFERENCE_NUM_THREADS is '{value}', "
                "which is not a positive number of threads"
            )
        props[key.upper()] = value
    return props
