"""The compiled hot path and the pure-Python one serve the same answers (tritonclient, HTTP and gRPC)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from conftest import InferdProcess

from inferd import hotpath

pytestmark = pytest.mark.timeout(90)


def answers(server: InferdProcess) -> list[dict[str, Any]]:
    """add_sub and an error, over both protocols: outputs and error texts."""
    a = np.arange(32, dtype=np.float32).reshape(2, 16)
    b = np.full((2, 16), 0.5, dtype=np.float32)
    seen: list[dict[str, Any]] = []
    for module in (httpclient, grpcclient):
        port = server.port if module is httpclient else server.grpc_port
        client: Any = module.InferenceServerClient(f"127.0.0.1:{port}")
        inputs = [module.InferInput("INPUT0", [2, 16], "FP32"), module.InferInput("INPUT1", [2, 16], "FP32")]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(b)
        result = client.infer("add_sub", inputs)
        seen.append({n: result.as_numpy(n).tolist() for n in ("OUTPUT0", "OUTPUT1")})
        try:
            client.infer("add_sub", inputs[:1])
        except Exception as e:  # tritonclient's InferenceServerException, either protocol
            seen.append({"error": str(e)})
        client.close()
    return seen


def test_both_paths_answer_alike(model_repository: Path, tmp_path: Path) -> None:
    results = {}
    for pure in ("1", "0"):
        server = InferdProcess(model_repository, tmp_path / f"inferd-{pure}.log", env={hotpath.ENV: pure})
        server.start()
        try:
            results[pure] = answers(server)
        finally:
            assert server.stop() == 0
        line = next(x for x in server.log().splitlines() if "hot path: " in x)
        if pure == "1":
            assert "hot path: pure (INFERD_PURE_PYTHON=1)" in line
        else:  # the build where there is a fresh one, else the reason there is none
            assert ("hot path: compiled" in line) == (hotpath.why_not_compiled() is None), line
    assert results["1"] == results["0"]
    assert results["1"][0]["OUTPUT0"][0][:2] == [0.5, 1.5]
    assert "error" in results["1"][1]
