"""GET /metrics: Triton's families and names, values that follow the statistics extension,
parsed with the real Prometheus client's parser."""

from __future__ import annotations

import http.client
from typing import Any

from conftest import InferdProcess
from prometheus_client.parser import text_string_to_metric_families

from repo_paths import PROTOCOL

FAMILIES = {
    "nv_inference_request_success",
    "nv_inference_request_failure",
    "nv_inference_count",
    "nv_inference_exec_count",
    "nv_inference_request_duration_us",
    "nv_inference_queue_duration_us",
    "nv_inference_compute_input_duration_us",
    "nv_inference_compute_infer_duration_us",
    "nv_inference_compute_output_duration_us",
    "nv_inference_pending_request_count",
    "nv_model_load_duration_secs",
}

ADD_SUB = {
    "inputs": [
        {"name": "INPUT0", "shape": [2, 16], "datatype": "FP32", "data": list(range(32))},
        {"name": "INPUT1", "shape": [2, 16], "datatype": "FP32", "data": list(range(32))},
    ]
}


def _scrape(server: InferdProcess, method: str = "GET", path: str = "/metrics") -> tuple[int, str, str]:
    conn = http.client.HTTPConnection("127.0.0.1", server.metrics_port, timeout=10)
    try:
        conn.request(method, path)
        r = conn.getresponse()
        return r.status, r.getheader("content-type") or "", r.read().decode()
    finally:
        conn.close()


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Samples by (family name, labels); the parser names counter samples ``<family>_total``."""
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(fam.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_metrics_follow_the_statistics(server: InferdProcess) -> None:
    status, ctype, text = _scrape(server)
    assert (status, ctype) == (200, "text/plain; charset=utf-8")
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert set(families) >= FAMILIES
    assert families["nv_inference_count"].type == "counter"
    assert families["nv_inference_pending_request_count"].type == "gauge"
    # no "_total" suffix: the names dashboards built on Triton query
    assert "nv_inference_count{" in text and "_total{" not in text and "_total " not in text
    key = (("model", "add_sub"), ("version", "1"))
    before = _samples(text)
    assert server.infer("add_sub", ADD_SUB).status == 200
    after = _samples(_scrape(server)[2])
    assert after[("nv_inference_request_success", key)] == before[("nv_inference_request_success", key)] + 1
    assert after[("nv_inference_count", key)] == before[("nv_inference_count", key)] + 2
    assert after[("nv_inference_exec_count", key)] == before[("nv_inference_exec_count", key)] + 1
    assert (
        after[("nv_inference_request_duration_us", key)] > before[("nv_inference_request_duration_us", key)]
    )
    reasons = {dict(k[1]).get("reason") for k in after if k[0] == "nv_inference_request_failure"}
    assert reasons == {"OTHER", "REJECTED", "CANCELED", "BACKEND"}
    stats = server.request("GET", "/v2/models/add_sub/stats").json()["model_stats"][0]
    assert after[("nv_inference_exec_count", key)] == stats["execution_count"]
    assert families["nv_model_load_duration_secs"].type == "gauge"
    assert 0 < after[("nv_model_load_duration_secs", key)] < 60  # seconds add_sub took to load


def test_metrics_failures_and_methods(server: InferdProcess) -> None:
    assert server.infer(
        "raise_error", {"inputs": [{"name": "INPUT0", "shape": [1], "datatype": "FP32", "data": [1]}]}
    ).status in (400, 500)
    text = _scrape(server)[2]
    fails = {
        dict(k[1])["reason"]: v
        for k, v in _samples(text).items()
        if k[0] == "nv_inference_request_failure" and dict(k[1])["model"] == "raise_error"
    }
    assert fails["BACKEND"] >= 1
    assert _scrape(server, "POST")[0] == 405
    assert _scrape(server, "GET", "/nope")[0] == 404


def test_every_family_the_reference_exports(server: InferdProcess) -> None:
    """The families the reference's /metrics had (recorded in the protocol file) are all here."""
    line = next(x for x in PROTOCOL.read_text().splitlines() if x.strip().startswith("families:"))
    reference = set(line.split(":", 1)[1].split())
    text = _scrape(server)[2]
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert reference <= set(families), reference - set(families)
    samples = _samples(text)
    assert 0.0 <= samples[("nv_cpu_utilization", ())] <= 1.0
    assert 0 < samples[("nv_cpu_memory_used_bytes", ())] <= samples[("nv_cpu_memory_total_bytes", ())]


def test_summaries_and_no_latency_counters(start_server: Any) -> None:
    server = start_server(
        "--metrics-config", "summary_latencies=true", "--metrics-config", "counter_latencies=false"
    )
    for _ in range(5):
        assert server.infer("add_sub", ADD_SUB).status == 200
    text = _scrape(server)[2]
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families["nv_inference_queue_summary_us"].type == "summary"
    assert "nv_inference_request_duration_us" not in families and "nv_inference_count" in families
    summary = [
        s for s in families["nv_inference_request_summary_us"].samples if s.labels.get("model") == "add_sub"
    ]
    by_name = {s.name: s.value for s in summary if "quantile" not in s.labels}
    assert by_name["nv_inference_request_summary_us_count"] == 5
    assert by_name["nv_inference_request_summary_us_sum"] > 0
    quantiles = {s.labels["quantile"]: s.value for s in summary if "quantile" in s.labels}
    assert set(quantiles) == {"0.5", "0.9", "0.95", "0.99", "0.999"}
    assert all(v > 0 for v in quantiles.values())
