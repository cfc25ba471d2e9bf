"""The fil backend's rows (issue 30): tree models served over binary HTTP against the same model's
native predict called in a plain Python loop with the same threads, and the time to READY.

    .venv/bin/python benchmarks/fil_bench.py                  # 3 rounds, 5 s a row
    .venv/bin/python benchmarks/fil_bench.py --rounds 1 --seconds 2

Models (built into the results folder; examples/trees.py and examples/build_models.py): the example
``breast_cancer_xgboost`` (XGBoost, 50 trees, ``predict_proba``) and ``diabetes_lightgbm`` (LightGBM,
100 trees), and ``big_xgboost`` (XGBoost, 1,000 trees of depth 6 on the same data, ``xgboost.json``).
Rows are the datasets' own, repeated to 1,024.

- served: inferd (``--model-control-mode explicit``) on free ports; ``c1``: one client sends one row a
  request; ``c4``: four clients (threads) send 1,024 rows a request. Each client is
  ``lean_http.py``'s: one keep-alive socket, the binary request built once (KServe binary extension),
  so the client's own cost is small. Rows/s over the row's seconds; p50 of the round trips.
- native: the framework's fastest public predict on the same rows in a plain loop, one thread of
  Python, as many OpenMP threads as inferd gives the instance (the cores, one instance): XGBoost's
  ``Booster.inplace_predict`` (``nthread``), LightGBM's ``Booster.predict`` (``num_threads``); and the
  same with one OpenMP thread (``native1``), which on a shared 2-core machine is often the faster: a
  thread team waits for a descheduled member (inferd runs small calls on one thread for that reason).
  Both sides' OpenMP threads sleep when idle (``OMP_WAIT_POLICY=PASSIVE``, inferd's default for tree
  models).
- READY: ``POST /v2/repository/models/big_xgboost/load`` until it answers (the model is READY when it
  does) in a server that has loaded no tree model yet (first: Treelite and XGBoost are imported by the
  load), then unloaded and loaded again (warm).

Native and served alternate within a round; figures are medians over the rounds. Goals (goals.py):
served/native >= 0.9 at c1 and at c4 (rows/s), c1 p50 added <= 100 us, first READY <= 2 s. Run alone it
writes ``benchmarks/results/fil-<UTC>/fil.md`` and ``summary.json``; run.py runs it after its rounds
(``--no-fil`` skips it) and goals.py reads that summary.json.
"""

from __future__ import annotations

import os

# the native loop's OpenMP threads sleep when idle, as inferd's do (backends/fil/engine.py
# passive_openmp): spinning ones made 2-thread calls 10-100x slower on the loaded 2-core machine
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import lean_http
import servers
from bench_paths import ROOT
from side import median, run_alone

MODELS = {"breast_cancer_xgboost": ("xgboost", "cancer"), "diabetes_lightgbm": ("lightgbm", "diabetes")}
BIG = "big_xgboost"
SCENARIOS = (("c1", 1, 1), ("c4", 4, 1024))  # id, clients, rows a request
GOAL_RATIO, GOAL_ADDED_US, GOAL_READY_S = 0.9, 100.0, 2.0


# -- the repository --------------------------------------------------------------------------------


def build(dest: Path) -> None:
    """The two example models and big_xgboost, into ``dest``."""
    sys.path.insert(0, str(ROOT / "examples"))
    import build_models
    import numpy as np
    import xgboost as xgb
    from sklearn.datasets import load_breast_cancer

    build_models.build(dest, set(MODELS))
    x, y = load_breast_cancer(return_X_y=True)
    params = {"objective": "binary:logistic", "max_depth": 6, "nthread": os.cpu_count() or 1, "seed": 1}
    booster = xgb.train(params, xgb.DMatrix(x.astype(np.float32), y), 1000)
    (dest / BIG / "1").mkdir(parents=True, exist_ok=True)
    booster.save_model(str(dest / BIG / "1" / "xgboost.json"))
    config = (dest / "breast_cancer_xgboost" / "config.pbtxt").read_text()
    (dest / BIG / "config.pbtxt").write_text(config.replace("An XGBoost classifier", "1,000 trees:"))


def rows(dataset: str, n: int) -> Any:
    import numpy as np
    from sklearn import datasets

    load = {"cancer": datasets.load_breast_cancer, "diabetes": datasets.load_diabetes}[dataset]
    x = load(return_X_y=True)[0].astype(np.float32)
    return np.ascontiguousarray(np.resize(x, (n, x.shape[1])))


# -- native ----------------------------------------------------------------------------------------


def native_predict(repo: Path, model: str, threads: int) -> Any:
    framework, _ = MODELS[model]
    if framework == "xgboost":
        import xgboost as xgb

        booster = xgb.Booster(model_file=str(repo / model / "1" / "xgboost.json"))
        booster.set_param({"nthread": threads})
        return lambda x: booster.inplace_predict(x)
    import lightgbm as lgb

    lgbm = lgb.Booster(model_file=str(repo / model / "1" / "model.txt"))
    return lambda x: lgbm.predict(x, num_threads=threads)


def measure_native(predict: Any, x: Any, seconds: float) -> dict[str, float]:
    clock = time.perf_counter_ns
    for _ in range(20):
        predict(x)
    lat: list[int] = []
    stop = clock() + int(seconds * 1e9)
    while (t0 := clock()) < stop:
        predict(x)
        lat.append(clock() - t0)
    return {"rows_per_s": len(lat) * x.shape[0] / seconds, "p50_us": statistics.median(lat) / 1000}


# -- served ----------------------------------------------------------------------------------------


def infer_bytes(model: str, x: Any, host: str) -> bytes:
    raw = x.astype("<f4").tobytes()
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "input__0",
                    "shape": list(x.shape),
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": len(raw)},
                }
            ],
            "outputs": [{"name": "output__0", "parameters": {"binary_data": True}}],
        }
    ).encode()
    return lean_http.http_request(
        "POST",
        f"/v2/models/{model}/infer",
        host,
        header + raw,
        f"Inference-Header-Content-Length: {len(header)}\r\nContent-Type: application/octet-stream\r\n",
    )


def measure_served(port: int, model: str, x: Any, clients: int, seconds: float) -> dict[str, float]:
    host = f"127.0.0.1:{port}"
    request = infer_bytes(model, x, host)
    results: list[list[int]] = [[] for _ in range(clients)]

    def client(i: int) -> None:
        conn = lean_http.Connection("127.0.0.1", port)
        try:
            results[i] = lean_http.timed(conn, request, 0.5, seconds)
        finally:
            conn.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lat = sorted(ns for r in results for ns in r)
    return {"rows_per_s": len(lat) * x.shape[0] / seconds, "p50_us": statistics.median(lat) / 1000}


def post(port: int, path: str, body: bytes = b"{}") -> float:
    """Seconds until ``path`` answers 200."""
    conn = lean_http.Connection("127.0.0.1", port)
    try:
        t0 = time.perf_counter()
        status, answer = conn.roundtrip(lean_http.http_request("POST", path, f"127.0.0.1:{port}", body))
        took = time.perf_counter() - t0
    finally:
        conn.close()
    if status != 200:
        raise RuntimeError(f"POST {path}: HTTP {status}: {answer[:300]!r}")
    return took


# -- a round, the run ------------------------------------------------------------------------------


def one_round(repo: Path, out: Path, rnd: int, seconds: float) -> dict[str, Any]:
    server = servers.inferd(repo, out / f"inferd-{rnd}.log", extra="--model-control-mode explicit")
    ports = server.start()
    threads = max(1, len(os.sched_getaffinity(0)))  # inferd's default for one instance: every core
    figures: dict[str, Any] = {}
    try:
        load = f"/v2/repository/models/{BIG}/load"
        figures["ready_first_s"] = post(ports.http, load)
        post(ports.http, f"/v2/repository/models/{BIG}/unload")
        time.sleep(0.5)
        figures["ready_warm_s"] = post(ports.http, load)
        for model in MODELS:
            post(ports.http, f"/v2/repository/models/{model}/load")
        for model, (_, dataset) in MODELS.items():
            predict = {
                "native": native_predict(repo, model, threads),
                "native1": native_predict(repo, model, 1),
            }
            for sid, clients, n in SCENARIOS:
                x = rows(dataset, n)
                order = ("native", "native1", "served") if rnd % 2 else ("served", "native1", "native")
                for side in order:
                    if side in predict:
                        r = measure_native(predict[side], x, seconds)
                    else:
                        r = measure_served(ports.http, model, x, clients, seconds)
                    figures[f"{model}_{sid}_{side}"] = r
    finally:
        server.stop()
    figures["threads"] = threads
    figures["loadavg"] = Path("/proc/loadavg").read_text().split()[:3]
    return figures


def measure(out: Path, rounds: int = 3, seconds: float = 5.0) -> dict[str, Any]:
    repo = out / "models"
    build(repo)
    runs = [one_round(repo, out, i, seconds) for i in range(rounds)]
    summary: dict[str, Any] = {"rounds": runs, "threads": runs[0]["threads"]}
    for key in ("ready_first_s", "ready_warm_s"):
        summary[key] = median(runs, key)
    for model in MODELS:
        for sid, _, _ in SCENARIOS:
            for side in ("native", "native1", "served"):
                rs = [r[f"{model}_{sid}_{side}"] for r in runs]
                summary[f"{model}_{sid}_{side}"] = {k: median(rs, k) for k in ("rows_per_s", "p50_us")}
    return summary


def goal_figures(summary: dict[str, Any]) -> dict[str, float | None]:
    """The goals' figures: each model's served/native ratio at c1 and c4 (``_ratio``: native with the
    same threads, as the goal says; ``_ratio1``: native on one thread), c1's added p50 (``_added_us``,
    ``_added1_us``), the first READY."""
    out: dict[str, float | None] = {"ready_first_s": summary.get("ready_first_s")}
    for model in MODELS:
        for sid, _, _ in SCENARIOS:
            s = summary.get(f"{model}_{sid}_served")
            for side, key in (("native", "ratio"), ("native1", "ratio1")):
                n = summary.get(f"{model}_{sid}_{side}")
                ok = s and n and s["rows_per_s"] and n["rows_per_s"]
                out[f"{model}_{sid}_{key}"] = s["rows_per_s"] / n["rows_per_s"] if ok else None
                if sid == "c1":
                    added = s["p50_us"] - n["p50_us"] if ok and s["p50_us"] and n["p50_us"] else None
                    out[f"{model}_c1_{key.replace('ratio', 'added')}_us"] = added
    return out


def _fmt(v: float | None, digits: int = 0) -> str:
    return "n/a" if v is None else f"{v:,.{digits}f}"


def render(summary: dict[str, Any], load_start: str, load_end: str) -> str:
    g = goal_figures(summary)
    lines = [
        "## Tree models: the fil backend against native predict",
        "",
        "`benchmarks/fil_bench.py`: the example `breast_cancer_xgboost` (XGBoost, 50 trees) and "
        "`diabetes_lightgbm` (LightGBM, 100 trees) served by inferd's fil backend over binary HTTP (lean "
        "keep-alive clients: c1 one client, one row a request; c4 four clients, 1,024 rows a request) "
        "against the same model's native predict in a plain Python loop on the same rows with the same "
        f"threads ({summary.get('threads')}: XGBoost `inplace_predict`, LightGBM `predict`; OpenMP threads "
        "that sleep when idle on both sides, and the native loop on one thread too); medians over "
        f"{len(summary.get('rounds', []))} round(s). Load average {load_start} at the start, {load_end} at the "
        "end. Server, clients and the native loop share the machine's cores.",
        "",
        "| model | scenario | served rows/s | native rows/s (same threads / 1 thread) | served / native "
        "(same / 1 thread) | served p50 (us) | native p50 (us) (same / 1 thread) |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]

    def ratio(v: float | None) -> str:
        return "n/a" if v is None else f"{v:.2f}x"

    for model in MODELS:
        for sid, _, _ in SCENARIOS:
            s = summary[f"{model}_{sid}_served"]
            n, n1 = summary[f"{model}_{sid}_native"], summary[f"{model}_{sid}_native1"]
            lines.append(
                f"| `{model}` | {sid} | {_fmt(s['rows_per_s'])} | {_fmt(n['rows_per_s'])} / "
                f"{_fmt(n1['rows_per_s'])} | {ratio(g[f'{model}_{sid}_ratio'])} / "
                f"{ratio(g[f'{model}_{sid}_ratio1'])} | {_fmt(s['p50_us'])} | {_fmt(n['p50_us'])} / "
                f"{_fmt(n1['p50_us'])} |"
            )
    lines += [
        "",
        f"Time to READY of `{BIG}` (XGBoost, 1,000 trees of depth 6, `xgboost.json`) through the repository "
        f"API: {_fmt(summary.get('ready_first_s'), 2)} s as the server's first tree model (Treelite imported "
        f"by it; XGBoost's engine loads after READY, GTIL answering meanwhile), "
        f"{_fmt(summary.get('ready_warm_s'), 2)} s loaded again. Added p50 at c1 (served p50 minus native "
        "p50, same threads / 1 thread): "
        + "; ".join(
            f"`{m}` {_fmt(g[f'{m}_c1_added_us'])} / {_fmt(g[f'{m}_c1_added1_us'])} us" for m in MODELS
        )
        + ".",
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5.0, help="seconds a row, each side")
    ap.add_argument("--output", type=Path, default=None, help="results folder (default: a new one)")
    a = ap.parse_args()
    return run_alone("fil", a.output, lambda out: measure(out, a.rounds, a.seconds), render)


if __name__ == "__main__":
    sys.exit(main())
