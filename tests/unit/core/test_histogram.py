"""The first-response histogram: buckets inclusive of their bound, whole milliseconds, the model's
own buckets from ``model_metrics``, and the ``histogram_latencies`` switch."""

from __future__ import annotations

import time

from inferd.core.histogram import DEFAULT_BUCKETS, Histogram, first_response_histogram
from inferd.core.summary import MetricsConfig
from inferd.metrics.custom import histogram_lines
from inferd.repository.config import parse_config_text


def test_buckets_are_inclusive_and_the_last_is_inf() -> None:
    h = Histogram((1.0, 2.5))
    for v in (0.0, 1.0, 2.0, 2.5, 3.0, 1e9):
        h.observe(v)
    count, total, counts = h.snapshot()
    assert (count, total, counts) == (6, 0 + 1 + 2 + 2.5 + 3 + 1e9, [2, 2, 2])
    lines = histogram_lines("f", 'model="m"', h.bounds, counts, total)
    assert lines[:2] == ['f_count{model="m"} 6', 'f_sum{model="m"} 1000000008.5']
    assert lines[2:] == [
        'f_bucket{model="m",le="1"} 2',
        'f_bucket{model="m",le="2.5"} 4',
        'f_bucket{model="m",le="+Inf"} 6',
    ]


def test_observe_since_truncates_to_whole_milliseconds() -> None:
    h = Histogram(DEFAULT_BUCKETS)
    h.observe_since(time.monotonic_ns() - 7_900_000)
    assert h.snapshot()[1] in (7.0, 8.0)  # 7.9 ms and a little: never a fraction


def test_the_switch_and_the_models_buckets() -> None:
    assert not MetricsConfig.parse([]).histogram_latencies
    assert MetricsConfig.parse(["histogram_latencies=true"]).histogram_latencies
    assert not MetricsConfig.parse(["histogram_latencies=yes"]).histogram_latencies
    plain = parse_config_text('name: "m" backend: "python"', "config.pbtxt")
    assert first_response_histogram(plain, False) is None
    h = first_response_histogram(plain, True)
    assert h is not None and h.bounds == DEFAULT_BUCKETS
    own = parse_config_text(
        'name: "m" backend: "python" model_metrics { metric_control [ { metric_identifier { family: '
        '"nv_inference_first_response_histogram_ms" } histogram_options { buckets: [ 8, -1, 2.5, 8 ] } } ] }',
        "config.pbtxt",
    )
    h = first_response_histogram(own, True)
    assert h is not None and h.bounds == (-1.0, 2.5, 8.0)
