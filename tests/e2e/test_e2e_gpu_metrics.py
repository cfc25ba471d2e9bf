"""The GPU families on a real GPU (issue 27): a real ``inferd serve`` exports nv_gpu_utilization,
nv_gpu_memory_total_bytes, nv_gpu_memory_used_bytes, nv_gpu_power_usage, nv_gpu_power_limit and
nv_energy_consumption for every GPU it sees, labelled with its uuid; nv_gpu_memory_used_bytes moves
when another process takes GPU memory; the status page lists the GPU; --allow-gpu-metrics=false
leaves the families out.

Runs where NVML finds a GPU (``pytest -m gpu``, scripts/gpu_check.sh on a lent GPU machine); skipped
with the reason elsewhere. Without a GPU, tests/unit/metrics/test_gpu.py covers the same logic with
a fake reader, and tests/e2e/test_e2e_metrics.py that no GPU family appears.
"""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import InferdProcess, serving
from prometheus_client.parser import text_string_to_metric_families

from inferd.gpu.devices import machine_gpus, usable_gpus
from waiting import wait_until

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not usable_gpus(), reason="no GPU found through NVML (nvidia-ml-py and a driver)"),
]

FAMILIES = {
    "nv_gpu_utilization": "gauge",
    "nv_gpu_memory_total_bytes": "gauge",
    "nv_gpu_memory_used_bytes": "gauge",
    "nv_gpu_power_usage": "gauge",
    "nv_gpu_power_limit": "gauge",
    "nv_energy_consumption": "counter",
}
#: what the other process takes on GPU 0
ALLOCATION = 2 << 30
INTERVAL_MS = 200


def _get(port: int, path: str) -> str:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        body = r.read().decode()
        assert r.status == 200, body
        return body
    finally:
        conn.close()


def _gpu_samples(server: InferdProcess) -> dict[str, dict[str, float]]:
    """family -> gpu_uuid -> value, for the GPU families of one scrape."""
    out: dict[str, dict[str, float]] = {}
    for fam in text_string_to_metric_families(_get(server.metrics_port, "/metrics")):
        if fam.name in FAMILIES:
            assert fam.type == FAMILIES[fam.name], fam.name
            for s in fam.samples:
                assert set(s.labels) == {"gpu_uuid"}, s
                out.setdefault(fam.name, {})[s.labels["gpu_uuid"]] = s.value
    return out


@pytest.fixture(scope="module")
def gpu_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InferdProcess]:
    folder = tmp_path_factory.mktemp("gpu-metrics")
    repo = folder / "models"
    repo.mkdir()
    with serving(repo, folder / "inferd.log", f"--metrics-interval-ms={INTERVAL_MS}") as proc:
        yield proc


Samples = dict[str, dict[str, float]]


def _wait_for(
    server: InferdProcess, ok: Callable[[Samples], object], what: str, limit_s: float = 15.0
) -> Samples:
    """The first scrape for which ``ok`` holds (asked at half the poll interval), or WaitTimeout."""
    last: list[Samples] = []

    def scrape() -> Samples | None:
        last[:] = [_gpu_samples(server)]
        return last[0] if ok(last[0]) else None

    return wait_until(
        scrape, what, limit_s, interval=INTERVAL_MS / 1000 / 2, detail=lambda: f"last scrape: {last}"
    )


def test_every_family_for_every_gpu_with_its_uuid(gpu_server: InferdProcess) -> None:
    uuids = {g.uuid for g in machine_gpus()}
    samples = _wait_for(
        gpu_server, lambda s: set(s) == set(FAMILIES) and s["nv_gpu_power_limit"], "every family polled"
    )
    for name in FAMILIES:
        assert set(samples[name]) == uuids, name
    for gpu in machine_gpus():
        assert samples["nv_gpu_memory_total_bytes"][gpu.uuid] == gpu.memory_total_bytes
        assert 0 < samples["nv_gpu_memory_used_bytes"][gpu.uuid] <= gpu.memory_total_bytes
        assert 0.0 <= samples["nv_gpu_utilization"][gpu.uuid] <= 1.0
        assert samples["nv_gpu_power_limit"][gpu.uuid] > 0
        assert samples["nv_gpu_power_usage"][gpu.uuid] >= 0
        assert samples["nv_energy_consumption"][gpu.uuid] >= 0


def test_memory_used_moves_when_another_process_takes_gpu_memory(gpu_server: InferdProcess) -> None:
    torch_ok = subprocess.run(
        [sys.executable, "-c", "import torch; assert torch.cuda.is_available()"], timeout=120
    )
    assert torch_ok.returncode == 0, "NVML finds a GPU but this interpreter's torch has no CUDA"
    gpu0 = usable_gpus()[0].uuid
    before = _wait_for(gpu_server, lambda s: gpu0 in s.get("nv_gpu_memory_used_bytes", {}), "a first poll")
    used_before = before["nv_gpu_memory_used_bytes"][gpu0]
    hold = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, torch\n"
            f"x = torch.ones({ALLOCATION}, dtype=torch.uint8, device='cuda:0')\n"
            "torch.cuda.synchronize()\n"
            "print('held', flush=True)\n"
            "sys.stdin.read()\n",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert hold.stdout is not None and hold.stdout.readline().strip() == "held"
        during = _wait_for(
            gpu_server,
            lambda s: s["nv_gpu_memory_used_bytes"][gpu0] >= used_before + ALLOCATION,
            "nv_gpu_memory_used_bytes up by the allocation",
        )
    finally:
        assert hold.stdin is not None
        hold.stdin.close()
        hold.wait(60)
    used_during = during["nv_gpu_memory_used_bytes"][gpu0]
    _wait_for(
        gpu_server,
        lambda s: s["nv_gpu_memory_used_bytes"][gpu0] <= used_during - ALLOCATION,
        "nv_gpu_memory_used_bytes down once the process ended",
    )


def test_the_status_page_lists_the_gpus(gpu_server: InferdProcess) -> None:
    doc = json.loads(_get(gpu_server.port, "/v2/status"))
    assert [g["uuid"] for g in doc["gpus"]] == [g.uuid for g in machine_gpus()]
    assert doc["gpus"][0]["name"] == machine_gpus()[0].name


def test_allow_gpu_metrics_false_leaves_the_families_out(tmp_path: Path) -> None:
    repo = tmp_path / "models"
    repo.mkdir()
    with serving(repo, tmp_path / "inferd.log", "--allow-gpu-metrics=false") as server:
        text = _get(server.metrics_port, "/metrics")
    assert "nv_gpu_" not in text and "nv_energy_consumption" not in text
    assert "nv_cpu_utilization" in text
