"""GPU discovery: CUDA_VISIBLE_DEVICES read as the CUDA runtime reads it, and a machine without
NVML or a GPU (this one, CI) finding none."""

from __future__ import annotations

import contextlib
import logging

import pytest

from inferd.gpu import devices

UUIDS = ["GPU-8f6c1a2b-0000", "GPU-8f7d3c4d-1111", "GPU-11aa22bb-2222"]


@pytest.mark.parametrize(
    ("env", "visible"),
    [
        (None, [0, 1, 2]),
        ("", []),
        ("2,0", [2, 0]),
        (" 1 , 2 ", [1, 2]),
        ("1,7,2", [1]),  # the list ends at an index that names no GPU
        ("0,0,1", [0]),  # or at one named again
        ("-1,0", []),
        ("GPU-11aa", [2]),  # a unique UUID prefix
        ("GPU-8f,1", []),  # an ambiguous prefix names none
        ("GPU-8f7d3c4d-1111,0", [1, 0]),
        ("MIG-1,0", []),
        ("nonsense", []),
    ],
)
def test_cuda_visible_devices_is_read_as_cuda_reads_it(env: str | None, visible: list[int]) -> None:
    assert devices.select_visible(UUIDS, env) == visible


def test_a_machine_without_nvml_or_a_gpu_finds_none() -> None:
    import pynvml  # nvidia-ml-py, installed by make install: its no-driver path is what runs here

    with contextlib.suppress(pynvml.NVMLError):
        pynvml.nvmlInit()  # (raises here: no driver, which is the case under test)
        pynvml.nvmlShutdown()
        pytest.skip("this machine has an NVIDIA driver")
    devices.machine_gpus.cache_clear()
    assert devices.machine_gpus() == ()
    assert devices.usable_gpus() == ()


def _gpu(cuda_id: int, cc: tuple[int, int]) -> devices.Gpu:
    return devices.Gpu(cuda_id, cuda_id, f"GPU-{cuda_id:08x}", "a GPU", 1 << 34, cc)


def test_supported_gpus_are_those_at_or_above_the_minimum_compute_capability(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    found = (_gpu(0, (7, 0)), _gpu(1, (7, 5)), _gpu(2, (9, 0)), _gpu(3, (5, 2)))
    monkeypatch.setattr(devices, "machine_gpus", lambda: found)
    assert devices.supported_gpus().ids == (0, 1, 2)  # the reference's default 6.0
    assert devices.supported_gpus(7.5) == devices.SupportedGpus(found[1:3], 7.5)
    assert devices.supported_gpus(10.0).ids == ()


def test_no_gpus_is_the_config_checks_default() -> None:
    assert devices.NO_GPUS.ids == () and devices.NO_GPUS.min_compute_capability == 6.0


def test_a_server_logs_each_gpu_and_whether_models_may_use_it(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    found = (_gpu(0, (9, 0)), _gpu(1, (6, 1)))
    monkeypatch.setattr(devices, "machine_gpus", lambda: found)
    with caplog.at_level(logging.INFO, logger="inferd.gpu"):
        assert devices.gpus_for_models(7.0).ids == (0,)
    assert caplog.messages == [
        "GPU 0: a GPU (GPU-00000000, compute capability 9.0) for model instances",
        "GPU 1: a GPU has compute capability 6.1, below --min-supported-compute-capability 7.0: not used",
    ]
