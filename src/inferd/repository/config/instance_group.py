"""``instance_group``: Triton core's ``NormalizeInstanceGroup`` and ``ValidateInstanceGroup``
(model_config_utils.cc), against the GPUs the server may use.

The GPUs come in as an argument (:class:`~inferd.gpu.devices.SupportedGpus`: the server passes those
NVML finds at or above ``--min-supported-compute-capability``; the default is none, a machine without
GPUs), so these rules run the same with any list a test hands them:

- a group without a name is ``<model>_<index>``; no group at all is one named after the model;
- ``KIND_AUTO`` is ``KIND_GPU`` where there are GPUs and every GPU the group lists is one of them,
  else ``KIND_CPU``; ``auto_gpu=False`` (a backend that cannot place an instance on a GPU in this
  process: inferd's fil and openvino backends, an onnxruntime without CUDA) keeps it ``KIND_CPU``,
  where the reference would place it on a GPU and fail there;
- ``count`` 0 is 1, or 2 for a ``KIND_CPU`` group of onnxruntime or tensorflow;
- a ``KIND_GPU`` group that lists no GPUs gets every GPU (``/config`` shows them);
- validation: a ``KIND_GPU`` group needs GPUs and may list only those; ``KIND_CPU`` and
  ``KIND_MODEL`` groups list none; ``profile`` is for TensorRT plans.

The backends' preferred groups of the reference come to the same here: the Python backend's
(``KIND_GPU``, nothing else set) is what ``KIND_AUTO`` gives, and the OpenVINO backend's
(``KIND_CPU``) is what ``auto_gpu=False`` gives.
"""

from __future__ import annotations

import re

from inferd.errors import InvalidArgumentError
from inferd.gpu.devices import NO_GPUS, SupportedGpus
from inferd.repository.config.schema import (
    ONNXRUNTIME_BACKEND,
    TENSORFLOW_BACKEND,
    TENSORRT_PLATFORM,
    ModelConfig,
    ModelInstanceGroup,
)

_DEFAULT_CPU_INSTANCE_COUNT = 2
_LEADING_INT = re.compile(r"\s*[+-]?\d+")


def normalize_instance_groups(
    cfg: ModelConfig, gpus: SupportedGpus = NO_GPUS, *, auto_gpu: bool = True
) -> None:
    """``NormalizeInstanceGroup`` (mutates ``cfg``; idempotent). ``auto_gpu``: whether ``KIND_AUTO``
    may become ``KIND_GPU`` (the model's backend can run on these GPUs)."""
    supported = set(gpus.ids)
    if len(cfg.instance_group) == 0:
        group = cfg.instance_group.add()
        group.name = cfg.name  # a default group is named after the model, without a suffix
    for index, group in enumerate(cfg.instance_group):
        if not group.name:
            group.name = f"{cfg.name}_{index}"
        if group.kind == ModelInstanceGroup.KIND_AUTO:
            on_gpu = auto_gpu and bool(supported) and all(g in supported for g in group.gpus)
            group.kind = ModelInstanceGroup.KIND_GPU if on_gpu else ModelInstanceGroup.KIND_CPU
        if group.count < 1:
            group.count = 1
            if group.kind == ModelInstanceGroup.KIND_CPU and cfg.backend in (
                TENSORFLOW_BACKEND,
                ONNXRUNTIME_BACKEND,
            ):
                group.count = _DEFAULT_CPU_INSTANCE_COUNT
        if group.kind == ModelInstanceGroup.KIND_GPU and len(group.gpus) == 0:
            group.gpus.extend(gpus.ids)


def validate_instance_group(cfg: ModelConfig, index: int, gpus: SupportedGpus = NO_GPUS) -> None:
    """``ValidateInstanceGroup`` for group ``index``, with the reference's messages; KIND_AUTO is
    left to normalisation."""
    group = cfg.instance_group[index]
    prefix = f"instance group {group.name} of model {cfg.name}"
    if group.kind == ModelInstanceGroup.KIND_MODEL:
        if len(group.gpus) > 0:
            raise InvalidArgumentError(f"{prefix} has kind KIND_MODEL but specifies one or more GPUs")
    elif group.kind == ModelInstanceGroup.KIND_GPU:
        if len(group.gpus) == 0:
            if not gpus.ids:
                raise InvalidArgumentError(f"{prefix} has kind KIND_GPU but no GPUs are available")
            raise InvalidArgumentError(f"{prefix} has kind KIND_GPU but specifies no GPUs")
        for gid in group.gpus:
            if gid not in gpus.ids:
                # the minimum as C++'s std::to_string prints a double: 6.000000
                raise InvalidArgumentError(
                    f"{prefix} specifies invalid or unsupported gpu id {gid}. GPUs with at least the minimum "
                    f"required CUDA compute compatibility of {gpus.min_compute_capability:f} are: "
                    + ", ".join(str(i) for i in gpus.ids)
                )
    elif group.kind == ModelInstanceGroup.KIND_CPU and len(group.gpus) > 0:
        raise InvalidArgumentError(f"{prefix} has kind KIND_CPU but specifies one or more GPUs")
    if len(group.profile) > 0:
        if cfg.platform != TENSORRT_PLATFORM:
            # (sic) no space before "specifies" in Triton's message
            raise InvalidArgumentError(
                f"{prefix} and platform {cfg.platform}specifies profile field which is only "
                "supported for TensorRT models"
            )
        for profile in group.profile:
            if not profile:
                raise InvalidArgumentError("profile name must not be empty")
            leading = _LEADING_INT.match(profile)  # std::stoi parses a leading integer
            if leading is None:
                raise InvalidArgumentError(f"unable to parse '{profile}': stoi")
            if int(leading.group()) < 0:
                raise InvalidArgumentError(
                    f"{prefix} and platform {cfg.platform} specifies invalid profile {profile}. The "
                    "field should contain the string representation of a non-negative integer."
                )
