"""The server's CPU per request: its process tree's CPU time over the successes its statistics count.

The figure that carries over to a deployment where the client does not share the server's cores
(issue 26), and the steadier one on a shared machine: perf_analyzer's own CPU is not in it. Read
around one perf_analyzer run (warm-up and every trial included, on both sides of the division):

    meter = CpuMeter(pid, http_port, "add_sub")
    ...                                     # the load
    us = meter.us_per_success()             # None when nothing succeeded or the server is gone

The successes are ``inference_stats.success.count`` of every version of the model, from the
statistics extension (``GET /v2/models/<model>/stats``), which inferd and the reference both answer.

``ExecuteMeter`` reads the same statistics for how busy the model's instances were: the executes'
``compute_infer`` (summed over ``batch_stats``, one entry per execute) over the wall time between
two reads, and the mean batch size (inferences over executions). With one instance, busy 1.0 means
back-to-back executes (issue 48's goal for batched_sleep c32: >= 0.9). The window spans
perf_analyzer's start and its trials, so it reads a little low.
Python 3.11 stdlib only.
"""

from __future__ import annotations

import json
import os
import time
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


def _model_stats(http_port: int, model: str, timeout: float) -> list[dict] | None:
    url = f"http://127.0.0.1:{http_port}/v2/models/{model}/stats"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            doc = json.loads(r.read())
    except (OSError, ValueError):
        return None
    return list(doc.get("model_stats", []))


def successes(http_port: int, model: str, timeout: float = 10.0) -> int | None:
    """The model's successful inference count over all its versions; None when not answered."""
    stats = _model_stats(http_port, model, timeout)
    if stats is None:
        return None
    return sum(int(s["inference_stats"]["success"]["count"]) for s in stats)


def executes(http_port: int, model: str, timeout: float = 10.0) -> tuple[float, int, int, int] | None:
    """(now in seconds, the executes' compute_infer ns, executions, inferences) over all the model's
    versions; None when not answered."""
    stats = _model_stats(http_port, model, timeout)
    if stats is None:
        return None
    infer_ns = sum(int(b["compute_infer"]["ns"]) for s in stats for b in s.get("batch_stats", []))
    runs = sum(int(s.get("execution_count", 0)) for s in stats)
    items = sum(int(s.get("inference_count", 0)) for s in stats)
    return time.monotonic(), infer_ns, runs, items


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


#: models whose rows also get the instance's busy share and mean batch size (ExecuteMeter)
BATCHING_MODELS = ("batched_sleep",)


class ExecuteMeter:
    """The model's execute statistics at construction; ``busy()`` and ``mean_batch()`` over the
    window since (see the module docstring). Both None when a read failed or nothing executed."""

    def __init__(self, http_port: int, model: str) -> None:
        self.http_port, self.model = http_port, model
        self.start = executes(http_port, model)
        self.end: tuple[float, int, int, int] | None = None

    def stop(self) -> None:
        self.end = executes(self.http_port, self.model)

    def _deltas(self) -> tuple[float, int, int, int] | None:
        if self.start is None or self.end is None or self.end[2] <= self.start[2]:
            return None
        (t0, ns0, runs0, items0), (t1, ns1, runs1, items1) = self.start, self.end
        return t1 - t0, ns1 - ns0, runs1 - runs0, items1 - items0

    def busy(self) -> float | None:
        d = self._deltas()
        return d[1] / (d[0] * 1e9) if d is not None and d[0] > 0 else None

    def mean_batch(self) -> float | None:
        d = self._deltas()
        return d[3] / d[2] if d is not None else None
