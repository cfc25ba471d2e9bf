"""The response cache's metric families (engine/cache.py), as Triton 2.51 writes them.

Per model, for every model whose config enables ``response_cache`` (with or without ``--cache-config``:
the reference makes them from the config alone) and while latency counters are on: hits, misses and
their durations, read from ModelStats at scrape time. For the server, while the cache is on: the
local cache's gauges (the reference updates them once per interval; here they are read at scrape time).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from inferd.engine.cache import ResponseCache

#: (family, help, the inference_stats entry, its count or its duration in microseconds)
PER_MODEL = (
    ("nv_cache_num_hits_per_model", "Number of cache hits per model", "cache_hit", "count"),
    (
        "nv_cache_hit_duration_per_model",
        "Total cache hit duration per model, in microseconds",
        "cache_hit",
        "ns",
    ),
    ("nv_cache_num_misses_per_model", "Number of cache misses per model", "cache_miss", "count"),
    (
        "nv_cache_miss_duration_per_model",
        "Total cache miss (insert+lookup) duration per model, in microseconds",
        "cache_miss",
        "ns",
    ),
)
SERVER = (
    ("nv_cache_util", "Cache utilization [0.0 - 1.0]"),
    ("nv_cache_num_entries", "Number of responses stored in response cache"),
    ("nv_cache_num_hits", "Number of cache hits in response cache"),
    ("nv_cache_num_misses", "Number of cache misses in response cache"),
    ("nv_cache_num_lookups", "Number of cache lookups in response cache"),
    ("nv_cache_num_evictions", "Number of cache evictions in response cache"),
    ("nv_cache_lookup_duration", "Total cache lookup duration (hit and miss), in microseconds"),
    ("nv_cache_insertion_duration", "Total cache insertion duration, in microseconds"),
)


def model_lines(rows: list[tuple[str, str, Any, Any]]) -> list[str]:
    """The per-model families of the rows (name, version, model, ...) whose model enables the cache."""
    cached = [
        (name, version, model) for name, version, model, *_ in rows if model.config.response_cache.enable
    ]
    if not cached:
        return []
    stats = {
        (name, version): model.stats.to_json(name, version)["inference_stats"]
        for name, version, model in cached
    }
    out: list[str] = []
    for family, doc, entry, part in PER_MODEL:
        out.append(f"# HELP {family} {doc}")
        out.append(f"# TYPE {family} counter")
        for name, version, _ in cached:
            value = stats[name, version][entry][part]
            out.append(
                f'{family}{{model="{name}",version="{version}"}} {value // 1000 if part == "ns" else value}'
            )
    return out


def server_lines(cache: ResponseCache | None) -> list[str]:
    """The server's cache gauges, when the cache is on."""
    if cache is None:
        return []
    with cache._lock:
        values = (
            f"{cache.used / cache.size:g}",
            len(cache),
            cache.hits,
            cache.misses,
            cache.hits + cache.misses,
            cache.evictions,
            cache.lookup_ns // 1000,
            cache.insert_ns // 1000,
        )
    out: list[str] = []
    for (family, doc), value in zip(SERVER, values, strict=True):
        out += [f"# HELP {family} {doc}", f"# TYPE {family} gauge", f"{family} {value}"]
    return out
