"""Loading at start (engine/repository_manager.py): --model-load-retry-count loads a version whose load
failed again, up to that many times, before it is UNAVAILABLE with the last failure's reason."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from inferd import Server

CONFIG = """
name: "flaky"
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
"""
#: its initialize fails the first FAIL times (counted in a file: each load imports the model anew)
MODEL = """
import pathlib

import triton_python_backend_utils as pb_utils

COUNTER = pathlib.Path({counter!r})


class TritonPythonModel:
    def initialize(self, args):
        n = int(COUNTER.read_text()) if COUNTER.exists() else 0
        COUNTER.write_text(str(n + 1))
        if n < {fail}:
            raise RuntimeError(f"flaky start {{n + 1}}")

    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())]
            )
            for r in requests
        ]
"""


def flaky_repository(tmp_path: Path, fail: int) -> tuple[Path, Path]:
    """A repository whose model fails its first ``fail`` loads; and its counter file."""
    counter = tmp_path / "loads"
    model = tmp_path / "repo" / "flaky"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(CONFIG)
    (model / "1" / "model.py").write_text(MODEL.format(counter=str(counter), fail=fail))
    return tmp_path / "repo", counter


def test_a_failed_load_is_retried_until_it_succeeds(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    repo, counter = flaky_repository(tmp_path, fail=2)
    with caplog.at_level(logging.WARNING, logger="inferd"), Server(repo, model_load_retry_count=3) as server:
        assert server.model_ready("flaky")
        out = server.infer("flaky", {"INPUT0": np.array([1.0, 2.0], np.float32)})
        assert np.asarray(out["OUTPUT0"]).tolist() == [1.0, 2.0]
    assert counter.read_text() == "3"  # two failures, then the load that succeeded: no fourth try
    retries = [r.getMessage() for r in caplog.records if "retry" in r.getMessage()]
    assert len(retries) == 2
    assert retries[0].startswith("loading 'flaky' version 1 failed: ") and "flaky start 1" in retries[0]
    assert retries[0].endswith("retry 1 of 3") and retries[1].endswith("retry 2 of 3")


@pytest.mark.parametrize(("retries", "tries"), [(0, 1), (1, 2)])
def test_a_load_failing_every_try_is_unavailable_with_the_last_reason(
    tmp_path: Path, retries: int, tries: int
) -> None:
    repo, counter = flaky_repository(tmp_path, fail=5)
    with Server(repo, model_load_retry_count=retries) as server:
        assert not server.model_ready("flaky")
        [entry] = server.repository_index()
        assert entry["state"] == "UNAVAILABLE" and f"flaky start {tries}" in entry["reason"]
    assert counter.read_text() == str(tries)
