"""Triton's ``nv_inference_*`` metric families, read from ModelStats when Prometheus scrapes.

Nothing is counted twice: the values are the statistics extension's own numbers, read under its
lock at scrape time, per server. The families Python models define (``pb_utils.MetricFamily``) follow, from the server's one
``CustomMetricRegistry`` (``custom.py``). The text is written here rather than by prometheus_client,
whose writer renames every counter ``<name>_total``: Triton's counters have no suffix, and
dashboards built on Triton query its names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from inferd.core import histogram
from inferd.core.summary import CACHE_KINDS, KINDS
from inferd.metrics import cache as cache_metrics
from inferd.metrics.custom import CustomMetricRegistry, histogram_lines
from inferd.metrics.scaling import FAMILY as SCALING
from inferd.metrics.scaling import queue_time_per_request
from inferd.metrics.system import SYSTEM
from inferd.repository.scan import key_namespace

if TYPE_CHECKING:
    from inferd.engine.model import Model
    from inferd.engine.server import ServerCore

#: Triton's counter families (name, help), in its order; the failure family follows the first
_COUNTERS = (
    ("nv_inference_request_success", "Number of successful inference requests, all batch sizes"),
    ("nv_inference_count", "Number of inferences performed (does not include cached requests)"),
    ("nv_inference_exec_count", "Number of model executions performed (does not include cached requests)"),
    (
        "nv_inference_request_duration_us",
        "Cumulative inference request duration in microseconds (includes cached requests)",
    ),
    (
        "nv_inference_queue_duration_us",
        "Cumulative inference queuing duration in microseconds (includes cached requests)",
    ),
    (
        "nv_inference_compute_input_duration_us",
        "Cumulative compute input duration in microseconds (does not include cached requests)",
    ),
    (
        "nv_inference_compute_infer_duration_us",
        "Cumulative compute inference duration in microseconds (does not include cached requests)",
    ),
    (
        "nv_inference_compute_output_duration_us",
        "Cumulative inference compute output duration in microseconds (does not include cached requests)",
    ),
)
_FAILURE = ("nv_inference_request_failure", "Number of failed inference requests, all batch sizes")
_PENDING = (
    "nv_inference_pending_request_count",
    "Instantaneous number of pending requests awaiting execution per-model.",
)
#: the counters ``--metrics-config counter_latencies=false`` turns off
_LATENCY_COUNTERS = frozenset(f for f, _ in _COUNTERS[3:])
#: the summaries of ``summary_latencies=true``, in core.summary's KINDS then CACHE_KINDS order, with the reference's help
_SUMMARIES = (
    ("nv_inference_request_summary_us", "Summary of inference request duration in microseconds (includes cached requests)"),
    ("nv_inference_queue_summary_us", "Summary of inference queuing duration in microseconds (includes cached requests)"),
    ("nv_inference_compute_input_summary_us", "Cumulative compute input duration in microseconds (does not include cached requests)"),
    ("nv_inference_compute_infer_summary_us", "Cumulative compute inference duration in microseconds (does not include cached requests)"),
    ("nv_inference_compute_output_summary_us", "Cumulative inference compute output duration in microseconds (does not include cached requests)"),
    ("nv_cache_hit_summary_per_model", "Summary of cache hit counts/durations per model, in microseconds."),
    ("nv_cache_miss_summary_per_model", "Summary of cache miss counts/durations per model, in microseconds."),
)  # fmt: skip
#: newer reference releases' gauge (core r24.12 on): how long the version took to load
_LOAD_TIME = ("nv_model_load_duration_secs", "Model load time in seconds")
_FAILURE_REASONS = ("OTHER", "REJECTED", "CANCELED", "BACKEND")


def _values(stats: Any) -> dict[str, int]:
    doc = stats.to_json("", "")
    inf = doc["inference_stats"]
    success, fail = inf["success"], inf["fail"]
    return {
        "nv_inference_request_success": success["count"],
        "nv_inference_count": doc["inference_count"],
        "nv_inference_exec_count": doc["execution_count"],
        "nv_inference_request_duration_us": (success["ns"] + fail["ns"]) // 1000,
        "nv_inference_queue_duration_us": inf["queue"]["ns"] // 1000,
        "nv_inference_compute_input_duration_us": inf["compute_input"]["ns"] // 1000,
        "nv_inference_compute_infer_duration_us": inf["compute_infer"]["ns"] // 1000,
        "nv_inference_compute_output_duration_us": inf["compute_output"]["ns"] // 1000,
    }


def _summaries(out: list[str], family: Any, rows: list[tuple[str, str, Any, dict[str, int]]]) -> None:
    """The latency summaries (``--metrics-config summary_latencies=true``), as the reference writes
    them: a model whose responses are cached has no request summary and has the cache ones."""
    for kind, (fam, doc) in zip((*KINDS, *CACHE_KINDS), _SUMMARIES, strict=True):
        lines: list[str] = []
        for name, version, model, _ in rows:
            s = model.stats.summaries
            if s is None or not s.has(kind):
                continue
            count, total, quantiles = s.snapshot(kind)
            labels = f'model="{name}",version="{version}"'
            lines.append(f"{fam}_count{{{labels}}} {count}")
            lines.append(f"{fam}_sum{{{labels}}} {total:g}")
            for q, value in quantiles:
                lines.append(f'{fam}{{{labels},quantile="{q:g}"}} {value:g}')
        if lines:  # prometheus-cpp writes no family without a series
            family(fam, doc, "summary")
            out.extend(lines)


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _model_label(model: Model) -> str:
    """The value of a series' ``model`` label, written inside ``model="..."``. Under
    ``--model-namespacing`` the reference labels every model's series with its namespace too
    (``model="m",namespace="/models/a",version="1"``): that label rides after the model's, which
    keeps the labels in the reference's (alphabetical) order in every family."""
    if model.key == model.name:
        return _label(model.name)
    return f'{_label(model.name)}",namespace="{_label(key_namespace(model.key))}'


def render(server: ServerCore) -> bytes:
    """The Prometheus text exposition (format 0.0.4) of ``server``'s READY models."""
    rows: list[tuple[str, str, Any, dict[str, int]]] = []  # (name, version, model, values)
    for _key, versions in sorted(server.registry.models.items()):
        for v, model in sorted(versions.items()):
            if model.ready:
                rows.append((_model_label(model), str(v), model, _values(model.stats)))
    out: list[str] = []

    def family(name: str, doc: str, kind: str) -> None:
        out.append(f"# HELP {name} {doc}")
        out.append(f"# TYPE {name} {kind}")

    config = server.config
    counters = config.metrics.counter_latencies
    for i, (fam, doc) in enumerate(_COUNTERS):
        if not counters and fam in _LATENCY_COUNTERS:
            continue
        family(fam, doc, "counter")
        for name, version, _model, values in rows:
            out.append(f'{fam}{{model="{name}",version="{version}"}} {values[fam]}')
        if i == 0:
            family(*_FAILURE, "counter")
            for name, version, model, _ in rows:
                reasons = model.stats.fail_reasons
                for reason in _FAILURE_REASONS:
                    out.append(
                        f'{_FAILURE[0]}{{model="{name}",reason="{reason}",version="{version}"}} '
                        f"{reasons.get(reason, 0)}"
                    )
    if counters:  # the response cache's, after the latency counters (metrics/cache.py)
        out.extend(cache_metrics.model_lines(rows))
    family(*_PENDING, "gauge")
    for name, version, model, _ in rows:
        sched = model.scheduler
        queued = 0
        # an ensemble queues nothing itself: its requests wait in its steps' queues, where they are
        # counted (the reference reports 0 for the ensemble)
        if sched is not None and model.config.platform != "ensemble":
            stats_fn = getattr(sched, "stats", None)
            queued = stats_fn()["queued"] if stats_fn is not None else sched.inflight()
        out.append(f'{_PENDING[0]}{{model="{name}",version="{version}"}} {queued}')
    out.extend(cache_metrics.server_lines(server.response_cache))
    if config.metrics.histogram_latencies:  # before the summaries, as the reference registers them
        lines: list[str] = []
        for name, version, model, _ in rows:
            h = model.stats.first_response
            if h is not None:
                _count, total, counts = h.snapshot()
                labels = f'model="{name}",version="{version}"'
                lines += histogram_lines(histogram.FAMILY, labels, h.bounds, counts, total)
        if lines:  # as the summaries: no family without a series
            family(histogram.FAMILY, histogram.HELP, "histogram")
            out.extend(lines)
    if config.metrics.summary_latencies:
        _summaries(out, family, rows)
    family(*_LOAD_TIME, "gauge")
    for name, version, model, _ in rows:
        out.append(f'{_LOAD_TIME[0]}{{model="{name}",version="{version}"}} {model.load_seconds:g}')
    family(*SCALING, "gauge")
    for name, version, model, _ in rows:
        value = queue_time_per_request(model.stats)
        out.append(f'{SCALING[0]}{{model="{name}",version="{version}"}} {value:.1f}')
    _process_events(out, family, server)
    if server.budget is not None:  # --model-memory-budget (engine/on_demand.py)
        out.extend(server.budget.metric_lines())
    if server.unsent is not None:  # --max-unsent-bytes (core/unsent.py)
        out.extend(server.unsent.metric_lines())
    gpu = server.gpu_metrics.lines() if server.gpu_metrics is not None and server.gpu_metrics.polling else []
    out.extend(SYSTEM.lines(config.metrics_interval_ms / 1000, cpu=config.cpu_metrics, gpu=gpu))
    custom = server.custom_metrics
    if isinstance(custom, CustomMetricRegistry):  # the families models defined, after Triton's
        out.extend(custom.render())
    return ("\n".join(out) + "\n").encode()


#: beyond the reference: what happened to the worker processes of Python model instances
_PROCESS_FAMILIES = (
    (
        "exited",
        "inferd_instance_process_exits",
        "Worker processes of model instances that exited unexpectedly",
    ),
    ("restarted", "inferd_instance_process_restarts", "Worker processes of model instances started again"),
)


def _process_events(out: list[str], family: Any, server: ServerCore) -> None:
    events = dict(server.worker_processes.events)
    models = sorted({(m, v) for m, v, _ in events})
    for event, fam, doc in _PROCESS_FAMILIES:
        family(fam, doc, "counter")
        for m, v in models:
            out.append(f'{fam}{{model="{_label(m)}",version="{v}"}} {events.get((m, v, event), 0)}')
