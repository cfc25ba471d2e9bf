"""Model statistics: the reference's JSON shape, and counters that add up."""

from __future__ import annotations

import itertools
import json
import threading
import time
from typing import Any

from inferd.core.stats import BatchStats, Duration, ModelStats
from repo_paths import PROTOCOL


def _reference_stats() -> dict[str, Any]:
    lines = PROTOCOL.read_text().splitlines()
    for prev, line in itertools.pairwise(lines):
        if prev.startswith("HTTP model_stats:"):
            doc: dict[str, Any] = json.loads(line)
            return doc
    raise AssertionError("no model_stats answer in the reference")


def _keys(doc: Any) -> Any:
    """The key structure of a JSON document (lists: the structure of their first element)."""
    if isinstance(doc, dict):
        return {k: _keys(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_keys(doc[0])] if doc else []
    return type(doc).__name__


def _busy_stats() -> ModelStats:
    s = ModelStats()
    s.record_execution(1, 1, [10], 1, 2, 3)
    s.record_execution(3, 2, [10, 20], 4, 5, 6)
    s.record_request(True, 100)
    return s


def test_to_json_has_the_reference_keys() -> None:
    ref = _reference_stats()["model_stats"][0]
    ours = _busy_stats().to_json("add_sub", "1")
    assert _keys(ours) == _keys(ref)
    assert list(ours) == list(ref)  # same order too
    assert list(ours["inference_stats"]) == list(ref["inference_stats"])


def test_empty_stats() -> None:
    doc = ModelStats().to_json("m", "2")
    assert doc["name"] == "m" and doc["version"] == "2"
    assert doc["last_inference"] == 0
    assert doc["inference_count"] == doc["execution_count"] == 0
    assert all(v == {"count": 0, "ns": 0} for v in doc["inference_stats"].values())
    assert doc["response_stats"] == {}
    assert doc["batch_stats"] == []
    assert doc["memory_usage"] == []


def test_duration() -> None:
    d = Duration()
    d.add(5)
    d.add(7, n=3)
    assert d.to_json() == {"count": 4, "ns": 26}


def test_record_execution_counts() -> None:
    s = ModelStats()
    before = time.time_ns() // 1_000_000
    s.record_execution(batch_size=3, n_requests=2, queue_ns=[10, 20], input_ns=4, infer_ns=5, output_ns=6)
    doc = s.to_json("m", "1")
    assert doc["execution_count"] == 1
    assert doc["inference_count"] == 3  # batch elements, not requests
    st = doc["inference_stats"]
    assert st["queue"] == {"count": 2, "ns": 30}
    # each request of the batch is charged the batch's compute durations
    assert st["compute_input"] == {"count": 2, "ns": 8}
    assert st["compute_infer"] == {"count": 2, "ns": 10}
    assert st["compute_output"] == {"count": 2, "ns": 12}
    assert doc["batch_stats"] == [
        {
            "batch_size": 3,
            "compute_input": {"count": 1, "ns": 4},
            "compute_infer": {"count": 1, "ns": 5},
            "compute_output": {"count": 1, "ns": 6},
        }
    ]
    assert before <= doc["last_inference"] <= time.time_ns() // 1_000_000


def test_batch_stats_are_sorted_by_batch_size() -> None:
    s = ModelStats()
    for bs in (4, 1, 3, 1):
        s.record_execution(bs, 1, [0], 1, 1, 1)
    doc = s.to_json("m", "1")
    assert [b["batch_size"] for b in doc["batch_stats"]] == [1, 3, 4]
    assert doc["batch_stats"][0]["compute_infer"]["count"] == 2
    assert doc["execution_count"] == 4
    assert doc["inference_count"] == 9


def test_record_request_success_and_failure() -> None:
    s = ModelStats()
    s.record_request(True, 100)
    s.record_request(False, 30)
    s.record_request(False, 20, reason="REJECTED")
    st = s.to_json("m", "1")["inference_stats"]
    assert st["success"] == {"count": 1, "ns": 100}
    assert st["fail"] == {"count": 2, "ns": 50}
    assert s.fail_reasons == {"OTHER": 0, "REJECTED": 1, "CANCELED": 0, "BACKEND": 1}


def test_counters_add_up_across_threads() -> None:
    s = ModelStats()
    n_threads, per_thread = 8, 250

    def work() -> None:
        for _ in range(per_thread):
            s.record_execution(2, 2, [1, 1], 1, 1, 1)
            s.record_request(True, 1)
            s.record_request(True, 1)

    threads = [threading.Thread(target=work) for _ in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    doc = s.to_json("m", "1")
    total = n_threads * per_thread
    assert doc["execution_count"] == total
    assert doc["inference_count"] == 2 * total
    st = doc["inference_stats"]
    assert st["success"] == {"count": 2 * total, "ns": 2 * total}
    assert st["queue"]["count"] == st["compute_infer"]["count"] == 2 * total
    assert doc["batch_stats"][0]["compute_infer"] == {"count": total, "ns": total}


def test_to_json_is_a_snapshot() -> None:
    s = _busy_stats()
    doc = s.to_json("m", "1")
    s.record_execution(1, 1, [0], 0, 0, 0)
    assert doc["execution_count"] == 2
    assert isinstance(BatchStats().compute_infer, Duration)
