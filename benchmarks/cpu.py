"""The server's CPU per request: its process tree's CPU time over the successes its statistics count.

The figure that carries over to a deployment where the client does not share the server's cores
(issue 26), and the steadier one on a shared machine: perf_analyzer's own CPU is not in it. Read
around one perf_analyzer run (warm-up and every trial included, on both sides of the division):

    meter = CpuMeter(pid, http_port, "add_sub")
    ...                                     # the load
    us = meter.us_per_success()             # None when nothing succeeded or the server is gone

The successes are ``inference_stats.success.count`` of every version of the model, from the
statistics extension (``GET /v2/models/<model>/stats``), which inferd and the reference both answer.
Python 3.11 stdlib only.
"""

from __future__ import annotations

import json
import os
import urllib.request
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")


def _stats() -> dict[int, list[str]]:
    """Each process's /proc/<pid>/stat fields after its name (the ones a process gone meanwhile left out)."""
    out: dict[int, list[str]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                out[int(entry.name)] = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
    return out


def _tree(pid: int, parents: dict[int, int]) -> set[int]:
    tree, todo = set(), [pid]
    while todo:
        p = todo.pop()
        tree.add(p)
        todo += [c for c, parent in parents.items() if parent == p and c not in tree]
    return tree


def process_tree(pid: int) -> set[int]:
    """``pid`` and its descendants (worker processes, the reference's Python-backend stubs)."""
    return _tree(pid, {p: int(f[1]) for p, f in _stats().items()})


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` and its descendants, from /proc."""
    stats = _stats()
    tree = _tree(pid, {p: int(f[1]) for p, f in stats.items()})
    return sum((int(stats[p][11]) + int(stats[p][12])) / _TICK for p in tree if p in stats)


def successes(http_port: int, model: str, timeout: float = 10.0) -> int | None:
    """The model's successful inference count over all its versions; None when not answered."""
    url = f"http://127.0.0.1:{http_port}/v2/models/{model}/stats"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            doc = json.loads(r.read())
    except (OSError, ValueError):
        return None
    return sum(int(s["inference_stats"]["success"]["count"]) for s in doc.get("model_stats", []))


class CpuMeter:
    """CPU seconds and successes at construction; ``us_per_success()`` the difference's ratio."""

    def __init__(self, pid: int | None, http_port: int, model: str) -> None:
        self.pid, self.http_port, self.model = pid, http_port, model
        self.cpu0 = cpu_seconds(pid) if pid is not None else None
        self.n0 = successes(http_port, model) if pid is not None else None

    def us_per_success(self) -> float | None:
        if self.pid is None or self.cpu0 is None or self.n0 is None:
            return None
        cpu, n = cpu_seconds(self.pid), successes(self.http_port, self.model)
        if n is None or n <= self.n0:
            return None
        return (cpu - self.cpu0) / (n - self.n0) * 1e6
