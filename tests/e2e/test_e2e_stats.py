"""The statistics extension end to end: counters move as the reference's do."""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from conftest import InferdProcess

pytestmark = pytest.mark.timeout(60)

F32 = {"inputs": [{"name": "INPUT0", "shape": [2], "datatype": "FP32", "data": [1, 2]}]}


def _stats(server: InferdProcess, model: str, version: str = "") -> dict[str, Any]:
    path = f"/v2/models/{model}" + (f"/versions/{version}" if version else "") + "/stats"
    r = server.request("GET", path)
    assert (r.status, r.content_type) == (200, "application/json"), r.body
    (entry,) = r.json()["model_stats"]
    return entry


def _batch(entry: dict[str, Any], size: int) -> int:
    return sum(b["compute_infer"]["count"] for b in entry["batch_stats"] if b["batch_size"] == size)


def test_counters_move_after_inference(server: InferdProcess) -> None:
    before = _stats(server, "identity_fp32")
    t0 = time.time() * 1000
    for _ in range(3):
        assert server.infer("identity_fp32", F32).status == 200
    after = _stats(server, "identity_fp32", "1")
    assert after["name"] == "identity_fp32" and after["version"] == "1"
    assert after["inference_count"] == before["inference_count"] + 3
    assert after["execution_count"] == before["execution_count"] + 3
    s0, s1 = before["inference_stats"], after["inference_stats"]
    for key in ("success", "queue", "compute_input", "compute_infer", "compute_output"):
        assert s1[key]["count"] == s0[key]["count"] + 3, key
        assert s1[key]["ns"] >= s0[key]["ns"], key
    assert s1["success"]["ns"] > s0["success"]["ns"]
    assert s1["fail"] == s0["fail"]
    assert s1["cache_hit"] == s1["cache_miss"] == {"count": 0, "ns": 0}
    assert _batch(after, 1) == _batch(before, 1) + 3
    assert after["last_inference"] >= int(t0) - 1000
    assert after["response_stats"] == {} and after["memory_usage"] == []


def test_rejected_requests_are_not_counted(server: InferdProcess) -> None:
    before = _stats(server, "identity_fp32")
    bad = {"inputs": [{"name": "INPUT0", "shape": [2], "datatype": "INT32", "data": [1, 2]}]}
    assert server.infer("identity_fp32", bad).status == 400
    assert _stats(server, "identity_fp32") == before


def test_batched_request_counts_its_batch(server: InferdProcess) -> None:
    before = _stats(server, "add_sub")
    doc = {
        "inputs": [
            {"name": n, "shape": [5, 16], "datatype": "FP32", "data": [0.5] * 80}
            for n in ("INPUT0", "INPUT1")
        ]
    }
    assert server.infer("add_sub", doc).status == 200
    after = _stats(server, "add_sub")
    assert after["inference_count"] == before["inference_count"] + 5
    assert after["execution_count"] == before["execution_count"] + 1
    assert after["inference_stats"]["success"]["count"] == before["inference_stats"]["success"]["count"] + 1
    assert _batch(after, 5) == _batch(before, 5) + 1


def test_dynamic_batching_shows_in_batch_stats(server: InferdProcess) -> None:
    """Concurrent requests to batched_sleep are executed together: fewer executions than requests."""
    before = _stats(server, "batched_sleep")
    errors: list[BaseException] = []

    def worker() -> None:
        c = httpclient.InferenceServerClient(server.url)
        try:
            for _ in range(4):
                t = httpclient.InferInput("INPUT0", [1, 4], "FP32")
                t.set_data_from_numpy(np.ones((1, 4), np.float32))
                c.infer("batched_sleep", [t])
        except BaseException as e:
            errors.append(e)
        finally:
            c.close()

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    after = _stats(server, "batched_sleep")
    requests = after["inference_stats"]["success"]["count"] - before["inference_stats"]["success"]["count"]
    executions = after["execution_count"] - before["execution_count"]
    assert requests == 32
    assert after["inference_count"] - before["inference_count"] == 32
    assert executions < requests
    new_batches = {
        b["batch_size"]: b["compute_infer"]["count"] - _batch(before, b["batch_size"])
        for b in after["batch_stats"]
    }
    assert sum(size * n for size, n in new_batches.items()) == 32
    assert max(size for size, n in new_batches.items() if n > 0) > 1


def test_model_errors_in_statistics(server: InferdProcess) -> None:
    """A response carrying a TritonError is a success; an exception in execute is a failure
    (the execution itself still counts, its batch does not)."""
    before = _stats(server, "error_unavailable")
    assert server.infer("error_unavailable", F32).status == 503
    after = _stats(server, "error_unavailable")
    assert after["inference_stats"]["success"]["count"] == before["inference_stats"]["success"]["count"] + 1
    assert after["inference_stats"]["fail"]["count"] == before["inference_stats"]["fail"]["count"]
    assert after["execution_count"] == before["execution_count"] + 1

    before = _stats(server, "raise_error")
    assert server.infer("raise_error", F32).status == 500
    after = _stats(server, "raise_error")
    assert after["inference_stats"]["fail"]["count"] == before["inference_stats"]["fail"]["count"] + 1
    assert after["inference_stats"]["success"]["count"] == before["inference_stats"]["success"]["count"]
    assert after["inference_count"] == before["inference_count"]
    assert after["execution_count"] == before["execution_count"] + 1
    assert _batch(after, 1) == _batch(before, 1) + 1


def test_all_models_statistics(server: InferdProcess) -> None:
    r = server.request("GET", "/v2/models/stats")
    assert (r.status, r.content_type) == (200, "application/json")
    entries = [(e["name"], e["version"]) for e in r.json()["model_stats"]]
    assert entries == sorted(entries)
    assert ("versions_all", "1") in entries and ("versions_all", "2") in entries
    assert ("versions_specific", "1") in entries and ("versions_specific", "2") not in entries
    assert "init_fails" not in {n for n, _ in entries}
    assert ("ensemble_add_sub", "1") in entries
    both = server.request("GET", "/v2/models/versions_all/stats").json()["model_stats"]
    assert [e["version"] for e in both] == ["1", "2"]


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/v2/models/nope/stats", "requested model 'nope' is not available"),
        ("/v2/models/nope/versions/1/stats", "requested model 'nope' is not available"),
        (
            "/v2/models/add_sub/versions/3/stats",
            "requested model version is not available for model 'add_sub'",
        ),
        ("/v2/models/init_fails/stats", "requested model 'init_fails' is not available"),
        (
            "/v2/models/versions_specific/versions/2/stats",
            "requested model version is not available for model 'versions_specific'",
        ),
    ],
)
def test_statistics_errors(server: InferdProcess, path: str, message: str) -> None:
    r = server.request("GET", path)
    assert (r.status, r.content_type, r.error) == (400, "application/json", message)
