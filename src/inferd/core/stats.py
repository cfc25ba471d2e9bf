"""Per-model counters and durations (ns), read by the statistics extension and metrics."""

from __future__ import annotations

import collections
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from inferd.core.histogram import Histogram
from inferd.core.summary import MetricsConfig, new_summaries

#: requests the status page's window remembers per model version (engine/status.py)
RECENT = 4096


@dataclass(slots=True)
class Duration:
    """A count and a cumulative duration in nanoseconds."""

    count: int = 0
    ns: int = 0

    def add(self, ns: int, n: int = 1) -> None:
        self.count += n
        self.ns += ns * n

    def to_json(self) -> dict[str, int]:
        return {"count": self.count, "ns": self.ns}


@dataclass(slots=True)
class BatchStats:
    """Durations of the executions of one batch size."""

    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)


class ModelStats:
    """Triton's statistics of one model version. Updated from worker threads and the loop."""

    __slots__ = (
        "_lock",
        "batch",
        "cache_hit",
        "cache_miss",
        "compute_infer",
        "compute_input",
        "compute_output",
        "execution_count",
        "fail",
        "fail_reasons",
        "first_response",
        "inference_count",
        "last_inference_ms",
        "queue",
        "recent_queue",
        "recent_requests",
        "scrapes",
        "success",
        "summaries",
    )

    def __init__(self, cached: bool = False, metrics: MetricsConfig = MetricsConfig()) -> None:
        """``cached``: the model enables the response cache (its latency summaries differ);
        ``metrics``: the server's ``--metrics-config`` (whether it keeps latency summaries)."""
        self._lock = threading.Lock()
        self.success = Duration()
        self.fail = Duration()
        self.queue = Duration()
        self.compute_input = Duration()
        self.compute_infer = Duration()
        self.compute_output = Duration()
        self.cache_hit = Duration()
        self.cache_miss = Duration()
        self.inference_count = 0
        self.execution_count = 0
        self.last_inference_ms = 0
        self.batch: dict[int, BatchStats] = {}
        self.fail_reasons: dict[str, int] = {"OTHER": 0, "REJECTED": 0, "CANCELED": 0, "BACKEND": 0}
        #: latency quantiles for /metrics, when --metrics-config asks for them (core/summary.py)
        self.summaries = new_summaries(metrics, cached)
        #: the first-response histogram (core/histogram.py), set by the model from its config
        self.first_response: Histogram | None = None
        #: the last requests' (end, duration, ok) and queue times (end, ns) for the status page
        self.recent_requests: collections.deque[tuple[int, int, bool]] = collections.deque(maxlen=RECENT)
        self.recent_queue: collections.deque[tuple[int, int]] = collections.deque(maxlen=RECENT)
        #: what metrics/scaling.py remembers of recent scrapes: (seconds, queue us, requests)
        self.scrapes: collections.deque[tuple[float, float, int]] = collections.deque()

    def record_execution(
        self,
        batch_size: int,
        n_requests: int,
        queue_ns: list[int],
        input_ns: int,
        infer_ns: int,
        output_ns: int,
        request_ns: list[int] | None = None,
    ) -> None:
        """One model execution of ``n_requests`` requests with ``batch_size`` items in all;
        ``request_ns``: the whole durations of the requests it answered, each a success
        (``record_request``'s, under the same lock: the pool records a batch in one call)."""
        with self._lock:
            self.execution_count += 1
            self.inference_count += batch_size
            now = time.monotonic_ns()
            queue, recent = self.queue, self.recent_queue
            for q in queue_ns:
                queue.count += 1
                queue.ns += q
                recent.append((now, q))
            if request_ns is not None:
                success, requests = self.success, self.recent_requests
                for d in request_ns:
                    requests.append((now, d, True))
                    success.count += 1
                    success.ns += d
            # (Duration.add written out: six calls a batch were a tenth of what statistics cost)
            c = self.compute_input
            c.count += n_requests
            c.ns += input_ns * n_requests
            c = self.compute_infer
            c.count += n_requests
            c.ns += infer_ns * n_requests
            c = self.compute_output
            c.count += n_requests
            c.ns += output_ns * n_requests
            b = self.batch.get(batch_size)
            if b is None:
                b = self.batch[batch_size] = BatchStats()
            c = b.compute_input
            c.count += 1
            c.ns += input_ns
            c = b.compute_infer
            c.count += 1
            c.ns += infer_ns
            c = b.compute_output
            c.count += 1
            c.ns += output_ns
            self.last_inference_ms = time.time_ns() // 1_000_000
        s = self.summaries
        if s is not None:
            for q in queue_ns:
                s.observe("queue", q)
            s.observe("compute_input", input_ns, n_requests)
            s.observe("compute_infer", infer_ns, n_requests)
            s.observe("compute_output", output_ns, n_requests)
            for d in request_ns or ():
                s.observe("request", d)

    def record_failed_execution(self, batch_size: int, infer_ns: int) -> None:
        """An execution that raised: it counts, as its batch does, but infers nothing (as Triton)."""
        with self._lock:
            self.execution_count += 1
            b = self.batch.get(batch_size)
            if b is None:
                b = self.batch[batch_size] = BatchStats()
            b.compute_input.add(0)
            b.compute_infer.add(infer_ns)
            b.compute_output.add(0)

    def record_request(self, ok: bool, duration_ns: int, reason: str = "BACKEND") -> None:
        """A request ended: success or failure with its whole duration."""
        with self._lock:
            self.recent_requests.append((time.monotonic_ns(), duration_ns, ok))
            if ok:
                self.success.add(duration_ns)
            else:
                self.fail.add(duration_ns)
                self.fail_reasons[reason] = self.fail_reasons.get(reason, 0) + 1
        if self.summaries is not None:
            self.summaries.observe("request", duration_ns)

    def record_cache_hit(self, duration_ns: int, queue_ns: int, lookup_ns: int) -> None:
        """A request answered from the response cache: a success with its queue and lookup times,
        no inference, execution or compute (engine/cache.py)."""
        with self._lock:
            self.recent_requests.append((time.monotonic_ns(), duration_ns, True))
            self.success.add(duration_ns)
            self.queue.add(queue_ns)
            self.cache_hit.add(lookup_ns)
        if self.summaries is not None:
            self.summaries.observe("queue", queue_ns)
            self.summaries.observe("cache_hit", lookup_ns)

    def record_cache_miss(self, ns: int) -> None:
        """A miss's lookup and insertion time, added to its request's duration as the reference adds it."""
        with self._lock:
            self.cache_miss.add(ns)
            self.success.ns += ns
        if self.summaries is not None:
            self.summaries.observe("cache_miss", ns)

    def to_json(self, name: str, version: str) -> dict[str, Any]:
        """Triton's model_stats entry."""
        with self._lock:
            return {
                "name": name,
                "version": version,
                "last_inference": self.last_inference_ms,
                "inference_count": self.inference_count,
                "execution_count": self.execution_count,
                "inference_stats": {
                    "success": self.success.to_json(),
                    "fail": self.fail.to_json(),
                    "queue": self.queue.to_json(),
                    "compute_input": self.compute_input.to_json(),
                    "compute_infer": self.compute_infer.to_json(),
                    "compute_output": self.compute_output.to_json(),
                    "cache_hit": self.cache_hit.to_json(),
                    "cache_miss": self.cache_miss.to_json(),
                },
                "response_stats": {},
                "batch_stats": [
                    {
                        "batch_size": bs,
                        "compute_input": b.compute_input.to_json(),
                        "compute_infer": b.compute_infer.to_json(),
                        "compute_output": b.compute_output.to_json(),
                    }
                    for bs, b in sorted(self.batch.items())
                ],
                "memory_usage": [],
            }
