"""Custom metrics: the families and metrics Python models define (``pb_utils.MetricFamily``).

One registry per server, owned by the Runtime and rendered by ``collector.py`` after Triton's own
families. Its calls take and return plain values (names, label pairs, numbers, integer ids), so a
model running in another process can forward them unchanged. References are counted per owner
(a model version, ``name:version``), as the reference's objects are: a family or a metric lives
while some model object holds it, and ``release_owner`` drops everything a model held when it
unloads. A family whose last reference goes takes its metrics with it; operations on those
metrics then fail with the reference's text.

Texts are those of Triton core and prometheus-cpp (the reference's metric implementation).
"""

from __future__ import annotations

import itertools
import math
import re
import threading
from dataclasses import dataclass, field

from inferd.backends.base import MetricError

COUNTER = 0
GAUGE = 1
HISTOGRAM = 2
_KIND_NAMES = {COUNTER: "COUNTER", GAUGE: "GAUGE", HISTOGRAM: "HISTOGRAM"}
_TYPE_LINE = {COUNTER: "counter", GAUGE: "gauge", HISTOGRAM: "histogram"}

#: what a metric operation of a family that was deleted answers (the reference's Python stub)
FAMILY_DELETED = (
    "Invalid metric operation as the corresponding 'MetricFamily' has been deleted. The 'MetricFamily' "
    "object should be deleted AFTER its corresponding 'Metric' objects have been deleted."
)

_METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


@dataclass(slots=True)
class _Series:
    """One metric: a family's label values and its value (a histogram: buckets, counts, sum)."""

    id: int
    family: _Family
    labels: tuple[tuple[str, str], ...]
    value: float = 0.0
    bounds: tuple[float, ...] = ()
    counts: list[int] = field(default_factory=list)  # per bound, then +Inf (not cumulative)
    refs: dict[str, int] = field(default_factory=dict)


@dataclass(slots=True)
class _Family:
    name: str
    description: str
    kind: int
    refs: dict[str, int] = field(default_factory=dict)
    series: dict[tuple[tuple[str, str], ...], _Series] = field(default_factory=dict)


def _acquire(refs: dict[str, int], owner: str) -> None:
    refs[owner] = refs.get(owner, 0) + 1


def _release(refs: dict[str, int], owner: str) -> bool:
    """Drop one of ``owner``'s references; True when nobody holds the object any more."""
    n = refs.get(owner, 0)
    if n <= 1:
        refs.pop(owner, None)
    else:
        refs[owner] = n - 1
    return not refs


def format_value(v: float) -> str:
    """A sample value as prometheus-cpp writes it (``%.16g``; ``+Inf``, ``-Inf``, ``Nan``)."""
    if math.isnan(v):
        return "Nan"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return format(v, ".16g")


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


class CustomMetricRegistry:
    """The custom metric families of one server (thread-safe; see the module docstring)."""

    def __init__(self) -> None:
        # reentrant: a model object freed by the garbage collector inside a registry call releases itself
        self._lock = threading.RLock()
        self._families: dict[str, _Family] = {}  # in creation order, as the reference lists them
        self._series: dict[int, _Series] = {}
        self._next_id = 1

    # -- families ----------------------------------------------------------------------------------
    def family_new(self, owner: str, name: str, description: str, kind: int) -> None:
        """Create family ``name`` or take one more reference to it (same kind: the first description
        stays, as in the reference)."""
        if kind not in _KIND_NAMES:
            raise MetricError("Unsupported kind passed to MetricFamily constructor.")
        if not _METRIC_NAME.match(name):
            raise MetricError("Invalid metric name")
        with self._lock:
            fam = self._families.get(name)
            if fam is None:
                fam = self._families[name] = _Family(name, description, kind)
            elif fam.kind != kind:
                raise MetricError("Family name already exists with different type")
            _acquire(fam.refs, owner)

    def family_delete(self, owner: str, name: str) -> None:
        """One reference to family ``name`` fewer; the last takes the family and its metrics away."""
        with self._lock:
            fam = self._families.get(name)
            if fam is not None and _release(fam.refs, owner):
                self._drop_family(fam)

    def _drop_family(self, fam: _Family) -> None:
        del self._families[fam.name]
        for s in fam.series.values():
            self._series.pop(s.id, None)

    # -- metrics -----------------------------------------------------------------------------------
    def metric_new(
        self,
        owner: str,
        family: str,
        labels: tuple[tuple[str, str], ...],
        buckets: tuple[float, ...] | None,
    ) -> int:
        """The id of the metric of ``family`` with ``labels`` (created, or the existing one: the
        reference shares it); ``buckets`` is required for histograms and refused otherwise."""
        with self._lock:
            fam = self._families.get(family)
            if fam is None:
                raise MetricError(FAMILY_DELETED, stub=True)
            if fam.kind == HISTOGRAM:
                if buckets is None:
                    raise MetricError("Failed to create metric. Missing required buckets.", stub=True)
                if any(a >= b for a, b in itertools.pairwise(buckets)):
                    raise MetricError("Bucket Boundaries must be strictly sorted")
            elif buckets is not None:
                raise MetricError("Failed to create metric. Unexpected buckets found.", stub=True)
            names = [k for k, _ in labels]
            for k in names:
                if not _LABEL_NAME.match(k) or k.startswith("__"):
                    raise MetricError("Invalid label name")
            if len(set(names)) != len(names):
                raise MetricError("Duplicate label name")
            key = tuple(sorted(labels))
            s = fam.series.get(key)
            if s is None:
                s = _Series(self._next_id, fam, key)
                self._next_id += 1
                if fam.kind == HISTOGRAM:
                    s.bounds = tuple(buckets or ())
                    s.counts = [0] * (len(s.bounds) + 1)
                fam.series[key] = s
                self._series[s.id] = s
            _acquire(s.refs, owner)
            return s.id

    def metric_delete(self, owner: str, metric: int) -> None:
        """One reference to ``metric`` fewer; the last removes it from its family."""
        with self._lock:
            s = self._series.get(metric)
            if s is not None and _release(s.refs, owner):
                del self._series[metric]
                s.family.series.pop(s.labels, None)

    def metric_op(self, metric: int, op: str, value: float = 0.0) -> float:
        """``increment``, ``set``, ``observe`` or ``value`` on a metric; the metric's value after it."""
        with self._lock:
            s = self._series.get(metric)
            if s is None:
                raise MetricError(FAMILY_DELETED, stub=True)
            kind = s.family.kind
            kind_name = f"TRITONSERVER_METRIC_KIND_{_KIND_NAMES[kind]}"
            if op == "value":
                if kind == HISTOGRAM:
                    raise MetricError(f"{kind_name} does not support Value")
                return s.value
            if op == "increment":
                if kind == HISTOGRAM:
                    raise MetricError(f"{kind_name} does not support Increment")
                if kind == COUNTER and value < 0:
                    raise MetricError(
                        f"{kind_name} can only be incremented monotonically by non-negative values."
                    )
                s.value += value
            elif op == "set":
                if kind != GAUGE:
                    raise MetricError(f"{kind_name} does not support Set")
                s.value = value
            elif op == "observe":
                if kind != HISTOGRAM:
                    raise MetricError(f"{kind_name} does not support Observe")
                i = 0
                while i < len(s.bounds) and value > s.bounds[i]:
                    i += 1
                s.counts[i] += 1
                s.value += value  # the sum
            else:
                raise MetricError(f"unknown metric operation '{op}'")
            return s.value

    # -- owners ------------------------------------------------------------------------------------
    def release_owner(self, owner: str) -> None:
        """``owner`` (a model version) unloaded: every reference it held goes, with what it kept alive."""
        with self._lock:
            for s in list(self._series.values()):
                if s.refs.pop(owner, None) is not None and not s.refs:
                    del self._series[s.id]
                    s.family.series.pop(s.labels, None)
            for fam in list(self._families.values()):
                if fam.refs.pop(owner, None) is not None and not fam.refs:
                    self._drop_family(fam)

    def family_names(self) -> list[str]:
        with self._lock:
            return list(self._families)

    # -- exposition --------------------------------------------------------------------------------
    def render(self) -> list[str]:
        """Every family in the Prometheus text format, as lines."""
        out: list[str] = []
        with self._lock:
            for fam in self._families.values():
                out.append(f"# HELP {fam.name} {_escape_help(fam.description)}")
                out.append(f"# TYPE {fam.name} {_TYPE_LINE[fam.kind]}")
                for s in fam.series.values():
                    labels = ",".join(f'{k}="{_escape_label(v)}"' for k, v in s.labels)
                    if fam.kind != HISTOGRAM:
                        out.append(
                            f"{fam.name}{{{labels}}} {format_value(s.value)}"
                            if labels
                            else f"{fam.name} {format_value(s.value)}"
                        )
                        continue
                    out.extend(histogram_lines(fam.name, labels, s.bounds, s.counts, s.value))
        return out


def histogram_lines(
    name: str, labels: str, bounds: tuple[float, ...], counts: list[int], total: float
) -> list[str]:
    """One histogram series in prometheus-cpp's order: count, sum, then the cumulative buckets
    (``counts`` per bound then +Inf, not cumulative; ``labels`` already written, or "")."""
    tail = f"{{{labels}}}" if labels else ""
    sep = "," if labels else ""
    out = [f"{name}_count{tail} {sum(counts)}", f"{name}_sum{tail} {format_value(total)}"]
    running = 0
    for bound, n in zip((*bounds, math.inf), counts, strict=True):
        running += n
        out.append(f'{name}_bucket{{{labels}{sep}le="{format_value(bound)}"}} {running}')
    return out
