"""The response cache row: a cache hit on ``densenet_onnx`` against a miss (issue 12: hit >= 20x faster).

    .venv/bin/python benchmarks/cache_bench.py                     # 100 misses, 100 hits
    .venv/bin/python benchmarks/cache_bench.py --requests 30

inferd serves a copy of the example ``densenet_onnx`` (examples/models, ``examples/build_models.py``)
with ``response_cache { enable: true }`` added to its config, written into the results folder, with
``--cache-config local,size=64MiB``, on free ports. One tritonclient HTTP client sends, one at a time
(binary tensors, [3, 224, 224] FP32 = 588 KiB in, 1000 FP32 out): ``--requests`` inputs never sent
before (each a miss: the model runs), then one input ``--requests`` times (each a hit after the first).
The figures are client latencies (send to answer); the server's statistics must show exactly those
hits and misses, or the row is refused. ``section()`` returns the Markdown and the goal's figures for
``make bench``; run alone it writes ``benchmarks/results/cache-<UTC timestamp>/cache.md``. The module
imports only the stdlib (tritonclient and numpy when it measures).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import servers
from bench_paths import ROOT

MODEL = "densenet_onnx"
SOURCE = ROOT / "examples" / "models" / MODEL
CACHE_BYTES = 64 << 20
GOAL = 20.0


def write_repository(dest: Path) -> Path:
    """densenet_onnx with the response cache enabled (its model file linked, not copied)."""
    model = dest / MODEL
    (model / "1").mkdir(parents=True, exist_ok=True)
    for f in SOURCE.iterdir():
        if f.is_file():
            shutil.copy(f, model / f.name)
    (model / "config.pbtxt").write_text(
        (SOURCE / "config.pbtxt").read_text() + "\nresponse_cache { enable: true }\n"
    )
    target = model / "1" / "model.onnx"
    if not target.exists():
        target.symlink_to((SOURCE / "1" / "model.onnx").resolve())
    return dest


def _latencies(url: str, requests: int) -> tuple[list[float], list[float]]:
    """(miss latencies, hit latencies) in milliseconds."""
    import numpy as np
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(url)
    rng = np.random.default_rng(0)

    def once(x: Any) -> float:
        i = httpclient.InferInput("data_0", [3, 224, 224], "FP32")
        i.set_data_from_numpy(x, binary_data=True)
        out = httpclient.InferRequestedOutput("fc6_1", binary_data=True)
        t0 = time.perf_counter()
        client.infer(MODEL, [i], outputs=[out])
        return (time.perf_counter() - t0) * 1000

    once(rng.random((3, 224, 224), dtype=np.float32))  # warm the session (a miss, not counted)
    misses = [once(rng.random((3, 224, 224), dtype=np.float32)) for _ in range(requests)]
    same = rng.random((3, 224, 224), dtype=np.float32)
    once(same)  # fills the entry (a miss, not counted)
    hits = [once(same) for _ in range(requests)]
    return misses, hits


def _stats(http_port: int) -> dict[str, int]:
    url = f"http://127.0.0.1:{http_port}/v2/models/{MODEL}/stats"
    inf = json.loads(urllib.request.urlopen(url, timeout=10).read())["model_stats"][0]["inference_stats"]
    return {"hits": inf["cache_hit"]["count"], "misses": inf["cache_miss"]["count"]}


def _pct(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(q * len(values)))]


def section(out: Path, python: str = sys.executable, requests: int = 100) -> tuple[str, dict[str, float]]:
    """Serve, measure, stop: the Markdown section and the goal's figures (``cache_hit_speedup``: the
    median miss over the median hit; ``cache_hit_p50_ms``, ``cache_miss_p50_ms``)."""
    if not (SOURCE / "1" / "model.onnx").exists():
        return f"## Response cache\n\nskipped: {SOURCE} not built (examples/build_models.py)\n", {}
    repo = write_repository(out / "models")
    server = servers.inferd(
        repo, out / "inferd.log", python, extra=f"--cache-config local,size={CACHE_BYTES}"
    )
    ports = server.start()
    try:
        misses, hits = _latencies(f"127.0.0.1:{ports.http}", requests)
        counted = _stats(ports.http)
    finally:
        server.stop()
    want = {"hits": requests, "misses": requests + 2}
    if counted != want:
        raise RuntimeError(f"the server counted {counted}, not {want}: not a clean hit/miss measurement")
    miss50, hit50 = statistics.median(misses), statistics.median(hits)
    speedup = miss50 / hit50
    load = Path("/proc/loadavg").read_text().split()[:3]
    text = "\n".join(
        [
            "## Response cache",
            "",
            f"`{MODEL}` with `response_cache {{ enable: true }}`, inferd `--cache-config local,size={CACHE_BYTES}`; one "
            f"tritonclient HTTP client, binary tensors, one request at a time: {requests} new inputs (misses), then "
            f"one input {requests} times (hits); load average {' '.join(load)}. The server counted {counted['hits']} "
            f"hits and {counted['misses']} misses.",
            "",
            "| | p50 (ms) | p90 (ms) | p99 (ms) |",
            "| --- | ---: | ---: | ---: |",
            f"| miss | {miss50:.2f} | {_pct(misses, 0.9):.2f} | {_pct(misses, 0.99):.2f} |",
            f"| hit | {hit50:.2f} | {_pct(hits, 0.9):.2f} | {_pct(hits, 0.99):.2f} |",
            "",
            f"- a hit is {speedup:.1f}x faster than a miss (median latencies; goal >= {GOAL:.0f}x)",
            "",
        ]
    )
    return text, {"cache_hit_speedup": speedup, "cache_hit_p50_ms": hit50, "cache_miss_p50_ms": miss50}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=100, help="misses measured, and hits measured")
    ap.add_argument("--python", default=sys.executable, help="the interpreter that runs inferd")
    ap.add_argument("--output", type=Path, default=None, help="results folder (default: a new one)")
    args = ap.parse_args()
    out = args.output or ROOT / "benchmarks" / "results" / time.strftime("cache-%Y%m%d-%H%M%S", time.gmtime())
    out.mkdir(parents=True, exist_ok=True)
    text, figures = section(out, args.python, args.requests)
    (out / "cache.md").write_text(text)
    (out / "summary.json").write_text(json.dumps(figures, indent=1))
    print(text)
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
