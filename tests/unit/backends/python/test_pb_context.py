"""pb_context.py: a thread a model starts acts for the model's instance (as every thread of the
reference's stub process does): custom metrics created from it while ``initialize`` still runs,
under the model's own name even when another model loaded later; its threads' threads too; BLS
refused while ``initialize`` runs; nothing once the instance unloaded."""

from __future__ import annotations

import threading
from pathlib import Path

from pymodels import answers, instance, request, write_model

from inferd.backends.base import ServerLinks
from inferd.backends.python import pb_utils
from inferd.backends.python.pb_context import _hooks
from inferd.metrics.custom import CustomMetricRegistry

MODEL = """
import threading
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.seen = []
        self.go = threading.Event()
        made = threading.Event()

        def work():
            try:
                family = pb_utils.MetricFamily(
                    name="jobs_" + args["model_name"], description="d", kind=pb_utils.MetricFamily.COUNTER)
                self.metric = family.Metric(labels={})
                self.family = family
                self.seen.append("made")
            except Exception as e:
                self.seen.append(str(e))
            try:
                pb_utils.InferenceRequest(model_name="x", inputs=[], requested_output_names=[]).exec()
            except Exception as e:
                self.seen.append(str(e))
            made.set()

            def grandchild():  # a thread of the model's thread: the instance's too
                self.go.wait()
                self.metric.increment(1)
                self.late = pb_utils.MetricFamily(name="late_" + args["model_name"], description="d",
                                                  kind=pb_utils.MetricFamily.GAUGE)
                self.seen.append("grandchild")

            self.grandchild = threading.Thread(target=grandchild)
            self.grandchild.start()

        threading.Thread(target=work).start()
        made.wait()

    def execute(self, requests):
        self.go.set()
        self.grandchild.join()
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([len(self.seen)], np.int32))])
                for _ in requests]
"""


def test_a_thread_started_in_initialize_acts_for_the_instance(tmp_path: Path) -> None:
    registry = CustomMetricRegistry()
    links = ServerLinks(metrics=registry)
    first = instance(write_model(tmp_path, "first", MODEL), links)
    second = instance(write_model(tmp_path, "second", MODEL), links)  # the one pb_utils fell back to
    try:
        for inst in (first, second):
            assert inst.obj.seen == ["made", "BLS is only supported during the 'execute' function."]
        answers(first, request(1))
        assert first.obj.seen[-1] == "grandchild"
        text = registry.render()
        assert "jobs_first 1" in text and "jobs_second 0" in text
        assert set(registry.family_names()) == {"jobs_first", "jobs_second", "late_first"}
    finally:
        first.unload()
    # the first model's families went with it: they were its own, not the model loaded last
    assert set(registry.family_names()) == {"jobs_second"}
    second.unload()


def test_a_thread_of_an_unloaded_instance_acts_for_nobody(tmp_path: Path) -> None:
    source = """
    import threading
    import triton_python_backend_utils as pb_utils

    class TritonPythonModel:
        def initialize(self, args):
            self.go = threading.Event()
            self.result = []

            def later():
                self.go.wait()
                try:
                    pb_utils.MetricFamily(name="after", description="d", kind=pb_utils.MetricFamily.GAUGE)
                    self.result.append("made")
                except pb_utils.TritonModelException as e:
                    self.result.append(str(e))

            self.thread = threading.Thread(target=later)
            self.thread.start()

        def execute(self, requests):
            return None
    """
    registry = CustomMetricRegistry()
    links = ServerLinks(metrics=registry)
    gone = instance(write_model(tmp_path, "gone", source), links)
    other = instance(write_model(tmp_path, "other", MODEL), links)
    try:
        gone.unload()
        gone.obj.go.set()
        gone.obj.thread.join()
        assert gone.obj.result == ["custom metrics are not available outside a model instance"]
        assert "after" not in registry.family_names()  # not created for the other model either
    finally:
        other.unload()


def test_a_thread_started_outside_any_instance_inherits_nothing() -> None:
    got: list[object] = []
    t = threading.Thread(target=lambda: got.append(_hooks()))
    t.start()
    t.join()
    assert got == [pb_utils._default_hooks]
