"""Latency summaries: --metrics-config parsed as the reference reads it, quantiles over the window."""

from __future__ import annotations

import math
import time

import pytest

from inferd.core.summary import AGE_BUCKETS, CAP, MAX_AGE_S, LatencySummaries, MetricsConfig


def test_metrics_config_as_the_reference_reads_it() -> None:
    assert MetricsConfig.parse([]) == MetricsConfig()
    c = MetricsConfig.parse(
        ["summary_latencies=true", "counter_latencies=false", "summary_quantiles=0.5:0.05,0.99:0.001"]
    )
    assert (c.summary_latencies, c.counter_latencies, c.quantiles) == (True, False, (0.5, 0.99))
    # a pair without ':' or not a number is skipped; nothing valid keeps the defaults; unknown keys are ignored
    assert MetricsConfig.parse(["summary_quantiles=0.5,x:1,0.9:0.01"]).quantiles == (0.9,)
    assert MetricsConfig.parse(["summary_quantiles=bad", "whatever=1"]).quantiles == MetricsConfig().quantiles


def test_quantiles_count_and_sum() -> None:
    s = LatencySummaries((0.5, 0.9, 0.99))
    for us in range(1, 1001):
        s.observe("queue", us * 1000)
    count, total, q = s.snapshot("queue")
    assert count == 1000 and total == pytest.approx(500500)
    values = dict(q)
    assert 450 <= values[0.5] <= 550 and 850 <= values[0.9] <= 950 and values[0.99] >= 950
    assert all(math.isnan(v) for _, v in s.snapshot("request")[2])  # nothing observed yet


def test_memory_is_bounded_and_old_samples_leave_the_window(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])  # what summary reads
    s = LatencySummaries((0.5,))
    for _ in range(10 * CAP):
        s.observe("request", 5_000_000)  # 5 ms
    assert sum(len(b[0]) for b in s._windows["request"].buckets) <= CAP
    now[0] += MAX_AGE_S + MAX_AGE_S / AGE_BUCKETS  # a minute and a bucket later
    s.observe("request", 1_000_000)  # 1 ms
    count, _, [(_, median)] = s.snapshot("request")
    assert count == 10 * CAP + 1  # count and sum are for the whole life
    assert median == 1000.0  # the window holds only the new sample
