"""What the live status page shows (``GET /v2/status``, drawn by ``frontends/http/status.html``).

Per model version: its state and reason, instances, requests served and failed, the request rate
over the last ``RATE_WINDOW_S`` seconds, p50 and p99 of request latency and of queue time over the
last ``WINDOW_S`` seconds (from each version's ring of its last ``stats.RECENT`` requests: at very
high rates the window is those requests, which the answer says), and the requests pending now.
Where the server finds GPUs, each one (``metrics/gpu.py``: what it is, and its utilization, memory
and power while the GPU metrics are polled). Read from the statistics the server keeps anyway;
nothing is counted for the page alone but the ring.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from inferd.backends.base import instance_devices
from inferd.engine.model import Model

WINDOW_S = 60.0
RATE_WINDOW_S = 10.0


def _quantiles(values: list[int]) -> tuple[float | None, float | None]:
    """p50 and p99 in milliseconds (None without samples)."""
    if not values:
        return None, None
    p50, p99 = np.percentile(np.asarray(values, dtype=np.float64), [50, 99])
    return round(float(p50) / 1e6, 3), round(float(p99) / 1e6, 3)


def status(
    index: list[dict[str, Any]],
    models_by_name: Mapping[str, Mapping[int, Model]],
    server: dict[str, Any],
    gpus: list[dict[str, Any]] | None,
) -> dict[str, Any]:
    """The page's data: ``server`` (id, version, live, ready) and every model version of the
    repository ``index`` (``models_by_name``: the versions listed, engine/lifecycle.py), with
    ``gpus`` where the server finds some."""
    now = time.monotonic_ns()
    since = now - int(WINDOW_S * 1e9)
    rate_since = now - int(RATE_WINDOW_S * 1e9)
    models: list[dict[str, Any]] = []
    for entry in index:
        name, version = entry["name"], entry.get("version", "")
        row: dict[str, Any] = {
            "name": name,
            "version": version,
            "state": entry.get("state", "UNLOADED"),
            "reason": entry.get("reason", ""),
        }
        model = models_by_name.get(name, {}).get(int(version)) if version else None
        if model is not None:
            stats = model.stats
            with stats._lock:  # a consistent copy, taken quickly
                recent = list(stats.recent_requests)
                queue = list(stats.recent_queue)
                served, failed = stats.success.count, stats.fail.count
            window = [d for t, d, _ok in recent if t >= since]
            sched = model.scheduler
            stats_fn = getattr(sched, "stats", None) if sched is not None else None
            pending = stats_fn()["queued"] if stats_fn is not None else (sched.inflight() if sched else 0)
            p50, p99 = _quantiles(window)
            q50, q99 = _quantiles([q for t, q in queue if t >= since])
            row.update(
                instances=sum(g.count * len(instance_devices(g)) for g in model.config.instance_group) or 1,
                served=served,
                failed=failed,
                errors_in_window=sum(1 for t, _d, ok in recent if t >= since and not ok),
                rate=round(sum(1 for t, _d, _ok in recent if t >= rate_since) / RATE_WINDOW_S, 2),
                latency_p50_ms=p50,
                latency_p99_ms=p99,
                queue_p50_ms=q50,
                queue_p99_ms=q99,
                pending=pending,
                window_requests=len(window),
                window_truncated=len(recent) == recent_len(stats) and bool(recent) and recent[0][0] > since,
            )
        models.append(row)
    doc: dict[str, Any] = {
        "server": server,
        "window_s": WINDOW_S,
        "rate_window_s": RATE_WINDOW_S,
        "models": models,
    }
    if gpus is not None:  # only where GPUs are found: elsewhere the answer is as before
        doc["gpus"] = gpus
    return doc


def recent_len(stats: Any) -> int:
    """How many requests a version's ring holds at most."""
    return int(stats.recent_requests.maxlen or 0)
