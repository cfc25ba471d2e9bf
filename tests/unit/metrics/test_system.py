"""The machine's gauges: /proc parsing, the sampling interval, the reference's families."""

from __future__ import annotations

from inferd.metrics.system import SystemGauges, cpu_times, memory


def test_cpu_times_count_idle_and_iowait_as_not_busy() -> None:
    busy, total = cpu_times("cpu  10 2 8 70 10 0 0 0 0 0\ncpu0 1 1 1 1 1 0 0 0\n")
    assert (busy, total) == (20, 100)


def test_memory_used_is_total_less_available() -> None:
    text = "MemTotal:       1000 kB\nMemFree:         100 kB\nMemAvailable:    400 kB\n"
    assert memory(text) == (1000 * 1024, 600 * 1024)


def test_gauges_sample_at_most_once_per_interval() -> None:
    g = SystemGauges()
    g.refresh(10.0, now=100.0)
    total = g.mem_total
    assert total > 0 and 0 < g.mem_used <= total
    g.mem_total = -1
    g.refresh(10.0, now=105.0)  # within the interval: the last sample stands
    assert g.mem_total == -1
    g.refresh(10.0, now=111.0)
    assert g.mem_total == total and 0.0 <= g.utilization <= 1.0


def test_the_references_families_in_its_order() -> None:
    lines = SystemGauges().lines(0.0)
    names = [line.split()[2] for line in lines if line.startswith("# TYPE")]
    assert names == [
        "nv_pinned_memory_pool_total_bytes",
        "nv_pinned_memory_pool_used_bytes",
        "nv_cpu_utilization",
        "nv_cpu_memory_total_bytes",
        "nv_cpu_memory_used_bytes",
    ]
    assert "nv_pinned_memory_pool_total_bytes 0" in lines


def test_without_cpu_metrics_only_the_pinned_pool_is_exported() -> None:
    """--allow-cpu-metrics=false, as the reference: its pinned memory pool's gauges stay."""
    lines = SystemGauges().lines(0.0, cpu=False)
    names = [line.split()[2] for line in lines if line.startswith("# TYPE")]
    assert names == ["nv_pinned_memory_pool_total_bytes", "nv_pinned_memory_pool_used_bytes"]
