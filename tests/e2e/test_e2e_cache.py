"""The response cache end to end (tritonclient HTTP and gRPC, /metrics), against the reference's answers
recorded in tests/fixtures/reference_observed_cache.json (make_reference_cache.py).

cached_count answers COUNT = its executions so far: a hit repeats the COUNT of the miss that filled it,
so the model itself witnesses that a hit never executes.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from repo_paths import FIXTURES, REFERENCE_MODELS, ROOT

DOC = json.loads((FIXTURES / "reference_observed_cache.json").read_text())
CACHE = ("--cache-config", DOC["cache_config"])


@pytest.fixture(scope="module")
def model_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """cached_count, cached_ensemble and its steps add_sub and mul_fp32 (not cached)."""
    dest = tmp_path_factory.mktemp("cache") / "models"
    dest.mkdir()
    ignore = shutil.ignore_patterns("__pycache__")
    for model in sorted((FIXTURES / "cache_models").iterdir()):
        shutil.copytree(model, dest / model.name, ignore=ignore)
    for name in ("add_sub", "mul_fp32"):
        shutil.copytree(REFERENCE_MODELS / name, dest / name, ignore=ignore)
    return dest


def _infer(server: Any, step: list[Any]) -> dict[str, Any]:
    """One recorded step (protocol, model, value, shape, outputs) sent to ``server``, answered as recorded."""
    protocol, model, value, shape, outputs = step
    mod: Any = httpclient if protocol == "http" else grpcclient
    client = mod.InferenceServerClient(server.url if protocol == "http" else f"127.0.0.1:{server.grpc_port}")
    data = (np.arange(int(np.prod(shape)), dtype=np.float32) + value).reshape(shape)
    if value < 0:
        data = -np.arange(1, data.size + 1, dtype=np.float32).reshape(shape)
    inputs = []
    for name in ("INPUT0", "INPUT1") if model == "cached_ensemble" else ("INPUT0",):
        i = mod.InferInput(name, shape, "FP32")
        i.set_data_from_numpy(data)
        inputs.append(i)
    asked = None if outputs is None else [mod.InferRequestedOutput(o) for o in outputs]
    try:
        r = client.infer(model, inputs, outputs=asked)
    except InferenceServerException as e:
        return {"error": e.message()}
    doc = r.get_response(as_json=True) if protocol == "grpc" else r.get_response()
    return {
        "outputs": {
            o["name"]: {"shape": [int(d) for d in o["shape"]], "data": r.as_numpy(o["name"]).tolist()}
            for o in doc.get("outputs", [])
        },
        "parameters": sorted(doc.get("parameters", {})),
    }


def _stats(server: Any, model: str) -> dict[str, Any]:
    s = server.request("GET", f"/v2/models/{model}/stats").json()["model_stats"][0]
    return {
        "inference_count": s["inference_count"],
        "execution_count": s["execution_count"],
        "inference_stats": {k: v["count"] for k, v in s["inference_stats"].items()},
    }


def _cache_metrics(server: Any) -> list[str]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics").read().decode()
    lines = [
        ln for ln in text.splitlines() if ln.startswith(("nv_cache", "# HELP nv_cache", "# TYPE nv_cache"))
    ]
    return [re.sub(r" [0-9.e+-]+$", " D", ln) if "duration" in ln or "util" in ln else ln for ln in lines]


def _normalised(answer: dict[str, Any]) -> dict[str, Any]:
    """Output order aside (the reference lists an ensemble's outputs in its own order)."""
    if "error" in answer:
        return {"error": answer["error"].split("\n")[0]}
    return {"outputs": dict(sorted(answer["outputs"].items())), "parameters": answer["parameters"]}


#: where inferd answers differently on purpose (engine/cache.py): 2.51's key has no shape and no
#: requested outputs, and 2.51 caches an error as an empty success
DIFFERENT = {
    2: {
        "OUTPUT0": {"shape": [2, 2], "data": [[0.0, 2.0], [4.0, 6.0]]},
        "COUNT": {"shape": [2, 1], "data": [[2], [2]]},
    },
    4: {
        "OUTPUT0": {"shape": [1, 4], "data": [[20.0, 22.0, 24.0, 26.0]]},
        "COUNT": {"shape": [1, 1], "data": [[4]]},
    },
}


def test_the_reference_scenario(start_server: Callable[..., Any]) -> None:
    server = start_server(*CACHE)
    recorded = DOC["cached"]
    for i, step in enumerate(recorded["steps"]):
        got, want = _normalised(_infer(server, step["step"])), _normalised(step["answer"])
        if i in DIFFERENT:
            assert got == {"outputs": DIFFERENT[i], "parameters": []}, i
            assert got != want
        elif i == 6:  # the failed request again: inferd executes it again and fails again
            assert got == _normalised(recorded["steps"][5]["answer"]) != want
        else:
            assert got == want, (i, step["step"])
    # the hits never executed: 6 executions (steps 0, 2, 3 and 4, and the failure twice), where 2.51
    # executes 3 times (it answers steps 2, 4 and 6 from the cache)
    count = _stats(server, "cached_count")
    assert count["inference_stats"]["cache_hit"] == 2  # the reference: 5 (steps 2, 4 and 6 above)
    assert count["inference_stats"]["cache_miss"] == 4  # 3 (one step fewer missed; errors never count)
    assert count["execution_count"] == 6 and count["inference_count"] == 5
    assert count["inference_stats"]["success"] == 6 and count["inference_stats"]["fail"] == 2
    assert count["inference_stats"]["queue"] == 6
    assert _stats(server, "cached_ensemble") == recorded["stats"]["cached_ensemble"]
    assert _stats(server, "add_sub") == recorded["stats"]["add_sub"]  # the ensemble's step ran once
    want_metrics = [
        ln.replace(" 5", " 2").replace(" 3", " 4") if "cached_count" in ln else ln
        for ln in recorded["metrics"]
    ]
    got_metrics = _cache_metrics(server)
    per_model = [ln for ln in got_metrics if "per_model" in ln]
    assert sorted(per_model) == sorted(ln for ln in want_metrics if "per_model" in ln)
    gauges = [
        ln.split(" ")[0] if not ln.startswith("#") else ln for ln in got_metrics if "per_model" not in ln
    ]
    assert gauges == [
        ln.split(" ")[0] if not ln.startswith("#") else ln
        for ln in recorded["metrics"]
        if "per_model" not in ln
    ]
    assert "nv_cache_num_hits 4" in got_metrics and "nv_cache_num_lookups 11" in got_metrics
    assert server.stop() == 0


def test_cache_off_by_default(start_server: Callable[..., Any]) -> None:
    """Without --cache-config every request executes; the per-model families still show (as 2.51)."""
    server = start_server()
    recorded = DOC["uncached"]
    for step in recorded["steps"]:
        assert _normalised(_infer(server, step["step"])) == _normalised(step["answer"]), step["step"]
    for model in ("cached_count", "cached_ensemble", "add_sub"):
        assert _stats(server, model) == recorded["stats"][model], model
    assert sorted(_cache_metrics(server)) == sorted(recorded["metrics"])
    assert server.stop() == 0


def test_hits_match_uncached_results_and_skip_the_queue(start_server: Callable[..., Any]) -> None:
    """Identical to an uncached answer, over both protocols; add_sub (no response_cache) is never cached."""
    server = start_server(*CACHE)
    http = httpclient.InferenceServerClient(server.url)
    grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    x = np.random.default_rng(1).random((3, 16), dtype=np.float32)
    answers = []
    for mod, client in ((httpclient, http), (grpcclient, grpc), (httpclient, http)):
        i0, i1 = mod.InferInput("INPUT0", [3, 16], "FP32"), mod.InferInput("INPUT1", [3, 16], "FP32")
        i0.set_data_from_numpy(x)
        i1.set_data_from_numpy(x[::-1].copy())
        r = client.infer("cached_ensemble", [i0, i1])
        answers.append((r.as_numpy("OUTPUT0"), r.as_numpy("OUTPUT1")))
        client.infer("add_sub", [i0, i1])
    want0 = (x + x[::-1]) * (x - x[::-1])
    for out0, out1 in answers:
        np.testing.assert_array_equal(out0, want0)
        np.testing.assert_array_equal(out1, x - x[::-1])
    ens, add = _stats(server, "cached_ensemble"), _stats(server, "add_sub")
    assert ens["inference_stats"]["cache_hit"] == 2 and ens["execution_count"] == 1
    assert add["inference_stats"]["cache_hit"] == 0 and add["execution_count"] == 4  # 1 ensemble step + 3
    assert server.stop() == 0


def test_summaries_of_a_cached_model(start_server: Callable[..., Any]) -> None:
    """summary_latencies=true with the cache: a cached model has hit and miss summaries and no request
    one (as the reference's metric reporter); a model that does not cache keeps its request summary."""
    from prometheus_client.parser import text_string_to_metric_families

    server = start_server(*CACHE, "--metrics-config", "summary_latencies=true")
    client = httpclient.InferenceServerClient(server.url)
    for value in (1.0, 1.0, 1.0, 2.0):  # a miss, two hits, a miss
        i = httpclient.InferInput("INPUT0", [1, 4], "FP32")
        i.set_data_from_numpy(np.full((1, 4), value, np.float32))
        client.infer("cached_count", [i])
    i0, i1 = (
        httpclient.InferInput("INPUT0", [1, 16], "FP32"),
        httpclient.InferInput("INPUT1", [1, 16], "FP32"),
    )
    i0.set_data_from_numpy(np.ones((1, 16), np.float32))
    i1.set_data_from_numpy(np.ones((1, 16), np.float32))
    client.infer("add_sub", [i0, i1])
    text = urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics").read().decode()
    counts: dict[tuple[str, str], float] = {}
    for fam in text_string_to_metric_families(text):
        assert fam.type == "summary" or not fam.name.endswith(("_summary_us", "_summary_per_model"))
        for sample in fam.samples:
            if sample.name.endswith("_count") and fam.type == "summary":
                counts[(fam.name, sample.labels["model"])] = sample.value
    assert counts[("nv_cache_hit_summary_per_model", "cached_count")] == 2
    assert counts[("nv_cache_miss_summary_per_model", "cached_count")] == 2
    assert counts[("nv_inference_queue_summary_us", "cached_count")] == 4
    assert ("nv_inference_request_summary_us", "cached_count") not in counts
    assert counts[("nv_inference_request_summary_us", "add_sub")] == 1
    assert ("nv_cache_hit_summary_per_model", "add_sub") not in counts
    assert server.stop() == 0


def test_a_response_larger_than_the_cache_is_answered_not_cached(start_server: Callable[..., Any]) -> None:
    server = start_server("--cache-config", "local,size=4096")
    client = httpclient.InferenceServerClient(server.url)
    for want_count in (1, 2):  # 8 KiB out: never inserted, executes each time
        i = httpclient.InferInput("INPUT0", [1, 2048], "FP32")
        i.set_data_from_numpy(np.ones((1, 2048), dtype=np.float32))
        assert client.infer("cached_count", [i]).as_numpy("COUNT").tolist() == [[want_count]]
    s = _stats(server, "cached_count")["inference_stats"]
    assert (s["cache_hit"], s["cache_miss"]) == (0, 2)
    assert server.stop() == 0
    assert "is greater than total cache size: 4096" in server.log()


@pytest.mark.parametrize("flag", sorted(DOC["refused_flags"]))
def test_refused_flags(flag: str, tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "inferd", "serve", "--model-repository", str(tmp_path), *flag.split()]
    with contextlib.suppress(subprocess.TimeoutExpired):
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert p.returncode != 0
    assert DOC["refused_flags"][flag] in p.stderr, p.stderr
