"""``pb_utils.MetricFamily`` and ``Metric``: custom metrics a model defines, served on ``/metrics``.

The objects hold references in the server's one registry (``LoadContext.links.metrics``, an
``inferd.metrics.custom.CustomMetricRegistry``): a family or a metric lives while a model object
holds it, as in the reference, and whatever a model version held goes when it unloads. Texts are the
reference's (its Python stub's prefixes around Triton core's messages).
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any

from inferd.backends.base import MetricError
from inferd.backends.python.pb_args import REQUIRED, bind, incompatible, is_number
from inferd.backends.python.pb_context import _hooks
from inferd.backends.python.pb_errors import TritonModelException

if TYPE_CHECKING:
    from inferd.backends.base import MetricRegistry

#: the kinds, an enum named as the reference's (``<MetricKind.COUNTER: 0>``)
MetricKind: Any = enum.IntEnum(
    "MetricKind", [("COUNTER", 0), ("GAUGE", 1), ("HISTOGRAM", 2)], module="c_python_backend_utils"
)


class MetricsTarget:
    """Where a model's metric calls go: the registry, the owning model version, the instance name
    (which the reference's server-side texts quote)."""

    __slots__ = ("instance", "owner", "registry")

    def __init__(self, registry: MetricRegistry, owner: str, instance: str) -> None:
        self.registry = registry
        self.owner = owner
        self.instance = instance

    def error(self, prefix: str, e: MetricError) -> TritonModelException:
        if e.stub:
            return TritonModelException(f"{prefix}{e}")
        return TritonModelException(
            f"{prefix}Failed to process the request for model '{self.instance}', message: {e}"
        )


def _target() -> MetricsTarget:
    return _hooks().metrics()


class MetricFamily:
    """A metric family (counter, gauge or histogram) on the server's ``/metrics``.

    Families are shared by name: a second family of the same name and kind is the first one (its
    description stays); another kind is refused.
    """

    COUNTER = MetricKind.COUNTER
    GAUGE = MetricKind.GAUGE
    HISTOGRAM = MetricKind.HISTOGRAM

    __slots__ = ("__weakref__", "_kind", "_name", "_target")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._target: MetricsTarget | None = None
        a = bind((("name", REQUIRED), ("description", REQUIRED), ("kind", REQUIRED)), args, kwargs)
        if (
            a is None
            or not isinstance(a["name"], str)
            or not isinstance(a["description"], str)
            or not isinstance(a["kind"], MetricKind)
        ):
            raise incompatible(
                "__init__",
                "c_python_backend_utils.MetricFamily(name: str, description: str, kind: "
                "c_python_backend_utils.MetricKind)",
                args,
                kwargs,
                constructor=True,
            )
        target = _target()
        try:
            target.registry.family_new(target.owner, a["name"], a["description"], int(a["kind"]))
        except MetricError as e:
            raise target.error("Error when creating MetricFamily: ", e) from None
        self._name: str = a["name"]
        self._kind = MetricKind(a["kind"])
        self._target = target

    def Metric(self, labels: Any = None, buckets: Any = None) -> Metric:
        """The metric of this family with ``labels`` (a dict of strings); a histogram needs
        ``buckets``, a strictly increasing list of upper bounds."""
        if labels is None:
            labels = {}
        if not isinstance(labels, dict):
            raise TritonModelException("Failed to create metric. Labels must be a dictionary.")
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
            raise TritonModelException("Failed to create metric. Labels must be a dictionary of strings.")
        bounds: tuple[float, ...] | None = None
        if buckets is not None:
            if not isinstance(buckets, list):
                raise TritonModelException("Failed to create metric. Buckets must be a list.")
            if not all(is_number(b) for b in buckets):
                raise RuntimeError(
                    "Unable to cast Python instance to C++ type (#define PYBIND11_DETAILED_ERROR_MESSAGES or "
                    "compile in debug mode for details)"
                )
            bounds = tuple(float(b) for b in buckets)
        target = self._target
        assert target is not None
        try:
            metric = target.registry.metric_new(target.owner, self._name, tuple(labels.items()), bounds)
        except MetricError as e:
            raise target.error("" if e.stub else "Error when creating Metric: ", e) from None
        return Metric._make(target, metric)

    def __del__(self) -> None:
        target = self._target
        if target is not None:
            self._target = None
            try:
                target.registry.family_delete(target.owner, self._name)
            except Exception:  # a finalizer must not raise (interpreter shutdown)
                pass


class Metric:
    """One metric of a family (made by ``MetricFamily.Metric``)."""

    __slots__ = ("__weakref__", "_id", "_target")
    _id: int
    _target: MetricsTarget

    def __init__(self) -> None:
        raise TypeError("c_python_backend_utils.Metric: No constructor defined!")

    @classmethod
    def _make(cls, target: MetricsTarget, metric: int) -> Metric:
        self = cls.__new__(cls)
        self._target = target
        self._id = metric
        return self

    def _op(self, name: str, prefix: str, value: Any = 0.0) -> float:
        if not is_number(value):
            raise incompatible(
                name, f"(self: c_python_backend_utils.Metric, arg0: float) -> {'None'}", (self, value), {}
            )
        t = self._target
        try:
            return float(t.registry.metric_op(self._id, name, float(value)))
        except MetricError as e:
            raise t.error(prefix, e) from None

    def increment(self, value: float) -> None:
        """Add ``value`` (a counter: not negative)."""
        self._op("increment", "Failed to increment metric value: ", value)

    def set(self, value: float) -> None:
        """Set a gauge to ``value``."""
        self._op("set", "Failed to set metric value: ", value)

    def observe(self, value: float) -> None:
        """Record ``value`` in a histogram."""
        self._op("observe", "Failed to observe metric value: ", value)

    def value(self) -> float:
        """A counter's or gauge's value."""
        return self._op("value", "Failed to get metric value: ")

    def __del__(self) -> None:
        t = getattr(self, "_target", None)
        if t is not None:
            self._target = None  # type: ignore[assignment]
            try:
                t.registry.metric_delete(t.owner, self._id)
            except Exception:  # a finalizer must not raise (interpreter shutdown)
                pass
