"""Instances placed on GPUs, end to end in one process, with the GPUs NVML would find handed in
(``gpu.devices.machine_gpus`` replaced): what the server loads, what a Python model's ``args`` say,
``/config``, the reference's refusal of a GPU that is not there while the other models serve, and
``KIND_AUTO`` on a backend that cannot use the GPUs. No GPU is touched: Python models only record
where they are placed, and the ONNX model stays on the CPU or is refused before any session."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest

from inferd import Server
from inferd.backends.onnxruntime import backend as ort_backend
from inferd.gpu import devices
from inferd.gpu.devices import Gpu

#: an H100 and an older GPU below a 7.0 minimum
FAKE_GPUS = (
    Gpu(0, 0, "GPU-00000000-fake", "NVIDIA H100 80GB HBM3", 85_899_345_920, (9, 0)),
    Gpu(1, 1, "GPU-11111111-fake", "Tesla P4", 8_589_934_592, (6, 1)),
)

#: records its instance's args (one JSON line per instance) in the repository, and echoes INPUT0
MODEL = """
import json
from pathlib import Path

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        keys = ("model_instance_name", "model_instance_kind", "model_instance_device_id")
        with open(Path(args["model_repository"]).parent.parent / "instances.jsonl", "a") as f:
            f.write(json.dumps([args[k] for k in keys]) + "\\n")

    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())]
            )
            for r in requests
        ]
"""
IO = """
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
"""


@pytest.fixture
def fake_gpus(monkeypatch: pytest.MonkeyPatch) -> tuple[Gpu, ...]:
    monkeypatch.setattr(devices, "machine_gpus", lambda: FAKE_GPUS)
    return FAKE_GPUS


def python_model(repo: Path, name: str, groups: str = "") -> Path:
    folder = repo / name
    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text(
        f'name: "{name}"\nbackend: "python"\nmax_batch_size: 0\n{IO}{groups}\n'
    )
    (folder / "1" / "model.py").write_text(MODEL)
    return folder


def onnx_model(repo: Path, name: str, groups: str) -> None:
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"])],
        "identity",
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, [-1])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, [-1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    (repo / name / "1").mkdir(parents=True)
    onnx.save(model, str(repo / name / "1" / "model.onnx"))
    (repo / name / "config.pbtxt").write_text(
        f'name: "{name}"\nbackend: "onnxruntime"\nmax_batch_size: 0\n{IO}{groups}\n'
    )


def instances(repo: Path) -> list[list[str]]:
    path = repo.parent / "instances.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def groups(server: Server, name: str) -> list[tuple[Any, ...]]:
    return [
        (g["name"], g["kind"], g["count"], g["gpus"]) for g in server.model_config(name)["instance_group"]
    ]


def test_kind_gpu_places_count_instances_on_every_gpu_as_the_reference(
    tmp_path: Path, fake_gpus: Any
) -> None:
    repo = tmp_path / "repo"
    python_model(repo, "m", "instance_group [ { kind: KIND_GPU count: 2 } ]")
    with Server(repo) as server:
        assert server.model_ready("m")
        assert groups(server, "m") == [("m_0", "KIND_GPU", 2, [0, 1])]
        out = server.infer("m", {"INPUT0": np.array([1.0, 2.0], np.float32)})
        assert np.asarray(out["OUTPUT0"]).tolist() == [1.0, 2.0]
    # the Python backend's args, as the reference's stub gets them: kind GPU, the CUDA id as text
    assert instances(repo) == [
        ["m_0_0", "GPU", "0"],
        ["m_0_0", "GPU", "1"],
        ["m_0_1", "GPU", "0"],
        ["m_0_1", "GPU", "1"],
    ]


def test_a_gpu_below_the_minimum_is_not_used_and_naming_it_fails_that_model_only(
    tmp_path: Path, fake_gpus: Any
) -> None:
    repo = tmp_path / "repo"
    python_model(repo, "good")  # no instance_group: KIND_GPU on every usable GPU, as the reference
    python_model(repo, "old_gpu", "instance_group [ { kind: KIND_GPU gpus: [ 1 ] } ]")
    with Server(repo, min_supported_compute_capability=7.0, exit_on_error=False) as server:
        assert server.model_ready("good") and not server.model_ready("old_gpu")
        assert groups(server, "good") == [("good", "KIND_GPU", 1, [0])]
        [entry] = [e for e in server.repository_index() if e["name"] == "old_gpu"]
        assert entry["reason"].endswith(
            "instance group old_gpu_0 of model old_gpu specifies invalid or unsupported gpu id 1. GPUs with at "
            "least the minimum required CUDA compute compatibility of 7.000000 are: 0"
        )
        out = server.infer("good", {"INPUT0": np.array([3.0], np.float32)})
        assert np.asarray(out["OUTPUT0"]).tolist() == [3.0]
    assert instances(repo) == [["good_0", "GPU", "0"]]


def test_kind_auto_stays_on_the_cpu_for_a_backend_that_cannot_use_the_gpus(
    tmp_path: Path, fake_gpus: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ort_backend.OnnxRuntimeBackend, "gpu_available", lambda self: False)
    repo = tmp_path / "repo"
    onnx_model(repo, "onnx_auto", "instance_group [ { kind: KIND_AUTO } ]")
    python_model(repo, "py_auto", "instance_group [ { kind: KIND_AUTO } ]")
    with Server(repo) as server:
        assert groups(server, "onnx_auto") == [("onnx_auto_0", "KIND_CPU", 2, [])]
        assert groups(server, "py_auto") == [("py_auto_0", "KIND_GPU", 1, [0, 1])]
        out = server.infer("onnx_auto", {"INPUT0": np.array([4.0], np.float32)})
        assert np.asarray(out["OUTPUT0"]).tolist() == [4.0]


def test_onnx_on_kind_gpu_without_cudas_provider_fails_the_load_saying_onnxruntime_is_cpu_only(
    tmp_path: Path, fake_gpus: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ort, "get_available_providers", lambda: ["CPUExecutionProvider"])  # the backend's
    repo = tmp_path / "repo"
    onnx_model(repo, "onnx_gpu", "instance_group [ { kind: KIND_GPU } ]")
    python_model(repo, "py", "instance_group [ { kind: KIND_CPU } ]")
    with Server(repo, exit_on_error=False) as server:
        assert server.model_ready("py") and not server.model_ready("onnx_gpu")
        [entry] = [e for e in server.repository_index() if e["name"] == "onnx_gpu"]
        assert "instance 'onnx_gpu_0_0' is KIND_GPU (GPU 0), but the installed onnxruntime" in entry["reason"]
        assert "CPU-only build" in entry["reason"] and "install onnxruntime-gpu" in entry["reason"]


def test_without_gpus_every_answer_stays_as_it_was(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(devices, "machine_gpus", lambda: ())
    repo = tmp_path / "repo"
    python_model(repo, "auto")
    python_model(repo, "gpu", "instance_group [ { kind: KIND_GPU } ]")
    with Server(repo, exit_on_error=False) as server:
        assert groups(server, "auto") == [("auto", "KIND_CPU", 1, [])]
        [entry] = [e for e in server.repository_index() if e["name"] == "gpu"]
        assert entry["reason"].endswith(
            "instance group gpu_0 of model gpu has kind KIND_GPU but no GPUs are available"
        )
    assert instances(repo) == [["auto_0", "CPU", "0"]]
