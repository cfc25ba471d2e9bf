"""The queue-time scaling gauge: averages over the last 30 s of scrapes."""

from __future__ import annotations

from inferd.core.stats import ModelStats
from inferd.metrics.scaling import WINDOW_S, queue_time_per_request


def _queued(stats: ModelStats, n: int, us: int) -> None:
    stats.record_execution(n, n, [us * 1000] * n, 0, 0, 0)


def test_the_first_scrape_averages_the_whole_life_then_the_window() -> None:
    stats = ModelStats()
    assert queue_time_per_request(stats, now=0.0) == 0.0
    _queued(stats, 9, 100)  # 9 requests that waited 100 us each
    assert queue_time_per_request(stats, now=1.0) == 900 / 10  # (queue) / (1 + requests)
    _queued(stats, 4, 1000)
    assert queue_time_per_request(stats, now=2.0) == 4900 / 14  # since the oldest scrape in the window (t=0)
    # later than the window: the old busy period leaves the average
    assert queue_time_per_request(stats, now=2.0 + WINDOW_S + 1) == 0.0
    _queued(stats, 1, 50)
    assert queue_time_per_request(stats, now=3.0 + WINDOW_S + 1) == 50 / 2
