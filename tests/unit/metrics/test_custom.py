"""The custom metric registry: families shared by name, references per owner, Triton core's texts,
and the Prometheus text it renders."""

from __future__ import annotations

import threading

import pytest

from inferd.backends.base import MetricError
from inferd.metrics.custom import (
    COUNTER,
    FAMILY_DELETED,
    GAUGE,
    HISTOGRAM,
    CustomMetricRegistry,
    format_value,
)


def _registry() -> CustomMetricRegistry:
    return CustomMetricRegistry()


def test_counter_gauge_histogram_operations() -> None:
    reg = _registry()
    reg.family_new("m:1", "c", "a counter", COUNTER)
    reg.family_new("m:1", "g", "a gauge", GAUGE)
    reg.family_new("m:1", "h", "a histogram", HISTOGRAM)
    c = reg.metric_new("m:1", "c", (("k", "v"),), None)
    g = reg.metric_new("m:1", "g", (), None)
    h = reg.metric_new("m:1", "h", (), (0.1, 1.0))
    assert reg.metric_op(c, "increment", 2.5) == 2.5
    assert reg.metric_op(c, "value") == 2.5
    reg.metric_op(g, "set", 7)
    reg.metric_op(g, "increment", -2)
    assert reg.metric_op(g, "value") == 5
    for v in (0.05, 0.5, 3.0):
        reg.metric_op(h, "observe", v)
    text = reg.render()
    assert text == [
        "# HELP c a counter",
        "# TYPE c counter",
        'c{k="v"} 2.5',
        "# HELP g a gauge",
        "# TYPE g gauge",
        "g 5",
        "# HELP h a histogram",
        "# TYPE h histogram",
        "h_count 3",
        "h_sum 3.55",
        'h_bucket{le="0.1"} 1',
        'h_bucket{le="1"} 2',
        'h_bucket{le="+Inf"} 3',
    ]


@pytest.mark.parametrize(
    ("kind", "op", "value", "text"),
    [
        (COUNTER, "increment", -1, "TRITONSERVER_METRIC_KIND_COUNTER can only be incremented monotonically by "
         "non-negative values."),
        (COUNTER, "set", 1, "TRITONSERVER_METRIC_KIND_COUNTER does not support Set"),
        (COUNTER, "observe", 1, "TRITONSERVER_METRIC_KIND_COUNTER does not support Observe"),
        (GAUGE, "observe", 1, "TRITONSERVER_METRIC_KIND_GAUGE does not support Observe"),
        (HISTOGRAM, "increment", 1, "TRITONSERVER_METRIC_KIND_HISTOGRAM does not support Increment"),
        (HISTOGRAM, "set", 1, "TRITONSERVER_METRIC_KIND_HISTOGRAM does not support Set"),
        (HISTOGRAM, "value", 0, "TRITONSERVER_METRIC_KIND_HISTOGRAM does not support Value"),
    ],
)  # fmt: skip
def test_operations_a_kind_refuses(kind: int, op: str, value: float, text: str) -> None:
    reg = _registry()
    reg.family_new("o", "f", "d", kind)
    m = reg.metric_new("o", "f", (), () if kind == HISTOGRAM else None)
    with pytest.raises(MetricError) as info:
        reg.metric_op(m, op, value)
    assert str(info.value) == text
    assert not info.value.stub


def test_a_family_is_shared_by_name_and_kind() -> None:
    reg = _registry()
    reg.family_new("a", "f", "first description", COUNTER)
    reg.family_new("b", "f", "second description", COUNTER)  # the first description stays
    with pytest.raises(MetricError, match=r"^Family name already exists with different type$"):
        reg.family_new("a", "f", "d", GAUGE)
    m1 = reg.metric_new("a", "f", (("x", "1"),), None)
    m2 = reg.metric_new("b", "f", (("x", "1"),), None)  # the same labels: the same metric
    assert m1 == m2
    reg.metric_op(m1, "increment", 3)
    assert reg.metric_op(m2, "value") == 3
    assert reg.render()[0] == "# HELP f first description"


def test_references_keep_families_and_metrics_alive() -> None:
    reg = _registry()
    reg.family_new("o", "f", "d", GAUGE)
    reg.family_new("o", "f", "d", GAUGE)
    m = reg.metric_new("o", "f", (("a", "b"),), None)
    m_again = reg.metric_new("o", "f", (("a", "b"),), None)
    reg.metric_delete("o", m_again)
    reg.metric_op(m, "set", 1)  # one reference left
    reg.family_delete("o", "f")
    assert reg.family_names() == ["f"]
    reg.family_delete("o", "f")  # the last one: the family and its metrics go
    assert reg.family_names() == []
    with pytest.raises(MetricError) as info:
        reg.metric_op(m, "value")
    assert str(info.value) == FAMILY_DELETED and info.value.stub
    reg.metric_delete("o", m)  # a metric of a deleted family: nothing left to do


def test_a_metric_goes_with_its_last_reference() -> None:
    reg = _registry()
    reg.family_new("o", "f", "d", COUNTER)
    m = reg.metric_new("o", "f", (("a", "b"),), None)
    reg.metric_delete("o", m)
    assert reg.render() == ["# HELP f d", "# TYPE f counter"]


def test_release_owner_drops_what_a_model_held() -> None:
    reg = _registry()
    reg.family_new("a:1", "shared", "d", COUNTER)
    reg.family_new("b:1", "shared", "d", COUNTER)
    reg.family_new("a:1", "only_a", "d", COUNTER)
    ma = reg.metric_new("a:1", "shared", (("who", "a"),), None)
    mb = reg.metric_new("b:1", "shared", (("who", "b"),), None)
    reg.release_owner("a:1")
    assert reg.family_names() == ["shared"]  # b still holds it
    with pytest.raises(MetricError):
        reg.metric_op(ma, "value")
    assert reg.metric_op(mb, "value") == 0
    reg.release_owner("b:1")
    assert reg.family_names() == [] and reg.render() == []


@pytest.mark.parametrize(
    ("call", "text"),
    [
        (lambda r: r.family_new("o", "bad name", "d", COUNTER), "Invalid metric name"),
        (lambda r: r.family_new("o", "x", "d", 7), "Unsupported kind passed to MetricFamily constructor."),
        (lambda r: r.metric_new("o", "c", (("__x", "v"),), None), "Invalid label name"),
        (lambda r: r.metric_new("o", "c", (("a-b", "v"),), None), "Invalid label name"),
        (lambda r: r.metric_new("o", "h", (), (2.5, 0.1)), "Bucket Boundaries must be strictly sorted"),
        (lambda r: r.metric_new("o", "h", (), (1.0, 1.0)), "Bucket Boundaries must be strictly sorted"),
    ],
)
def test_refused_names_and_buckets(call: object, text: str) -> None:
    reg = _registry()
    reg.family_new("o", "c", "d", COUNTER)
    reg.family_new("o", "h", "d", HISTOGRAM)
    with pytest.raises(MetricError) as info:
        call(reg)  # type: ignore[operator]
    assert str(info.value) == text


def test_bucket_checks_of_the_stub() -> None:
    reg = _registry()
    reg.family_new("o", "c", "d", COUNTER)
    reg.family_new("o", "h", "d", HISTOGRAM)
    with pytest.raises(MetricError) as info:
        reg.metric_new("o", "h", (), None)
    assert (str(info.value), info.value.stub) == ("Failed to create metric. Missing required buckets.", True)
    with pytest.raises(MetricError) as info:
        reg.metric_new("o", "c", (), (1.0,))
    assert (str(info.value), info.value.stub) == ("Failed to create metric. Unexpected buckets found.", True)
    reg.metric_new("o", "h", (), ())  # no bounds: only the +Inf bucket
    assert 'h_bucket{le="+Inf"} 0' in reg.render()


def test_labels_are_sorted_and_escaped() -> None:
    reg = _registry()
    reg.family_new("o", "f", "line\\one\ntwo", GAUGE)
    reg.metric_new("o", "f", (("z", "1"), ("a", 'say "hi"\n')), None)
    assert reg.render() == ["# HELP f line\\\\one\\ntwo", "# TYPE f gauge", 'f{a="say \\"hi\\"\\n",z="1"} 0']


def test_values_are_written_as_prometheus_cpp_writes_them() -> None:
    assert format_value(2023.0) == "2023"
    assert format_value(7.55) == "7.55"
    assert format_value(0.1 + 0.2) == "0.3"  # %.16g, not repr
    assert format_value(float("inf")) == "+Inf"
    assert format_value(float("-inf")) == "-Inf"
    assert format_value(float("nan")) == "Nan"


def test_concurrent_increments_are_not_lost() -> None:
    reg = _registry()
    reg.family_new("o", "c", "d", COUNTER)
    m = reg.metric_new("o", "c", (), None)

    def bump() -> None:
        for _ in range(2000):
            reg.metric_op(m, "increment", 1)

    threads = [threading.Thread(target=bump) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert reg.metric_op(m, "value") == 8000
