"""The scaling signal (beyond the reference): average queue time per request over the last 30 s.

Triton's Helm chart gets this from prometheus-adapter, as
``delta(nv_inference_queue_duration_us[30s]) / (1 + delta(nv_inference_request_success[30s]))``;
inferd exports it ready-made as ``inferd_queue_time_per_request_us{model,version}``, so a
HorizontalPodAutoscaler needs only a pass-through adapter rule (docs/how-to/kubernetes.md, "The HPA on queue time").
Each scrape remembers (time, queue microseconds, requests) in the version's ModelStats and answers
over the oldest sample still within ``WINDOW_S``; before a second scrape, over the version's life.
"""

from __future__ import annotations

import threading
import time

from inferd.core.stats import ModelStats

WINDOW_S = 30.0
FAMILY = ("inferd_queue_time_per_request_us", "Average queue time per request over the last 30 s, in microseconds (a scaling signal)")  # fmt: skip

_lock = threading.Lock()


def queue_time_per_request(stats: ModelStats, now: float | None = None) -> float:
    """Microseconds of queue time per request over the window (0 without requests)."""
    now = time.monotonic() if now is None else now
    with stats._lock:
        queue_us, requests = stats.queue.ns / 1000, stats.queue.count
    with _lock:
        samples = stats.scrapes
        samples.append((now, queue_us, requests))
        while len(samples) > 1 and now - samples[1][0] >= WINDOW_S:
            samples.popleft()  # keep one sample at least WINDOW_S old, when there is one
        q0, n0 = (samples[0][1], samples[0][2]) if len(samples) > 1 else (0.0, 0)
    return float((queue_us - q0) / (1 + requests - n0))
