"""benchmarks/floor_server.py, the floor that inferd's HTTP add_sub path is measured against (issue 48),
answers add_sub as the reference's model does, to a real client: tritonclient HTTP with binary
tensors both ways, as perf_analyzer sends them, and with JSON outputs."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from repo_paths import ROOT
from waiting import read_text, wait_until

FLOOR = ROOT / "benchmarks" / "floor_server.py"


@pytest.fixture
def floor(tmp_path: Path) -> Iterator[str]:
    """The floor on port 0 (the port it prints); its URL."""
    out = tmp_path / "floor.log"
    with out.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, str(FLOOR), "--http-port", "0", "--host", "127.0.0.1"],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        found = wait_until(
            lambda: re.search(r"floor: listening on 127\.0\.0\.1:(\d+)", read_text(out)),
            "the floor's listening line",
            detail=lambda: read_text(out),
        )
        yield f"127.0.0.1:{found[1]}"
    finally:
        proc.terminate()
        assert proc.wait(30) == 0, read_text(out)


def _inputs(a: np.ndarray, b: np.ndarray, binary: bool) -> list[httpclient.InferInput]:
    inputs = []
    for name, value in (("INPUT0", a), ("INPUT1", b)):
        i = httpclient.InferInput(name, list(value.shape), "FP32")
        i.set_data_from_numpy(value, binary_data=binary)
        inputs.append(i)
    return inputs


def test_add_sub_over_binary_http(floor: str) -> None:
    client = httpclient.InferenceServerClient(floor)
    assert client.is_server_ready() and client.is_model_ready("add_sub")
    assert client.get_model_config("add_sub")["max_batch_size"] == 64
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    b = np.full((1, 16), 0.5, dtype=np.float32)
    outputs = [httpclient.InferRequestedOutput(n, binary_data=True) for n in ("OUTPUT0", "OUTPUT1")]
    result = client.infer("add_sub", _inputs(a, b, binary=True), outputs=outputs, request_id="7")
    assert result.get_response()["id"] == "7"
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    # the statistics' one counter: cpu.py divides the server's CPU by it
    stats = client.get_inference_statistics("add_sub")["model_stats"][0]
    assert stats["inference_stats"]["success"]["count"] == 1


def test_add_sub_with_json_tensors_and_a_bad_request(floor: str) -> None:
    client = httpclient.InferenceServerClient(floor)
    a = np.ones((2, 16), dtype=np.float32)
    b = np.arange(32, dtype=np.float32).reshape(2, 16)
    outputs = [httpclient.InferRequestedOutput(n, binary_data=False) for n in ("OUTPUT1", "OUTPUT0")]
    result = client.infer("add_sub", _inputs(a, b, binary=False), outputs=outputs)
    assert [o["name"] for o in result.get_response()["outputs"]] == ["OUTPUT1", "OUTPUT0"]
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    # no validation, but a request add_sub cannot take is a 400 and the server goes on
    with pytest.raises(Exception, match="KeyError"):
        client.infer("add_sub", _inputs(a, b, binary=True)[:1])
    assert client.is_server_live()
