"""The GPUs this server may use: the one place that finds them.

NVIDIA's management library (NVML, through ``nvidia-ml-py``: ``pip install 'inferd[gpu]'``) lists
the machine's GPUs without creating a CUDA context (a server that finds a GPU and places nothing on
it holds no GPU memory). ``CUDA_VISIBLE_DEVICES`` is read as the CUDA runtime reads it, so the ids
here are the CUDA ordinals that torch, CuPy and ONNX Runtime use in this process: a comma-separated
list of indices or UUIDs (``GPU-8f6c...``, a unique prefix is enough); the list ends at the first
entry that names no GPU or names one again; an empty value hides every GPU. Unset, every GPU is
visible in NVML's order (PCI bus order, as ``CUDA_DEVICE_ORDER=PCI_BUS_ID``).

A GPU below ``--min-supported-compute-capability`` (the reference's default 6.0) is not used, as
the reference does not. Without NVML, its driver library or any GPU the list is empty and nothing
else changes: every answer of a server without GPUs stays what it is.
"""

from __future__ import annotations

import functools
import logging
import os
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("inferd.gpu")

#: the reference's ``--min-supported-compute-capability`` default
MIN_COMPUTE_CAPABILITY = 6.0


@dataclass(frozen=True)
class Gpu:
    """One GPU this process can use."""

    #: the CUDA ordinal in this process (after ``CUDA_VISIBLE_DEVICES``): what ``gpus: [ ... ]`` in
    #: an instance group and ``cuda:<id>`` name
    id: int
    #: NVML's index of the GPU on the machine (what NVML's handles are got by)
    nvml_index: int
    uuid: str
    name: str
    memory_total_bytes: int
    compute_capability: tuple[int, int]


def select_visible(uuids: list[str], env: str | None) -> list[int]:
    """The machine's GPU indices (``uuids[i]`` is GPU i's) that ``CUDA_VISIBLE_DEVICES=env`` makes
    visible, in the order it names them; ``env`` None: all of them."""
    if env is None:
        return list(range(len(uuids)))
    chosen: list[int] = []
    for raw in env.split(","):
        entry = raw.strip()
        index: int | None = None
        if entry.lstrip("+-").isdigit():
            n = int(entry)
            index = n if 0 <= n < len(uuids) else None
        elif entry.startswith("GPU-"):
            matches = [i for i, u in enumerate(uuids) if u.startswith(entry)]
            index = matches[0] if len(matches) == 1 else None
        if index is None or index in chosen:  # CUDA stops at the first entry it cannot use
            break
        chosen.append(index)
    return chosen


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _nvml() -> Any:
    """pynvml, initialised; None without it or without a driver."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:  # no driver library (a machine without an NVIDIA GPU), no device
        log.debug("NVML is not available: %s", e)
        return None
    return pynvml


@functools.cache
def machine_gpus() -> tuple[Gpu, ...]:
    """Every visible GPU, whatever its compute capability (looked up once per process)."""
    nvml = _nvml()
    if nvml is None:
        return ()
    try:
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        uuids = [_text(nvml.nvmlDeviceGetUUID(h)) for h in handles]
        found = []
        for cuda_id, index in enumerate(select_visible(uuids, os.environ.get("CUDA_VISIBLE_DEVICES"))):
            h = handles[index]
            major, minor = nvml.nvmlDeviceGetCudaComputeCapability(h)
            found.append(
                Gpu(
                    id=cuda_id,
                    nvml_index=index,
                    uuid=uuids[index],
                    name=_text(nvml.nvmlDeviceGetName(h)),
                    memory_total_bytes=int(nvml.nvmlDeviceGetMemoryInfo(h).total),
                    compute_capability=(int(major), int(minor)),
                )
            )
        return tuple(found)
    except nvml.NVMLError as e:
        log.warning("could not list the GPUs through NVML: %s", e)
        return ()


def usable_gpus(min_compute_capability: float = MIN_COMPUTE_CAPABILITY) -> tuple[Gpu, ...]:
    """The visible GPUs at or above ``min_compute_capability``: the ones models are placed on."""
    return tuple(
        g
        for g in machine_gpus()
        if float(f"{g.compute_capability[0]}.{g.compute_capability[1]}") >= min_compute_capability
    )


@dataclass(frozen=True)
class SupportedGpus:
    """The GPUs model instances may be placed on, as the reference's model configuration checks see
    them (its ``supported_gpus``), with the minimum compute capability that chose them (its messages
    print it). Built once per server (:func:`supported_gpus`); the config checks take it as an
    argument, so a test hands them any list."""

    gpus: tuple[Gpu, ...] = ()
    min_compute_capability: float = MIN_COMPUTE_CAPABILITY

    @property
    def ids(self) -> tuple[int, ...]:
        """The GPUs' CUDA ids in ascending order (the reference's ``std::set<int>``)."""
        return tuple(sorted({g.id for g in self.gpus}))


#: a machine without a usable GPU (the config checks' default)
NO_GPUS = SupportedGpus()


def supported_gpus(min_compute_capability: float = MIN_COMPUTE_CAPABILITY) -> SupportedGpus:
    """The usable GPUs (:func:`usable_gpus`) as the config checks take them."""
    return SupportedGpus(usable_gpus(min_compute_capability), min_compute_capability)


def gpus_for_models(min_compute_capability: float = MIN_COMPUTE_CAPABILITY) -> SupportedGpus:
    """:func:`supported_gpus`, each GPU found logged with whether model instances may use it (a
    server's start; nothing is logged without a GPU)."""
    gpus = supported_gpus(min_compute_capability)
    for g in machine_gpus():
        cc = f"{g.compute_capability[0]}.{g.compute_capability[1]}"
        if g in gpus.gpus:
            log.info("GPU %d: %s (%s, compute capability %s) for model instances", g.id, g.name, g.uuid, cc)
        else:
            log.warning(
                "GPU %d: %s has compute capability %s, below --min-supported-compute-capability %s: not used",
                g.id,
                g.name,
                cc,
                min_compute_capability,
            )
    return gpus
