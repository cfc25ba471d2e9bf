"""benchmarks/floor_server.py --onnx-model, the floor inferd's densenet_onnx row is measured against
(issue 48), answers as inferd does: the same metadata and config, and the same scores for the same
image (binary tensors both ways, as perf_analyzer sends them, and JSON outputs), from a session opened
by the backend's own ``open_instance_session``. digits_onnx covers a batching config (batch of 3)."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from conftest import REPO_ROOT, http_client, serving

from repo_paths import load_script
from waiting import read_text, wait_until

pytestmark = pytest.mark.timeout(180)

FLOOR = REPO_ROOT / "benchmarks" / "floor_server.py"
MODELS = {"densenet_onnx", "digits_onnx"}


@pytest.fixture(scope="module")
def examples(tmp_path_factory: pytest.TempPathFactory) -> Path:
    build_models = load_script(REPO_ROOT / "examples" / "build_models.py", "inferd_example_build_floor")
    repo = tmp_path_factory.mktemp("examples") / "models"
    assert set(build_models.build(repo, only=MODELS)) >= MODELS
    return repo


@pytest.fixture(scope="module")
def inferd(
    examples: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[httpclient.InferenceServerClient]:
    log = tmp_path_factory.mktemp("log") / "inferd.log"
    with serving(examples, log) as proc, http_client(proc) as c:
        yield c


def _floor(model_dir: Path, log_path: Path) -> Iterator[httpclient.InferenceServerClient]:
    """The floor serving ``model_dir`` on port 0 (the port it prints); a client on it."""
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                str(FLOOR),
                "--http-port",
                "0",
                "--host",
                "127.0.0.1",
                "--onnx-model",
                str(model_dir),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        found = wait_until(
            lambda: re.search(r"floor: listening on 127\.0\.0\.1:(\d+)", read_text(log_path)),
            "the floor's listening line",
            timeout=120,
            detail=lambda: read_text(log_path),
        )
        client = httpclient.InferenceServerClient(f"127.0.0.1:{found[1]}", network_timeout=60)
        try:
            yield client
        finally:
            client.close()
    finally:
        proc.terminate()
        assert proc.wait(30) == 0, read_text(log_path)


@pytest.fixture(scope="module")
def densenet(
    examples: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[httpclient.InferenceServerClient]:
    yield from _floor(examples / "densenet_onnx", tmp_path_factory.mktemp("floor") / "floor.log")


def _input(name: str, value: np.ndarray[Any, Any], binary: bool = True) -> httpclient.InferInput:
    i = httpclient.InferInput(name, list(value.shape), "FP32")
    i.set_data_from_numpy(value, binary_data=binary)
    return i


def test_densenet_metadata_and_config_are_inferds(
    densenet: httpclient.InferenceServerClient, inferd: httpclient.InferenceServerClient
) -> None:
    assert densenet.is_server_ready() and densenet.is_model_ready("densenet_onnx")
    assert densenet.get_model_metadata("densenet_onnx") == inferd.get_model_metadata("densenet_onnx")
    assert densenet.get_model_config("densenet_onnx") == inferd.get_model_config("densenet_onnx")


@pytest.mark.parametrize("binary_out", [True, False], ids=["binary-outputs", "json-outputs"])
def test_densenet_scores_are_inferds(
    densenet: httpclient.InferenceServerClient, inferd: httpclient.InferenceServerClient, binary_out: bool
) -> None:
    image = np.random.default_rng(5).random((3, 224, 224), dtype=np.float32)
    out = [httpclient.InferRequestedOutput("fc6_1", binary_data=binary_out)]
    got = densenet.infer("densenet_onnx", [_input("data_0", image)], outputs=out, request_id="9")
    want = inferd.infer("densenet_onnx", [_input("data_0", image)], outputs=out)
    assert got.get_response()["id"] == "9"
    assert got.get_output("fc6_1")["shape"] == want.get_output("fc6_1")["shape"] == [1000]
    # the same session options on the same input: the same scores, bit for bit
    np.testing.assert_array_equal(got.as_numpy("fc6_1"), want.as_numpy("fc6_1"))


def test_densenet_counts_its_successes(densenet: httpclient.InferenceServerClient) -> None:
    """cpu.py divides the server's CPU by this counter (and perf_analyzer reads it around a window)."""
    before = densenet.get_inference_statistics("densenet_onnx")["model_stats"][0]["inference_stats"]
    image = np.zeros((3, 224, 224), dtype=np.float32)
    densenet.infer("densenet_onnx", [_input("data_0", image, binary=False)])
    after = densenet.get_inference_statistics("densenet_onnx")["model_stats"][0]["inference_stats"]
    assert after["success"]["count"] == before["success"]["count"] + 1


def test_a_batching_model_answers_a_batch_as_inferd(
    examples: Path, inferd: httpclient.InferenceServerClient, tmp_path: Path
) -> None:
    images = np.random.default_rng(2).random((3, 64), dtype=np.float32) * 16
    for digits in _floor(examples / "digits_onnx", tmp_path / "floor.log"):
        assert digits.get_model_metadata("digits_onnx") == inferd.get_model_metadata("digits_onnx")
        names = [o["name"] for o in inferd.get_model_metadata("digits_onnx")["outputs"]]
        got = digits.infer("digits_onnx", [_input("pixels", images)])
        want = inferd.infer("digits_onnx", [_input("pixels", images)])
        for name in names:
            assert got.as_numpy(name).shape[0] == 3
            np.testing.assert_array_equal(got.as_numpy(name), want.as_numpy(name))
