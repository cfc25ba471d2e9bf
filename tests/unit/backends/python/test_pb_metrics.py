"""pb_utils.MetricFamily and Metric as a model uses them: the server's registry behind them, object
lifetimes as the reference's (a family deleted before its metrics), texts, unload."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest
from pymodels import answers, instance, request, write_model

from inferd.backends.base import ServerLinks
from inferd.backends.python import pb_utils
from inferd.metrics.custom import CustomMetricRegistry

MODEL = """
import json
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.family = pb_utils.MetricFamily(
            name="requests_seen", description="requests this model saw", kind=pb_utils.MetricFamily.COUNTER)
        # the family must outlive its metrics (as in the reference): keep it
        self.sizes = pb_utils.MetricFamily(
            name="sizes", description="input values", kind=pb_utils.MetricFamily.HISTOGRAM)
        self.hist = self.sizes.Metric(labels={"model": args["model_name"]}, buckets=[1.0, 10.0])
        self.routes = {}

    def execute(self, requests):
        for r in requests:
            labels = json.loads(r.parameters())
            self.family.Metric(labels={"route": "dropped"}).increment(1)  # freed at once: its series too
            key = tuple(sorted(labels.items()))
            if key not in self.routes:
                self.routes[key] = self.family.Metric(labels=labels)
            self.routes[key].increment(1)
            self.hist.observe(float(r.get_input("IN").as_numpy()[0]))
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([0], np.int32))]) for _ in requests]
"""


def test_a_models_metrics_live_in_the_servers_registry(tmp_path: Path) -> None:
    registry = CustomMetricRegistry()
    inst = instance(write_model(tmp_path, "counted", MODEL), ServerLinks(metrics=registry))
    answers(inst, request(5, route="a"))
    answers(inst, request(50, route="a"))
    answers(inst, request(0, route="b"))
    text = registry.render()
    assert 'requests_seen{route="a"} 2' in text
    assert 'requests_seen{route="b"} 1' in text
    assert 'sizes_bucket{model="counted",le="1"} 1' in text
    assert 'sizes_bucket{model="counted",le="10"} 2' in text
    assert 'sizes_sum{model="counted"} 55' in text
    assert not any("dropped" in line for line in text)  # a freed Metric takes its series along
    assert registry.family_names() == ["requests_seen", "sizes"]
    inst.unload()  # its last instance: what the model held goes with it
    assert registry.render() == []


class _Hooks(pb_utils._Hooks):
    def __init__(self, registry: CustomMetricRegistry) -> None:
        self.registry = registry

    def metrics(self) -> pb_utils.MetricsTarget:
        return pb_utils.MetricsTarget(self.registry, "m:1", "m_0")


@pytest.fixture
def registry() -> CustomMetricRegistry:
    reg = CustomMetricRegistry()
    pb_utils._set_thread_hooks(_Hooks(reg))
    return reg


def test_kinds_and_values(registry: CustomMetricRegistry) -> None:
    fam = pb_utils.MetricFamily(name="g", description="d", kind=pb_utils.MetricFamily.GAUGE)
    m = fam.Metric(labels={"a": "b"})
    assert m.value() == 0.0
    m.increment(2023.0)
    m.increment(-23.5)
    m.set(999.9)
    assert m.value() == 999.9
    with pytest.raises(pb_utils.TritonModelException) as info:
        m.observe(0.05)
    assert str(info.value) == (
        "Failed to observe metric value: Failed to process the request for model 'm_0', message: "
        "TRITONSERVER_METRIC_KIND_GAUGE does not support Observe"
    )
    assert repr(pb_utils.MetricFamily.COUNTER) == "<MetricKind.COUNTER: 0>"


def test_a_deleted_family_invalidates_its_metrics(registry: CustomMetricRegistry) -> None:
    fam = pb_utils.MetricFamily(name="c", description="d", kind=pb_utils.MetricFamily.COUNTER)
    metric = fam.Metric(labels={"k": "v"})
    del fam
    gc.collect()
    for call, prefix in (
        (lambda: metric.increment(10), "Failed to increment metric value: "),
        (metric.value, "Failed to get metric value: "),
    ):
        with pytest.raises(pb_utils.TritonModelException) as info:
            call()
        assert str(info.value) == (
            f"{prefix}Invalid metric operation as the corresponding 'MetricFamily' has been deleted. The "
            "'MetricFamily' object should be deleted AFTER its corresponding 'Metric' objects have been deleted."
        )


def test_duplicates_share_the_family_and_the_metric(registry: CustomMetricRegistry) -> None:
    f1 = pb_utils.MetricFamily(
        name="dup", description="first description", kind=pb_utils.MetricFamily.COUNTER
    )
    f2 = pb_utils.MetricFamily(
        name="dup", description="second description", kind=pb_utils.MetricFamily.COUNTER
    )
    m1 = f1.Metric(labels={"x": "1"})
    m2 = f2.Metric(labels={"x": "1"})
    m1.increment(7.5)
    assert m2.value() == 7.5
    del m1, f1
    gc.collect()
    assert "# HELP dup first description" in registry.render()
    with pytest.raises(pb_utils.TritonModelException) as info:
        pb_utils.MetricFamily(name="dup", description="d", kind=pb_utils.MetricFamily.GAUGE)
    assert str(info.value) == (
        "Error when creating MetricFamily: Failed to process the request for model 'm_0', message: Family name "
        "already exists with different type"
    )


@pytest.mark.parametrize(
    ("kwargs", "exc", "text"),
    [
        ({"labels": {}}, pb_utils.TritonModelException, "Failed to create metric. Missing required buckets."),
        ({"labels": {}, "buckets": None}, pb_utils.TritonModelException, "Failed to create metric. Missing required buckets."),
        ({"labels": {}, "buckets": (1, 2)}, pb_utils.TritonModelException, "Failed to create metric. Buckets must be a list."),
        ({"labels": [1], "buckets": [1]}, pb_utils.TritonModelException, "Failed to create metric. Labels must be a dictionary."),
        ({"labels": {}, "buckets": [2.5, 0.1]}, pb_utils.TritonModelException,
         "Error when creating Metric: Failed to process the request for model 'm_0', message: Bucket Boundaries "
         "must be strictly sorted"),
        ({"labels": {}, "buckets": ["a"]}, RuntimeError,
         "Unable to cast Python instance to C++ type (#define PYBIND11_DETAILED_ERROR_MESSAGES or compile in debug "
         "mode for details)"),
    ],
)  # fmt: skip
def test_histogram_arguments(
    registry: CustomMetricRegistry, kwargs: dict[str, object], exc: type, text: str
) -> None:
    fam = pb_utils.MetricFamily(name="h", description="d", kind=pb_utils.MetricFamily.HISTOGRAM)
    with pytest.raises(exc) as info:
        fam.Metric(**kwargs)
    assert str(info.value) == text
    fam.Metric(labels={}, buckets=[])  # no bounds: fine


def test_constructor_arguments(registry: CustomMetricRegistry) -> None:
    with pytest.raises(TypeError, match=r"^__init__\(\): incompatible constructor arguments"):
        pb_utils.MetricFamily(name="x", description="d", kind=1)
    with pytest.raises(TypeError):
        pb_utils.MetricFamily(name=None, description="d", kind=pb_utils.MetricFamily.GAUGE)
    with pytest.raises(pb_utils.TritonModelException, match="Unexpected buckets found"):
        pb_utils.MetricFamily("c", "d", pb_utils.MetricFamily.COUNTER).Metric(buckets=[1.0])


def test_metrics_outside_a_server() -> None:
    with pytest.raises(pb_utils.TritonModelException, match="custom metrics are not available"):
        pb_utils.MetricFamily(name="x", description="d", kind=pb_utils.MetricFamily.GAUGE)
