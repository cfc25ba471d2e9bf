"""The application's statistics and metrics summed from the replicas' (no Ray needed)."""

from __future__ import annotations

from inferd.metrics.aggregate import HIGHEST_FAMILIES, MACHINE_FAMILIES, merge_metrics, merge_statistics


def _doc(count: int, last: int, batch: int = 1) -> dict[str, object]:
    return {
        "model_stats": [
            {
                "name": "add_sub",
                "version": "1",
                "last_inference": last,
                "inference_count": count,
                "execution_count": count,
                "inference_stats": {"success": {"count": count, "ns": 10 * count}},
                "batch_stats": [{"batch_size": batch, "compute_infer": {"count": count, "ns": count}}],
                "memory_usage": [],
            }
        ]
    }


def test_statistics_sum_counts_and_keep_the_latest_inference() -> None:
    merged = merge_statistics([_doc(3, 100), _doc(4, 250), _doc(1, 50, batch=2)])
    (one,) = merged["model_stats"]
    assert one["inference_count"] == 8 and one["execution_count"] == 8
    assert one["inference_stats"]["success"] == {"count": 8, "ns": 80}
    assert one["last_inference"] == 250
    by_size = {b["batch_size"]: b["compute_infer"]["count"] for b in one["batch_stats"]}
    assert by_size == {1: 7, 2: 1}
    assert one["name"] == "add_sub" and one["version"] == "1"


def test_statistics_of_models_only_some_replicas_serve() -> None:
    other = {"model_stats": [{"name": "mul", "version": "2", "inference_count": 5}]}
    merged = merge_statistics([_doc(1, 1), other])
    assert [(m["name"], m["inference_count"]) for m in merged["model_stats"]] == [("add_sub", 1), ("mul", 5)]
    assert merge_statistics([]) == {"model_stats": []}


def test_metrics_sum_series_and_drop_summary_quantiles() -> None:
    a = (
        "# HELP nv_inference_count n\n# TYPE nv_inference_count counter\n"
        'nv_inference_count{model="m",version="1"} 3\n'
        "# HELP nv_q q\n# TYPE nv_q summary\n"
        'nv_q{model="m",quantile="0.5"} 7\nnv_q_sum{model="m"} 10\nnv_q_count{model="m"} 2\n'
    )
    b = (
        "# HELP nv_inference_count n\n# TYPE nv_inference_count counter\n"
        'nv_inference_count{model="m",version="1"} 4\nnv_inference_count{model="n",version="1"} 1\n'
        "# HELP nv_q q\n# TYPE nv_q summary\n"
        'nv_q{model="m",quantile="0.5"} 9\nnv_q_sum{model="m"} 1.5\nnv_q_count{model="m"} 1\n'
    )
    assert merge_metrics([a, b]).splitlines() == [
        "# HELP nv_inference_count n",
        "# TYPE nv_inference_count counter",
        'nv_inference_count{model="m",version="1"} 7',
        'nv_inference_count{model="n",version="1"} 1',
        "# HELP nv_q q",
        "# TYPE nv_q summary",
        'nv_q_sum{model="m"} 11.5',
        'nv_q_count{model="m"} 3',
    ]


def test_machine_families_once_and_ratios_at_their_highest() -> None:
    a = (
        "# TYPE nv_cpu_memory_total_bytes gauge\nnv_cpu_memory_total_bytes 100\n"
        "# TYPE inferd_queue_time_per_request_us gauge\n"
        'inferd_queue_time_per_request_us{model="m",version="1"} 30\n'
        '# TYPE nv_inference_count counter\nnv_inference_count{model="m",version="1"} 2\n'
    )
    b = a.replace("} 30", "} 70").replace("} 2", "} 5")
    c = a.replace("} 30", "} 10")
    merged = merge_metrics([a, b, c], once=MACHINE_FAMILIES, highest=HIGHEST_FAMILIES).splitlines()
    assert "nv_cpu_memory_total_bytes 100" in merged
    assert 'inferd_queue_time_per_request_us{model="m",version="1"} 70' in merged
    assert 'nv_inference_count{model="m",version="1"} 9' in merged
    # without the sets, every family adds up (Ray Serve's replicas may be on several machines)
    assert "nv_cpu_memory_total_bytes 300" in merge_metrics([a, b, c]).splitlines()
