"""The machine's gauges, as the reference exports them: CPU utilization and memory, and its pinned
memory pool (inferd has none: 0 bytes, said honestly rather than left out of dashboards).

CPU utilization is the share of non-idle time in ``/proc/stat`` between two samples; memory is
``MemTotal`` and ``MemTotal - MemAvailable`` from ``/proc/meminfo``. The reference samples them
every ``--metrics-interval-ms`` on a thread; here a scrape samples them when the last sample is
older than that interval, so an idle server does no work for them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

_CPU = ("nv_cpu_utilization", "CPU utilization rate [0.0 - 1.0]")
_MEM_TOTAL = ("nv_cpu_memory_total_bytes", "CPU total memory (RAM), in bytes")
_MEM_USED = ("nv_cpu_memory_used_bytes", "CPU used memory (RAM), in bytes")
_PINNED_TOTAL = ("nv_pinned_memory_pool_total_bytes", "Pinned memory pool total memory size, in bytes")
_PINNED_USED = ("nv_pinned_memory_pool_used_bytes", "Pinned memory pool used memory size, in bytes")


def cpu_times(text: str) -> tuple[int, int]:
    """(busy, total) jiffies of the first line of ``/proc/stat`` (idle and iowait are not busy)."""
    fields = [int(x) for x in text.split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    total = sum(fields[:8])  # guest times are already counted in user and nice
    return total - idle, total


def memory(text: str) -> tuple[int, int]:
    """(total, used) bytes from ``/proc/meminfo``."""
    kib = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in ("MemTotal", "MemAvailable"):
            kib[key] = int(rest.split()[0])
    total = kib.get("MemTotal", 0) * 1024
    return total, total - kib.get("MemAvailable", 0) * 1024


class SystemGauges:
    """The last sample of the machine's gauges, refreshed at most once per interval."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._at = 0.0
        self._cpu: tuple[int, int] | None = None
        self.utilization = 0.0
        self.mem_total = 0
        self.mem_used = 0

    def refresh(self, interval_s: float, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        with self._lock:
            if self._cpu is not None and now - self._at < interval_s:
                return
            try:
                with open("/proc/stat") as f:
                    cpu = cpu_times(f.read())
                with open("/proc/meminfo") as f:
                    self.mem_total, self.mem_used = memory(f.read())
            except OSError:  # not Linux: the gauges stay 0
                return
            if self._cpu is not None and cpu[1] > self._cpu[1]:
                self.utilization = (cpu[0] - self._cpu[0]) / (cpu[1] - self._cpu[1])
            self._cpu, self._at = cpu, now

    def lines(self, interval_s: float, cpu: bool = True, gpu: Sequence[str] = ()) -> list[str]:
        """The five families in the reference's order, as exposition text lines, with ``gpu`` (the
        GPU families' lines, ``metrics/gpu.py``) between the pinned memory pool's and the CPU's, where
        the reference registers them; without ``cpu`` (``--allow-cpu-metrics=false``) no CPU family,
        as the reference."""
        out: list[str] = []

        def gauges(*pairs: tuple[tuple[str, str], float]) -> None:
            for (name, doc), value in pairs:
                out.extend((f"# HELP {name} {doc}", f"# TYPE {name} gauge", f"{name} {value}"))

        gauges((_PINNED_TOTAL, 0), (_PINNED_USED, 0))
        out.extend(gpu)
        if cpu:
            self.refresh(interval_s)
            gauges(
                (_CPU, round(self.utilization, 6)),
                (_MEM_TOTAL, self.mem_total),
                (_MEM_USED, self.mem_used),
            )
        return out


#: the process's one sampler (the machine is the same for every server in it)
SYSTEM = SystemGauges()
