"""Latency summaries (``--metrics-config summary_latencies=true``): quantiles over a sliding window.

As the reference's (prometheus-cpp's Summary): the quantiles cover the last ``MAX_AGE_S`` seconds,
kept as ``AGE_BUCKETS`` buckets that rotate; ``_count`` and ``_sum`` cover the whole life of the
model version. Each bucket keeps at most ``CAP`` samples by reservoir sampling, so memory stays
bounded at any request rate, and each sample counts for its bucket's share of the window (a bucket
that saw ten times more requests weighs ten times more). The configuration is the server's
(``server_config.CoreConfig.metrics``), handed to each model version as it loads: two servers in
one process keep their own.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass

import numpy as np

MAX_AGE_S = 60.0
AGE_BUCKETS = 5
CAP = 512
#: the reference's default quantiles (quantile, allowed error)
DEFAULT_QUANTILES = ((0.5, 0.05), (0.9, 0.01), (0.95, 0.001), (0.99, 0.001), (0.999, 0.001))
_DEFAULT_Q = tuple(q for q, _ in DEFAULT_QUANTILES)
#: what is summarised, in the reference's family order
KINDS = ("request", "queue", "compute_input", "compute_infer", "compute_output")
#: what a model whose responses are cached adds (and it has no "request" summary: the reference leaves
#: it out, its issue DLIS-4762, as a miss's insertion time would be a second observation)
CACHE_KINDS = ("cache_hit", "cache_miss")


@dataclass(frozen=True, slots=True)
class MetricsConfig:
    """``--metrics-config`` as the reference reads it (unknown keys are ignored, as there)."""

    counter_latencies: bool = True
    summary_latencies: bool = False
    quantiles: tuple[float, ...] = _DEFAULT_Q
    #: the first-response histogram (core/histogram.py)
    histogram_latencies: bool = False
    #: the server has a response cache (--cache-config): its models' cache summaries
    response_cache: bool = False

    @classmethod
    def parse(cls, settings: list[str]) -> MetricsConfig:
        counters, summaries, quantiles, histograms = True, False, _DEFAULT_Q, False
        for setting in settings:
            key, _, value = setting.partition("=")
            if key == "counter_latencies" and value == "false":
                counters = False
            elif key == "summary_latencies" and value == "true":
                summaries = True
            elif key == "histogram_latencies" and value == "true":
                histograms = True
            elif key == "summary_quantiles":
                parsed = []
                for pair in value.split(","):
                    q, colon, _error = pair.partition(":")
                    try:
                        parsed.append(float(q))
                    except ValueError:
                        continue
                    if not colon:
                        parsed.pop()  # the reference logs "No ':' delimiter found" and skips it
                if parsed:
                    quantiles = tuple(parsed)
        return cls(counters, summaries, quantiles, histograms)


class _Window:
    """One kind's samples: rotating reservoirs plus lifetime count and sum (microseconds)."""

    __slots__ = ("buckets", "count", "started", "sum")

    def __init__(self, now: float) -> None:
        self.buckets: list[tuple[list[float], list[int]]] = [([], [0]) for _ in range(AGE_BUCKETS)]
        self.started = now
        self.count = 0
        self.sum = 0.0

    def _bucket(self, now: float) -> tuple[list[float], list[int]]:
        width = MAX_AGE_S / AGE_BUCKETS
        index = int((now - self.started) // width)
        slot = self.buckets[index % AGE_BUCKETS]
        return slot

    def observe(self, us: float, now: float) -> None:
        self.count += 1
        self.sum += us
        samples, seen = self._bucket(now)
        seen[0] += 1
        if len(samples) < CAP:
            samples.append(us)
        else:
            j = random.randrange(seen[0])
            if j < CAP:
                samples[j] = us


class LatencySummaries:
    """The summaries of one model version: the five of KINDS, or with ``cache`` (its responses are
    cached) the cache hit and miss summaries instead of the request one."""

    def __init__(self, quantiles: tuple[float, ...], cache: bool = False) -> None:
        self.quantiles = quantiles
        self._lock = threading.Lock()
        now = time.monotonic()
        kinds = (*KINDS[1:], *CACHE_KINDS) if cache else KINDS
        self._windows = {k: _Window(now) for k in kinds}
        #: when each window's buckets were last emptied, by age-bucket epoch
        self._epoch = 0

    def has(self, kind: str) -> bool:
        return kind in self._windows

    def observe(self, kind: str, ns: int, n: int = 1) -> None:
        w = self._windows.get(kind)
        if w is None:  # a kind this model does not summarise ("request" of a cached model)
            return
        now = time.monotonic()
        with self._lock:
            self._rotate(now)
            for _ in range(n):
                w.observe(ns / 1000, now)

    def _rotate(self, now: float) -> None:
        """Empty the buckets that fell out of the window (lock held)."""
        any_window = self._windows["queue"]
        epoch = int((now - any_window.started) // (MAX_AGE_S / AGE_BUCKETS))
        if epoch == self._epoch:
            return
        for e in range(max(self._epoch + 1, epoch - AGE_BUCKETS + 1), epoch + 1):
            for w in self._windows.values():
                samples, seen = w.buckets[e % AGE_BUCKETS]
                samples.clear()
                seen[0] = 0
        self._epoch = epoch

    def snapshot(self, kind: str) -> tuple[int, float, list[tuple[float, float]]]:
        """(count, sum in microseconds, [(quantile, value)]) of one kind; NaN without samples."""
        with self._lock:
            self._rotate(time.monotonic())
            w = self._windows[kind]
            values: list[float] = []
            weights: list[float] = []
            for samples, seen in w.buckets:
                if samples:
                    values += samples
                    weights += [seen[0] / len(samples)] * len(samples)
            count, total = w.count, w.sum
        if not values:
            return count, total, [(q, float("nan")) for q in self.quantiles]
        order = np.argsort(values)
        v = np.asarray(values)[order]
        cum = np.cumsum(np.asarray(weights)[order])
        cum /= cum[-1]
        return (
            count,
            total,
            [(q, float(v[min(int(np.searchsorted(cum, q)), len(v) - 1)])) for q in self.quantiles],
        )


def new_summaries(config: MetricsConfig, cached: bool = False) -> LatencySummaries | None:
    """A model version's summaries, when the server's configuration asks for them (``cached``: the
    model enables the response cache; it counts only when the server has one)."""
    if not config.summary_latencies:
        return None
    return LatencySummaries(config.quantiles, cached and config.response_cache)
