"""GET /metrics: Triton's families and names, values that follow the statistics extension,
parsed with the real Prometheus client's parser."""

from __future__ import annotations

import http.client
from typing import Any

from conftest import InferdProcess
from prometheus_client.parser import text_string_to_metric_families

from inferd.gpu.devices import machine_gpus
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
    if not machine_gpus():  # as the reference's CPU build: no GPU family at all (test_e2e_gpu_metrics.py)
        assert {n for n in families if n.startswith(("nv_gpu_", "nv_energy_"))} == set()


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


_SLOW_FIRST = """
import time
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for r in requests:
            sender = r.get_response_sender()
            sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", np.array([0], np.int32))]))
            time.sleep(0.3)  # the first response is out long before the last
            sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", np.array([1], np.int32))]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""

_BUCKETS = """
model_metrics {
  metric_control: [
    { metric_identifier: { family: "nv_inference_first_response_histogram_ms" }
      histogram_options: { buckets: [ 10, 50, 5000 ] } },
    { metric_identifier: { family: "nv_inference_request_success" }
      histogram_options: { buckets: [ 1 ] } }
  ]
}
"""


def _histogram(text: str, model: str) -> dict[str, float]:
    """The first-response histogram of ``model`` version 1: count, sum and buckets by ``le``."""
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        if fam.name != "nv_inference_first_response_histogram_ms":
            continue
        assert fam.type == "histogram"
        for s in fam.samples:
            if s.labels.get("model") == model and s.labels.get("version") == "1":
                key = s.labels["le"] if s.name.endswith("_bucket") else s.name.rsplit("_", 1)[1]
                out[key] = s.value
    return out


def test_first_response_histogram(model_repository: Any, tmp_path: Any) -> None:
    """``histogram_latencies=true``: one observation per request when its first response is sent,
    in whole ms (a decoupled model's first of several, an ensemble's and its steps'), with the
    default buckets or the model's ``model_metrics`` ones; other families there only warn."""
    import shutil

    import numpy as np
    import tritonclient.grpc as grpcclient

    repo = tmp_path / "models"
    for name in ("parallel_sleep", "ensemble_add_sub", "add_sub", "mul_fp32"):
        shutil.copytree(model_repository / name, repo / name)
    shutil.copytree(model_repository / "parallel_sleep", repo / "sleep_buckets")
    cfg = repo / "sleep_buckets" / "config.pbtxt"
    cfg.write_text(cfg.read_text().replace('"parallel_sleep"', '"sleep_buckets"') + _BUCKETS)
    (repo / "slow_first" / "1").mkdir(parents=True)
    (repo / "slow_first" / "1" / "model.py").write_text(_SLOW_FIRST)
    (repo / "slow_first" / "config.pbtxt").write_text(
        (model_repository / "decoupled" / "config.pbtxt").read_text().replace('"decoupled"', '"slow_first"')
    )
    server = InferdProcess(
        repo, tmp_path / "inferd.log", ("--metrics-config", "histogram_latencies=true")
    ).start()
    try:
        sleep = {"inputs": [{"name": "SLEEP_MS", "shape": [1], "datatype": "INT32", "data": [120]}]}
        for _ in range(2):
            assert server.infer("parallel_sleep", sleep).status == 200
        sleep["inputs"][0]["data"] = [20]
        assert server.infer("sleep_buckets", sleep).status == 200
        assert server.infer("ensemble_add_sub", ADD_SUB).status == 200

        results: list[Any] = []
        with grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}") as client:
            client.start_stream(callback=lambda result, error: results.append(error or result))
            inp = grpcclient.InferInput("INPUT0", [1], "INT32")
            inp.set_data_from_numpy(np.array([1], np.int32))
            client.async_stream_infer("slow_first", [inp])
            client.stop_stream()
        assert len(results) == 2 and not any(isinstance(r, Exception) for r in results)

        text = _scrape(server)[2]
        sleeps = _histogram(text, "parallel_sleep")
        assert sleeps["count"] == 2 and 240 <= sleeps["sum"] < 440
        assert (sleeps["100"], sleeps["500"], sleeps["2000"], sleeps["5000"], sleeps["+Inf"]) == (
            0,
            2,
            2,
            2,
            2,
        )
        custom = _histogram(text, "sleep_buckets")
        assert set(custom) == {"count", "sum", "10", "50", "5000", "+Inf"}
        assert (custom["10"], custom["50"], custom["count"]) == (0, 1, 1) and 20 <= custom["sum"] < 50
        first = _histogram(text, "slow_first")
        assert first["count"] == 1 and first["sum"] < 300  # the first response, not the last
        for name in ("ensemble_add_sub", "add_sub", "mul_fp32"):  # the ensemble and its two steps
            assert _histogram(text, name)["count"] == 1, name
        assert (
            "Metric family 'nv_inference_request_success' in 'metric_identifier' is not a "
            "customizable metric in Triton core." in server.log()
        )
    finally:
        server.kill()


def test_no_histogram_by_default(server: InferdProcess) -> None:
    assert "nv_inference_first_response_histogram_ms" not in _scrape(server)[2]


SLOW_STEP = """
import time
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            time.sleep(0.3)
            x = pb_utils.get_input_tensor_by_name(r, "IN").as_numpy()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", x)]))
        return out
"""
TENSORS = """
input [{ name: "IN" data_type: TYPE_FP32 dims: [ 1 ] }]
output [{ name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] }]
"""
ENSEMBLE = (
    'platform: "ensemble"\nmax_batch_size: 0\n'
    + TENSORS
    + """
ensemble_scheduling { step [{ model_name: "slow_step" model_version: -1
  input_map { key: "IN" value: "IN" } output_map { key: "OUT" value: "OUT" } }] }
"""
)


def test_an_ensembles_requests_pend_under_its_steps(tmp_path: Any) -> None:
    """As the reference: the ensemble reports 0 pending requests, its step counts them."""
    import threading

    (tmp_path / "m" / "slow_step" / "1").mkdir(parents=True)
    (tmp_path / "m" / "slow_step" / "1" / "model.py").write_text(SLOW_STEP)
    (tmp_path / "m" / "slow_step" / "config.pbtxt").write_text(
        'backend: "python"\nmax_batch_size: 0\n' + TENSORS
    )
    (tmp_path / "m" / "slow_ens" / "1").mkdir(parents=True)
    (tmp_path / "m" / "slow_ens" / "config.pbtxt").write_text(ENSEMBLE)
    proc = InferdProcess(tmp_path / "m", tmp_path / "inferd.log").start()
    doc = {"inputs": [{"name": "IN", "shape": [1], "datatype": "FP32", "data": [1]}]}
    try:
        clients = [threading.Thread(target=proc.infer, args=("slow_ens", doc)) for _ in range(4)]
        for c in clients:
            c.start()
        step = (("model", "slow_step"), ("version", "1"))
        ens = (("model", "slow_ens"), ("version", "1"))
        pending = "nv_inference_pending_request_count"
        seen = None
        for _ in range(200):  # until the step has requests waiting (4 x 0.3 s of work in one instance)
            samples = _samples(_scrape(proc)[2])
            if samples[(pending, step)] >= 2:
                seen = samples
                break
        for c in clients:
            c.join()
        assert seen is not None, "the step never had requests waiting"
        assert seen[(pending, ens)] == 0
    finally:
        assert proc.stop() == 0


def test_allow_cpu_metrics_false_leaves_out_the_cpu_gauges(start_server: Any) -> None:
    """--allow-cpu-metrics=false, as the reference: no nv_cpu_* family; the pinned pool's stay."""
    server = start_server("--allow-cpu-metrics=false")
    status, _, text = _scrape(server)
    names = {f.name for f in text_string_to_metric_families(text)}
    assert status == 200 and "nv_pinned_memory_pool_total_bytes" in names and "nv_inference_count" in names
    assert {n for n in names if n.startswith("nv_cpu_")} == set()
