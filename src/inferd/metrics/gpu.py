"""The GPU gauges, as the reference's GPU build exports them: ``nv_gpu_utilization``,
``nv_gpu_memory_total_bytes``, ``nv_gpu_memory_used_bytes``, ``nv_gpu_power_usage``,
``nv_gpu_power_limit`` and the counter ``nv_energy_consumption``, one series per GPU labelled
``gpu_uuid``, for every GPU this process sees (``inferd.gpu.devices.machine_gpus``: after
``CUDA_VISIBLE_DEVICES``, whatever its compute capability, as the reference's CUDA-visible GPUs).

The reference reads them through DCGM on a thread of its own that sleeps half of
``--metrics-interval-ms`` between polls; here NVML (``nvidia-ml-py``) is read the same way, on a
thread of its own, so a scrape only formats the last values and the event loop never waits on the
driver. Units as the reference's: utilization as a ratio (NVML's percent x 0.01), memory in bytes
(NVML gives bytes; DCGM whole MiB), power in watts (NVML milliwatts / 1000), energy in joules counted
from the first poll (NVML's millijoules since the driver loaded, differences x 0.001).

A reading that fails (a GPU that does not report its power, a driver error) is logged once per GPU
and reading, and its series keeps its last value (0 until one was read); the reference sets 0 and
stops asking after three failures. Without a GPU nothing here runs and no ``nv_gpu_*`` family is
written, as the reference's CPU build.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from inferd.gpu.devices import Gpu

log = logging.getLogger("inferd.metrics")

#: (family, help, type) in the reference's order, with its texts
FAMILIES = (
    ("nv_gpu_utilization", "GPU utilization rate [0.0 - 1.0)", "gauge"),
    ("nv_gpu_memory_total_bytes", "GPU total memory, in bytes", "gauge"),
    ("nv_gpu_memory_used_bytes", "GPU used memory, in bytes", "gauge"),
    ("nv_gpu_power_usage", "GPU power usage in watts", "gauge"),
    ("nv_gpu_power_limit", "GPU power management limit in watts", "gauge"),
    ("nv_energy_consumption", "GPU energy consumption in joules since the Triton Server started", "counter"),
)
#: the reference's label (core's kMetricsLabelGpuUuid)
LABEL = "gpu_uuid"


class GpuReader(Protocol):
    """What the poller reads of one GPU, by its NVML index; any reading may raise."""

    def utilization(self, index: int) -> float:
        """Percent of the last sample period a kernel ran (0-100)."""
        ...

    def memory(self, index: int) -> tuple[int, int]:
        """(total, used) bytes."""
        ...

    def power_usage(self, index: int) -> float:
        """Watts drawn now."""
        ...

    def power_limit(self, index: int) -> float:
        """The power management limit in watts."""
        ...

    def energy(self, index: int) -> float:
        """Millijoules used since the driver loaded."""
        ...


class NvmlReader:
    """GpuReader over NVML (``pynvml``, from ``nvidia-ml-py``); handles got once per GPU."""

    def __init__(self) -> None:
        import pynvml

        pynvml.nvmlInit()
        self._nvml: Any = pynvml
        self._handles: dict[int, Any] = {}

    def _handle(self, index: int) -> Any:
        h = self._handles.get(index)
        if h is None:
            h = self._handles[index] = self._nvml.nvmlDeviceGetHandleByIndex(index)
        return h

    def utilization(self, index: int) -> float:
        return float(self._nvml.nvmlDeviceGetUtilizationRates(self._handle(index)).gpu)

    def memory(self, index: int) -> tuple[int, int]:
        info = self._nvml.nvmlDeviceGetMemoryInfo(self._handle(index))
        return int(info.total), int(info.used)

    def power_usage(self, index: int) -> float:
        return float(self._nvml.nvmlDeviceGetPowerUsage(self._handle(index))) / 1000

    def power_limit(self, index: int) -> float:
        return float(self._nvml.nvmlDeviceGetPowerManagementLimit(self._handle(index))) / 1000

    def energy(self, index: int) -> float:
        return float(self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle(index)))


@dataclass
class GpuValues:
    """One GPU's last values (what /metrics and the status page show)."""

    utilization: float = 0.0
    memory_total: int = 0
    memory_used: int = 0
    power_usage: float = 0.0
    power_limit: float = 0.0
    #: joules since the first poll (the counter)
    energy: float = 0.0
    #: NVML's millijoules at the last poll (None: not read yet)
    energy_mark: float | None = None
    #: whether anything was ever read
    read: bool = False


def _number(v: float) -> str:
    return str(v) if isinstance(v, int) else repr(round(v, 6))


class GpuMetrics:
    """The GPU families of one server: ``poll()`` reads every GPU (on the poll thread ``start()``
    runs, every ``interval_s / 2``), ``lines()`` writes the last values."""

    def __init__(self, gpus: Sequence[Gpu], reader: GpuReader | None, interval_s: float) -> None:
        self.gpus = tuple(gpus)
        self.reader = reader
        self.interval_s = interval_s
        self._values = {g.uuid: GpuValues(memory_total=g.memory_total_bytes) for g in self.gpus}
        self._lock = threading.Lock()
        self._failed: set[tuple[str, str]] = set()  # (uuid, reading) already logged
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- polling -----------------------------------------------------------------------------
    def _read(self, gpu: Gpu, what: str, fn: Callable[[int], Any]) -> Any:
        try:
            return fn(gpu.nvml_index)
        except Exception as e:  # NVMLError above all; the poll goes on whatever a reading raises
            if (gpu.uuid, what) not in self._failed:
                self._failed.add((gpu.uuid, what))
                log.warning(
                    "GPU metrics: unable to get the %s of GPU %d (%s): %s; its value stays %s",
                    what,
                    gpu.id,
                    gpu.uuid,
                    e,
                    "the last one read" if self._values[gpu.uuid].read else "0",
                )
            return None

    def poll(self) -> None:
        """One round: every reading of every GPU (what fails keeps its last value)."""
        r = self.reader
        if r is None:
            return
        for gpu in self.gpus:
            util = self._read(gpu, "utilization", r.utilization)
            mem = self._read(gpu, "memory usage", r.memory)
            usage = self._read(gpu, "power usage", r.power_usage)
            limit = self._read(gpu, "power limit", r.power_limit)
            energy = self._read(gpu, "energy consumption", r.energy)
            with self._lock:
                v = self._values[gpu.uuid]
                if util is not None:
                    v.utilization = float(util) * 0.01
                if mem is not None:
                    v.memory_total, v.memory_used = int(mem[0]), int(mem[1])
                if usage is not None:
                    v.power_usage = float(usage)
                if limit is not None:
                    v.power_limit = float(limit)
                if energy is not None:
                    mark = float(energy)
                    if v.energy_mark is not None and mark >= v.energy_mark:  # a counter never goes down
                        v.energy += (mark - v.energy_mark) * 0.001
                    v.energy_mark = mark
                v.read = v.read or any(x is not None for x in (util, mem, usage, limit, energy))

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll()
            except Exception:  # a bug in a reader must not end the polling
                log.exception("GPU metrics: a poll failed")
            self._stop.wait(self.interval_s / 2)

    def start(self) -> None:
        """Poll now and then every ``interval_s / 2`` on a daemon thread, until ``stop()``."""
        if self._thread is not None or not self.gpus or self.reader is None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="inferd-gpu-metrics", daemon=True)
        self._thread.start()
        for gpu in self.gpus:
            log.info("Collecting metrics for GPU %d: %s", gpu.id, gpu.name)

    def stop(self) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=2.0)

    @property
    def polling(self) -> bool:
        return self._thread is not None

    # -- reading -----------------------------------------------------------------------------
    def values(self) -> list[tuple[Gpu, GpuValues]]:
        """A copy of every GPU's last values, in CUDA order."""
        with self._lock:
            return [(g, GpuValues(**vars(self._values[g.uuid]))) for g in self.gpus]

    def lines(self) -> list[str]:
        """The six families as exposition text lines (none without a GPU)."""
        rows = self.values()
        if not rows:
            return []
        out: list[str] = []
        for name, doc, kind in FAMILIES:
            out += [f"# HELP {name} {doc}", f"# TYPE {name} {kind}"]
            for gpu, v in rows:
                value: float = {
                    "nv_gpu_utilization": v.utilization,
                    "nv_gpu_memory_total_bytes": v.memory_total,
                    "nv_gpu_memory_used_bytes": v.memory_used,
                    "nv_gpu_power_usage": v.power_usage,
                    "nv_gpu_power_limit": v.power_limit,
                    "nv_energy_consumption": v.energy,
                }[name]
                out.append(f'{name}{{{LABEL}="{gpu.uuid}"}} {_number(value)}')
        return out

    def status(self) -> list[dict[str, Any]]:
        """The status page's GPUs: what each is, and its last values while they are polled."""
        out: list[dict[str, Any]] = []
        for gpu, v in self.values():
            row: dict[str, Any] = {
                "id": gpu.id,
                "uuid": gpu.uuid,
                "name": gpu.name,
                "compute_capability": f"{gpu.compute_capability[0]}.{gpu.compute_capability[1]}",
                "memory_total_bytes": v.memory_total,
            }
            if self.polling and v.read:
                row.update(
                    utilization=round(v.utilization, 4),
                    memory_used_bytes=v.memory_used,
                    power_usage_w=round(v.power_usage, 1),
                    power_limit_w=round(v.power_limit, 1),
                    energy_j=round(v.energy, 1),
                )
            out.append(row)
        return out


def for_server(gpus: Sequence[Gpu], interval_ms: int, poll: bool) -> GpuMetrics | None:
    """A server's GPU metrics: None without a GPU; polling through NVML (started) when ``poll``
    (``--allow-metrics`` and ``--allow-gpu-metrics``) and NVML opens, else what each GPU is only."""
    if not gpus:
        return None
    reader: GpuReader | None = None
    if poll:
        try:
            reader = NvmlReader()
        except Exception as e:  # found through NVML a moment ago: a driver gone since, say
            log.warning("GPU metrics will not be available: %s", e)
    metrics = GpuMetrics(gpus, reader, interval_ms / 1000)
    metrics.start()
    return metrics
