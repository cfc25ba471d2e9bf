"""The whole server's statistics and metrics from its parts' (Ray Serve replicas, ``--workers``
processes): pure merging.

Statistics (Triton's statistics extension, one document per part) are summed per (model,
version): counts and durations add up, ``last_inference`` is the latest, ``batch_stats`` add up per
batch size. Metrics (Prometheus text) are summed per series; a summary's quantiles cannot be summed
(the quantile of a union is not a function of the parts' quantiles), so they are left out of the
sum and only their ``_sum`` and ``_count`` remain. Families that describe the machine rather than
the part (``MACHINE_FAMILIES``: the same figure in every process of one machine) are taken from the
first part that has them; ratios and averages (``HIGHEST_FAMILIES``) take the highest part's.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

#: fields that are a point in time, not an amount: the latest wins
_LATEST = frozenset({"last_inference"})
#: list fields whose entries are keyed by one of their fields (merged entry by entry)
_KEYED_LISTS: dict[str, str | tuple[str, ...]] = {
    "batch_stats": "batch_size",
    "model_stats": ("name", "version"),
}
#: fields that name what an entry counts (a batch size): never summed
_IDENTITY = frozenset({"batch_size", "name", "version"})
_QUANTILE = re.compile(r'[{,]quantile="')
#: one machine's figures: every process on it reports the same (summing would count them N times)
MACHINE_FAMILIES = frozenset(
    {
        "nv_cpu_utilization",
        "nv_cpu_memory_total_bytes",
        "nv_cpu_memory_used_bytes",
        "nv_gpu_utilization",
        "nv_gpu_memory_total_bytes",
        "nv_gpu_memory_used_bytes",
        "nv_gpu_power_usage",
        "nv_gpu_power_limit",
        # each process counts from its own start: the first part's count stands for the machine's
        "nv_energy_consumption",
    }
)
#: ratios, averages and durations of one event in each part, which do not add up: the highest
#: part's is kept (the busiest process's queue time, the slowest load)
HIGHEST_FAMILIES = frozenset(
    {"nv_cache_util", "inferd_queue_time_per_request_us", "nv_model_load_duration_secs"}
)


def merge_statistics(docs: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """One statistics document summing ``docs`` (each ``{"model_stats": [...]}``)."""
    merged: dict[str, Any] = {"model_stats": []}
    for doc in docs:
        merged = _merge(merged, doc, "")
    return merged


def _key(entry: dict[str, Any], field: str | tuple[str, ...]) -> Any:
    return tuple(entry.get(f) for f in field) if isinstance(field, tuple) else entry.get(field)


def _merge(a: Any, b: Any, name: str) -> Any:
    if isinstance(a, dict) and isinstance(b, dict):
        out = dict(a)
        for k, v in b.items():
            if k in _IDENTITY:
                out.setdefault(k, v)
            else:
                out[k] = _merge(out[k], v, k) if k in out else v
        return out
    if isinstance(a, list) and isinstance(b, list):
        field = _KEYED_LISTS.get(name)
        if field is None:
            return a or b  # e.g. memory_usage: the same model's, whichever replica tells
        entries = {_key(e, field): e for e in a}
        for e in b:
            k = _key(e, field)
            entries[k] = _merge(entries[k], e, "") if k in entries else e
        return list(entries.values())
    if isinstance(a, bool) or isinstance(b, bool) or not isinstance(a, int | float):
        return a  # names, versions: the same on every replica
    if not isinstance(b, int | float):
        return a
    return max(a, b) if name in _LATEST else a + b


def merge_metrics(
    texts: Iterable[str],
    once: frozenset[str] = frozenset(),
    highest: frozenset[str] = frozenset(),
) -> str:
    """Prometheus text exposition summing the series of ``texts``, family by family, in the order
    they first appear; summary quantiles are dropped (see the module's note). A family in ``once``
    keeps the first value of each series, one in ``highest`` its highest."""
    families: dict[str, list[str]] = {}  # family -> its HELP/TYPE lines
    series: dict[str, dict[str, float]] = {}  # family -> series (name and labels) -> value
    for text in texts:
        family = ""
        for line in text.splitlines():
            if not line:
                continue
            if line.startswith("#"):
                parts = line.split(" ", 3)
                if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                    family = parts[2]
                    head = families.setdefault(family, [])
                    if line not in head:
                        head.append(line)
                    series.setdefault(family, {})
                continue
            if _QUANTILE.search(line):
                continue
            key, _, value = line.rpartition(" ")
            try:
                number = float(value)
            except ValueError:
                continue
            values = series.setdefault(family, {})
            families.setdefault(family, [])
            seen = values.get(key)
            if seen is None:
                values[key] = number
            elif family in highest:
                values[key] = max(seen, number)
            elif family not in once:
                values[key] = seen + number
    out: list[str] = []
    for family, head in families.items():
        out.extend(head)
        out.extend(f"{key} {_number(v)}" for key, v in series.get(family, {}).items())
    return "\n".join(out) + "\n" if out else ""


def _number(v: float) -> str:
    return str(int(v)) if v.is_integer() and abs(v) < 2**53 else repr(v)
