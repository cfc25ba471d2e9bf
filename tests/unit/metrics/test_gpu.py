"""The GPU families (metrics/gpu.py): the reference's names, texts, types and label, the values a
poll reads and their units, a failing reading (logged once, the last value kept), the poll thread's
interval, /metrics and the status page with and without GPUs.

No GPU runs here: the NVML reads come from a fake reader (the GpuReader protocol). The real reader
is exercised on a GPU by tests/e2e/test_e2e_gpu_metrics.py."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from inferd.engine.server import ServerCore
from inferd.gpu.devices import Gpu
from inferd.metrics import gpu as gpu_metrics
from inferd.metrics.aggregate import MACHINE_FAMILIES, merge_metrics
from inferd.metrics.collector import render
from inferd.metrics.gpu import FAMILIES, GpuMetrics, for_server
from inferd.metrics.system import SystemGauges
from inferd.options import ServerOptions
from inferd.server_config import CoreConfig

GPU0 = Gpu(0, 0, "GPU-aaaaaaaa-1111-2222-3333-444444444444", "NVIDIA H100 80GB HBM3", 85_520_809_984, (9, 0))
GPU1 = Gpu(1, 3, "GPU-bbbbbbbb-1111-2222-3333-444444444444", "NVIDIA H100 80GB HBM3", 85_520_809_984, (9, 0))


class FakeReader:
    """NVML's answers per NVML index; an Exception value is raised, as NVMLError would be."""

    def __init__(self) -> None:
        self.calls = 0
        self.util: dict[int, float | Exception] = {0: 37.0, 3: 0.0}
        self.mem: dict[int, tuple[int, int] | Exception] = {0: (85_520_809_984, 1_048_576_000), 3: (1, 0)}
        self.usage: dict[int, float | Exception] = {0: 123.456, 3: 70.0}
        self.limit: dict[int, float | Exception] = {0: 700.0, 3: 700.0}
        self.mj: dict[int, float | Exception] = {0: 5_000_000.0, 3: 1.0}

    @staticmethod
    def _get(d: Mapping[int, object], index: int) -> object:
        v = d[index]
        if isinstance(v, Exception):
            raise v
        return v

    def utilization(self, index: int) -> float:
        self.calls += 1
        return float(self._get(self.util, index))  # type: ignore[arg-type]

    def memory(self, index: int) -> tuple[int, int]:
        return self._get(self.mem, index)  # type: ignore[return-value]

    def power_usage(self, index: int) -> float:
        return float(self._get(self.usage, index))  # type: ignore[arg-type]

    def power_limit(self, index: int) -> float:
        return float(self._get(self.limit, index))  # type: ignore[arg-type]

    def energy(self, index: int) -> float:
        return float(self._get(self.mj, index))  # type: ignore[arg-type]


def _samples(lines: list[str]) -> dict[tuple[str, str], float]:
    """(family, gpu_uuid) -> value, through the real Prometheus parser."""
    out = {}
    for fam in text_string_to_metric_families("\n".join(lines) + "\n"):
        for s in fam.samples:
            out[(fam.name, s.labels["gpu_uuid"])] = s.value
    return out


def test_the_references_families_texts_types_and_label() -> None:
    m = GpuMetrics([GPU0], FakeReader(), 2.0)
    m.poll()
    lines = m.lines()
    heads = [line for line in lines if line.startswith("#")]
    assert heads == [
        "# HELP nv_gpu_utilization GPU utilization rate [0.0 - 1.0)",
        "# TYPE nv_gpu_utilization gauge",
        "# HELP nv_gpu_memory_total_bytes GPU total memory, in bytes",
        "# TYPE nv_gpu_memory_total_bytes gauge",
        "# HELP nv_gpu_memory_used_bytes GPU used memory, in bytes",
        "# TYPE nv_gpu_memory_used_bytes gauge",
        "# HELP nv_gpu_power_usage GPU power usage in watts",
        "# TYPE nv_gpu_power_usage gauge",
        "# HELP nv_gpu_power_limit GPU power management limit in watts",
        "# TYPE nv_gpu_power_limit gauge",
        "# HELP nv_energy_consumption GPU energy consumption in joules since the Triton Server started",
        "# TYPE nv_energy_consumption counter",
    ]
    assert f'nv_gpu_utilization{{gpu_uuid="{GPU0.uuid}"}} 0.37' in lines
    assert f'nv_gpu_memory_total_bytes{{gpu_uuid="{GPU0.uuid}"}} 85520809984' in lines
    assert [name for name, _, _ in FAMILIES] == [h.split()[2] for h in heads[::2]]


def test_values_in_the_references_units_one_series_per_gpu_in_cuda_order() -> None:
    reader = FakeReader()
    m = GpuMetrics([GPU0, GPU1], reader, 2.0)
    m.poll()
    s = _samples(m.lines())
    assert s[("nv_gpu_utilization", GPU0.uuid)] == 0.37  # NVML's percent x 0.01
    assert s[("nv_gpu_memory_used_bytes", GPU0.uuid)] == 1_048_576_000
    assert s[("nv_gpu_power_usage", GPU0.uuid)] == 123.456  # watts
    assert s[("nv_gpu_power_limit", GPU1.uuid)] == 700.0
    # energy counts from the first poll, in joules (NVML's millijoules x 0.001)
    assert s[("nv_energy_consumption", GPU0.uuid)] == 0.0
    reader.mj[0] = 5_250_000.0
    m.poll()
    reader.mj[0] = 5_500_500.0
    m.poll()
    assert _samples(m.lines())[("nv_energy_consumption", GPU0.uuid)] == 500.5
    utilization = [line for line in m.lines() if line.startswith("nv_gpu_utilization{")]
    assert [line.split('"')[1] for line in utilization] == [GPU0.uuid, GPU1.uuid]  # CUDA order


def test_the_energy_counter_never_goes_down() -> None:
    """A driver reloaded under the server starts NVML's count again: the counter keeps its total."""
    reader = FakeReader()
    m = GpuMetrics([GPU0], reader, 2.0)
    m.poll()
    reader.mj[0] = 6_000_000.0
    m.poll()
    reader.mj[0] = 10.0
    m.poll()
    reader.mj[0] = 2010.0
    m.poll()
    assert _samples(m.lines())[("nv_energy_consumption", GPU0.uuid)] == 1002.0


def test_a_failing_reading_is_logged_once_and_keeps_its_last_value(caplog: pytest.LogCaptureFixture) -> None:
    reader = FakeReader()
    m = GpuMetrics([GPU0, GPU1], reader, 2.0)
    m.poll()
    reader.usage[0] = RuntimeError("Not Supported")
    reader.util[0] = 50.0
    with caplog.at_level(logging.WARNING, logger="inferd.metrics"):
        for _ in range(3):
            m.poll()
    s = _samples(m.lines())
    assert s[("nv_gpu_power_usage", GPU0.uuid)] == 123.456  # the last value read
    assert s[("nv_gpu_utilization", GPU0.uuid)] == 0.5  # the others go on
    assert s[("nv_gpu_power_usage", GPU1.uuid)] == 70.0
    warnings = [r.getMessage() for r in caplog.records]
    assert warnings == [
        f"GPU metrics: unable to get the power usage of GPU 0 ({GPU0.uuid}): Not Supported; "
        "its value stays the last one read"
    ]


def test_a_reading_that_never_worked_stays_0_and_memory_total_starts_from_discovery() -> None:
    reader = FakeReader()
    reader.limit[0] = RuntimeError("Insufficient Permissions")
    reader.mem[0] = RuntimeError("Unknown Error")
    m = GpuMetrics([GPU0], reader, 2.0)
    m.poll()
    s = _samples(m.lines())
    assert s[("nv_gpu_power_limit", GPU0.uuid)] == 0.0
    assert s[("nv_gpu_memory_total_bytes", GPU0.uuid)] == GPU0.memory_total_bytes


def test_the_poll_thread_reads_at_once_then_every_half_interval() -> None:
    reader = FakeReader()
    m = GpuMetrics([GPU0], reader, 0.2)
    m.start()
    try:
        assert m.polling
        deadline = time.monotonic() + 5
        while reader.calls < 1 and time.monotonic() < deadline:
            time.sleep(0.005)
        first = time.monotonic()
        while reader.calls < 5 and time.monotonic() < deadline:
            time.sleep(0.005)
        took = time.monotonic() - first
    finally:
        m.stop()
    assert reader.calls >= 5
    assert 0.3 <= took < 2.0  # four more polls at 0.1 s each
    assert not m.polling
    assert "inferd-gpu-metrics" not in [t.name for t in threading.enumerate()]


def test_a_poll_that_raises_does_not_end_the_thread(caplog: pytest.LogCaptureFixture) -> None:
    reader = FakeReader()
    m = GpuMetrics([GPU0], reader, 0.02)
    polls = 0

    def broken() -> None:
        nonlocal polls
        polls += 1
        raise ValueError("a bug")

    m.poll = broken  # type: ignore[method-assign]
    with caplog.at_level(logging.ERROR, logger="inferd.metrics"):
        m.start()
        deadline = time.monotonic() + 5
        while polls < 3 and time.monotonic() < deadline:
            time.sleep(0.005)
        m.stop()
    assert polls >= 3


def test_no_gpu_no_metrics_object_and_no_thread() -> None:
    assert for_server([], 2000, poll=True) is None
    assert GpuMetrics([], FakeReader(), 2.0).lines() == []


def test_without_polling_the_gpus_are_described_but_export_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """--allow-gpu-metrics=false (or --allow-metrics=false): no NVML reader, no thread, no family."""
    monkeypatch.setattr(gpu_metrics, "NvmlReader", FakeReader)
    off = for_server([GPU0], 2000, poll=False)
    assert off is not None and not off.polling and off.reader is None
    assert off.status() == [
        {
            "id": 0,
            "uuid": GPU0.uuid,
            "name": "NVIDIA H100 80GB HBM3",
            "compute_capability": "9.0",
            "memory_total_bytes": GPU0.memory_total_bytes,
        }
    ]
    on = for_server([GPU0], 2000, poll=True)
    assert on is not None
    try:
        assert on.polling
    finally:
        on.stop()


def test_nvml_that_does_not_open_leaves_the_families_out(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def no_nvml() -> None:
        raise RuntimeError("NVML Shared Library Not Found")

    monkeypatch.setattr(gpu_metrics, "NvmlReader", no_nvml)
    with caplog.at_level(logging.WARNING, logger="inferd.metrics"):
        m = for_server([GPU0], 2000, poll=True)
    assert m is not None and not m.polling
    assert "GPU metrics will not be available: NVML Shared Library Not Found" in caplog.text


def test_status_rows_carry_the_last_values_while_polled() -> None:
    m = GpuMetrics([GPU0], FakeReader(), 60.0)
    m.start()
    try:
        deadline = time.monotonic() + 5
        while not m.values()[0][1].read and time.monotonic() < deadline:
            time.sleep(0.005)
        row = m.status()[0]
    finally:
        m.stop()
    assert row["utilization"] == 0.37 and row["memory_used_bytes"] == 1_048_576_000
    assert row["power_usage_w"] == 123.5 and row["power_limit_w"] == 700.0 and row["energy_j"] == 0.0


def test_system_lines_put_the_gpu_families_where_the_reference_registers_them() -> None:
    m = GpuMetrics([GPU0], FakeReader(), 2.0)
    m.poll()
    lines = SystemGauges().lines(0.0, gpu=m.lines())
    names = [line.split()[2] for line in lines if line.startswith("# TYPE")]
    assert names == [
        "nv_pinned_memory_pool_total_bytes",
        "nv_pinned_memory_pool_used_bytes",
        *(name for name, _, _ in FAMILIES),
        "nv_cpu_utilization",
        "nv_cpu_memory_total_bytes",
        "nv_cpu_memory_used_bytes",
    ]


def _core(tmp_path: Path, **options: object) -> ServerCore:
    return ServerCore(CoreConfig.from_options(ServerOptions(model_repository=[tmp_path], **options)))  # type: ignore[arg-type]


def test_metrics_without_gpus_have_no_gpu_family(tmp_path: Path) -> None:
    """As the reference's CPU build: not one nv_gpu_* or nv_energy_* line."""
    text = render(_core(tmp_path)).decode()
    assert "nv_gpu_" not in text and "nv_energy_" not in text
    assert "nv_cpu_utilization" in text


def test_metrics_with_a_polled_gpu(tmp_path: Path) -> None:
    core = _core(tmp_path)
    m = core.gpu_metrics = GpuMetrics([GPU0], FakeReader(), 60.0)
    assert "nv_gpu_" not in render(core).decode()  # not polled: nothing read, nothing written
    m.start()
    try:
        text = render(core).decode()
    finally:
        m.stop()
    families = {f.name for f in text_string_to_metric_families(text)}
    assert families >= {"nv_gpu_utilization", "nv_gpu_power_limit", "nv_energy_consumption"}
    assert text.index("nv_pinned_memory_pool_used_bytes") < text.index("nv_gpu_utilization")
    assert text.index("nv_energy_consumption") < text.index("nv_cpu_utilization")


def test_status_page_lists_gpus_only_where_there_are_some(tmp_path: Path) -> None:
    core = _core(tmp_path)
    doc = core.status()
    assert doc is not None and "gpus" not in doc
    core.gpu_metrics = GpuMetrics([GPU0], None, 2.0)
    doc = core.status()
    assert doc is not None and [g["uuid"] for g in doc["gpus"]] == [GPU0.uuid]


def test_workers_count_the_machines_gpu_families_once() -> None:
    """--workers: every process polls the same GPUs; the whole server's text has them once."""
    assert {name for name, _, _ in FAMILIES} <= MACHINE_FAMILIES
    m = GpuMetrics([GPU0], FakeReader(), 2.0)
    m.poll()
    text = "\n".join(m.lines()) + "\n"
    merged = merge_metrics([text, text], once=MACHINE_FAMILIES)
    assert _samples(merged.splitlines())[("nv_gpu_memory_used_bytes", GPU0.uuid)] == 1_048_576_000


def test_allow_gpu_metrics_is_an_option_defaulting_to_true() -> None:
    assert ServerOptions().allow_gpu_metrics is True
