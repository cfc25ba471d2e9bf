"""The first-response latency histogram (``--metrics-config histogram_latencies=true``).

As the reference's (2.52 and later): one histogram per model version, observed once per request
when its first response is sent (a decoupled model's first of many, an ensemble's own and each of
its steps'), in whole milliseconds since the request arrived, truncated as the reference's
integer division truncates. Buckets default to 100, 500, 2,000 and 5,000 ms; a model overrides
them with ``model_metrics { metric_control [ { metric_identifier { family:
"nv_inference_first_response_histogram_ms" } histogram_options { buckets: [...] } } ] }``.
"""

from __future__ import annotations

import bisect
import logging
import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from inferd.repository.config.schema import ModelConfig

log = logging.getLogger("inferd.metrics")

FAMILY = "nv_inference_first_response_histogram_ms"
HELP = "Duration from request to first response in milliseconds"
DEFAULT_BUCKETS = (100.0, 500.0, 2000.0, 5000.0)


class Histogram:
    """Bucket counts (not cumulative; the last is +Inf) and a sum."""

    __slots__ = ("_lock", "bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0
        self._lock = threading.Lock()

    def observe(self, value: float) -> None:
        i = bisect.bisect_left(self.bounds, value)  # a bucket's bound is inclusive (le)
        with self._lock:
            self.counts[i] += 1
            self.sum += value

    def observe_since(self, t_start_ns: int) -> None:
        """One request's first response, now: whole milliseconds since ``t_start_ns``."""
        self.observe(float((time.monotonic_ns() - t_start_ns) // 1_000_000))

    def snapshot(self) -> tuple[int, float, list[int]]:
        """(count, sum, bucket counts), read together."""
        with self._lock:
            counts = list(self.counts)
            return sum(counts), self.sum, counts


def first_response_histogram(config: ModelConfig, enabled: bool) -> Histogram | None:
    """A model version's histogram when ``enabled`` (the process's metrics configuration), with
    the buckets its ``model_metrics`` sets (validated at load: non-empty); other families there
    are logged as the reference logs them and ignored."""
    bounds: tuple[float, ...] = DEFAULT_BUCKETS
    for control in config.model_metrics.metric_control:
        family = control.metric_identifier.family
        if family == FAMILY:
            bounds = tuple(sorted({float(b) for b in control.histogram_options.buckets}))
        else:
            log.warning(
                "Metric family '%s' in 'metric_identifier' is not a customizable metric in Triton core.",
                family,
            )
    return Histogram(bounds) if enabled else None
