"""What Triton's Model Analyzer (1.58, remote launch mode) asks of a server in explicit mode, without
Model Analyzer itself (scripts/model_analyzer.sh runs the real one; too slow for ``make test``): it
reads a model's config as gRPC's JSON (int64 fields as strings), changes the fields its search
sweeps, loads each candidate with that whole config as the override, waits for readiness and
measures; it never unloads between candidates."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from conftest import InferdProcess

from repo_paths import REFERENCE_MODELS


@pytest.fixture(scope="module")
def explicit(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InferdProcess]:
    root = tmp_path_factory.mktemp("model_analyzer")
    shutil.copytree(REFERENCE_MODELS / "add_sub", root / "models" / "add_sub")
    proc = InferdProcess(root / "models", root / "inferd.log", ("--model-control-mode=explicit",)).start()
    try:
        yield proc
    finally:
        proc.stop()


def test_each_candidate_config_loads_as_a_whole_config_override(explicit: InferdProcess) -> None:
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{explicit.grpc_port}")
    try:
        assert client.get_model_repository_index(as_json=True)["models"] == [{"name": "add_sub"}]
        client.load_model("add_sub")
        base = client.get_model_config("add_sub", as_json=True)["config"]
        assert base["input"][0]["dims"] == ["16"]  # int64 as a JSON string, as MA sends it back
        a = np.arange(16, dtype=np.float32).reshape(1, 16)
        for count, max_batch in ((1, 64), (1, 1), (2, 1), (2, 8)):
            candidate = dict(
                base,
                max_batch_size=max_batch,
                instance_group=[{"count": count, "kind": "KIND_CPU"}],
                dynamic_batching={},
            )
            client.load_model("add_sub", config=json.dumps(candidate))
            assert client.is_model_ready("add_sub")
            loaded = client.get_model_config("add_sub", as_json=True)["config"]
            assert loaded["max_batch_size"] == max_batch
            assert loaded["instance_group"][0]["count"] == count
            inputs = [grpcclient.InferInput(n, [1, 16], "FP32") for n in ("INPUT0", "INPUT1")]
            inputs[0].set_data_from_numpy(a)
            inputs[1].set_data_from_numpy(np.ones_like(a))
            np.testing.assert_array_equal(client.infer("add_sub", inputs).as_numpy("OUTPUT0"), a + 1)
        stats = client.get_inference_statistics("add_sub", as_json=True)["model_stats"]
        assert int(stats[0]["inference_count"]) >= 1  # perf_analyzer reads these around each window
    finally:
        client.close()
    repo = explicit.repository / "add_sub"
    assert sorted(p.name for p in repo.iterdir()) == ["1", "config.pbtxt"]  # nothing written into it
