"""The async-execute rows: a Python model whose execute awaits I/O for 10 ms, one instance, concurrency 16.

    python benchmarks/async_bench.py                      # 3 rounds, inferd and the reference in turn
    python benchmarks/async_bench.py --rounds 1 --servers inferd --count 3000

Three models, each one instance, max_batch_size 0, in a repository written into the results folder:
``io_sync`` (``def execute``: ``time.sleep(0.01)``), ``io_async`` (``async def execute``: ``await
asyncio.sleep(0.01)``) and ``io_async_decoupled`` (the same, decoupled: answers through its response
sender). perf_analyzer (the reference's, as bench.sh runs it: count windows, sync mode, batch 1) drives
each at concurrency 16: the first two over HTTP, the decoupled one over a gRPC stream (``--streaming``,
the only way perf_analyzer drives a decoupled model). The reference runs coroutine executes of one
instance concurrently only for decoupled models (a non-decoupled ``async def execute`` is awaited to
the end before the next request: observed on 2.51), so its best async figure is the decoupled row.

Goals (issue 16): inferd's ``io_async`` >= 10x inferd's ``io_sync``, and >= the reference's best async row.
Medians over the rounds with the per-round figures and ratios (who goes first flips each round), raw
output and a Markdown table: ``benchmarks/results/async-<UTC timestamp>/async.md`` (or ``--output``);
``make bench`` runs it after its rounds (``benchmarks/run.py``'s ``AsyncSection``). Python stdlib only.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import servers
from bench_paths import ROOT

ANCHOR = Path(os.environ.get("ANCHOR_DIR", Path(os.environ.get("TMPDIR", "/tmp")) / "inferd-reference"))

MODEL_BODY = {
    "io_sync": """
import time
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        time.sleep(0.01)  # 10 ms of I/O, blocking
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", r.inputs()[0].as_numpy())]) for r in requests]
""",
    "io_async": """
import asyncio
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        await asyncio.sleep(0.01)  # 10 ms of I/O, awaited
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", r.inputs()[0].as_numpy())]) for r in requests]
""",
    "io_async_decoupled": """
import asyncio
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        await asyncio.sleep(0.01)  # 10 ms of I/O, awaited
        for r in requests:
            r.get_response_sender().send(
                pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", r.inputs()[0].as_numpy())]),
                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
            )
        return None
""",
}
CONFIG = """name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
instance_group [ {{ kind: KIND_CPU count: {count} }} ]
{extra}"""

#: (row id, model, protocol, extra perf_analyzer flags, request count factor)
ROWS = [
    ("io_sync_http_c16", "io_sync", "http", [], 0.1),  # ~100/s: a tenth of the count keeps it short
    ("io_async_http_c16", "io_async", "http", [], 1.0),
    ("io_async_decoupled_grpc_stream_c16", "io_async_decoupled", "grpc", ["--streaming"], 1.0),
]


def write_repository(dest: Path) -> Path:
    for name, body in MODEL_BODY.items():
        (dest / name / "1").mkdir(parents=True, exist_ok=True)
        (dest / name / "1" / "model.py").write_text(body.lstrip())
        extra = "model_transaction_policy { decoupled: True }\n" if "decoupled" in name else ""
        (dest / name / "config.pbtxt").write_text(CONFIG.format(name=name, count=1, extra=extra))
    return dest


def perf_analyzer(
    model: str,
    url: str,
    proto: str,
    extra: list[str],
    count: int,
    concurrency: int,
    raw: Path,
    shape: str | None = "INPUT0:4",
) -> dict[str, float]:
    pa = ANCHOR / "perf_analyzer"
    venv_site = next((ANCHOR / "venv-triton" / "lib").glob("python3*/site-packages"))
    env = dict(os.environ, LD_LIBRARY_PATH=str(venv_site / "nvidia" / "cuda_runtime" / "lib"))
    out_csv = raw.with_suffix(".csv")
    # bench.sh's settings: -s 25 -r 6, and when that finds no stable windows one "loose" retry at -s 100 -r 4
    for stability, trials in (("25", "6"), ("100", "4")):
        out_csv.unlink(missing_ok=True)
        cmd = [str(pa), "-v", "-m", model, "-i", proto, "-u", url, "--concurrency-range", str(concurrency), "-b", "1",
               *(["--shape", shape] if shape else []), "--measurement-mode", "count_windows", "--measurement-request-count", str(count),
               "-s", stability, "-r", trials, *extra, "-f", str(out_csv)]  # fmt: skip
        with open(raw, "a") as f:
            rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, timeout=300).returncode
        if rc == 0 and out_csv.exists():
            break
    else:
        return {}
    with open(out_csv) as f:
        row = next(csv.DictReader(f))
    return {
        "infer_per_s": float(row["Inferences/Second"]),
        "p50_us": float(row["p50 latency"]),
        "p99_us": float(row["p99 latency"]),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--servers", default="inferd,reference")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--count", type=int, default=2000, help="requests per measurement window (async rows)")
    ap.add_argument("--python", default=sys.executable, help="the interpreter that runs inferd")
    ap.add_argument("--output", type=Path, default=None, help="results folder (default: a new one)")
    args = ap.parse_args()
    out = args.output or ROOT / "benchmarks" / "results" / time.strftime("async-%Y%m%d-%H%M%S", time.gmtime())
    repo = write_repository(out / "models")
    load_start = Path("/proc/loadavg").read_text().split()[:3]
    names = args.servers.split(",")
    #: row -> server -> one dict per round (empty: perf_analyzer failed that round)
    results: dict[str, dict[str, list[dict[str, float]]]] = {}
    for rnd in range(1, args.rounds + 1):
        for name in names if rnd % 2 else list(reversed(names)):  # who goes first flips each round
            server = (
                servers.inferd(repo, out / "inferd.log", args.python)
                if name == "inferd"
                else servers.reference(repo, out / "reference.log")
            )
            ports = server.start()
            http, grpc = ports.http, ports.grpc
            try:
                for row, model, proto, extra, factor in ROWS:
                    url = f"localhost:{http}" if proto == "http" else f"localhost:{grpc}"
                    count = max(50, int(args.count * factor))
                    raw = out / f"r{rnd}-{name}-{row}.txt"
                    got = perf_analyzer(model, url, proto, extra, count, args.concurrency, raw)
                    results.setdefault(row, {}).setdefault(name, []).append(got)
                    print(f"round {rnd} {name:9} {row:38} {got}", flush=True)
            finally:
                server.stop()
    load_end = Path("/proc/loadavg").read_text().split()[:3]
    text = render(results, load_start, load_end, args.rounds, args.concurrency)
    (out / "async.md").write_text(text)
    (out / "summary.json").write_text(json.dumps(results, indent=1))
    print(text)
    print(f"results: {out}")
    return 0


def median(runs: list[dict[str, float]], key: str) -> float | None:
    vals = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(vals) if vals else None


#: the async rows the reference's best is taken from (its non-decoupled async row runs one at a time)
ASYNC_ROWS = ("io_async_http_c16", "io_async_decoupled_grpc_stream_c16")


def render(
    results: dict[str, dict[str, list[dict[str, float]]]],
    start: list[str],
    end: list[str],
    rounds: int,
    concurrency: int,
) -> str:
    """The rows (medians with each round's figure) and the two ratios of issue 16's goals, from the
    medians and round by round (a round's servers ran minutes apart, on the same machine)."""
    lines = [
        f"{rounds} round(s), concurrency {concurrency}; load average at start / end: "
        f"{' '.join(start)} / {' '.join(end)}.",
        "",
        "| row | inferd infer/s (median; rounds) | inferd p50 / p99 (us) | reference infer/s (median; rounds) "
        "| reference p50 / p99 (us) | inferd / reference |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    med: dict[tuple[str, str], float | None] = {}
    for row, *_ in ROWS:
        cells = []
        for name in ("inferd", "reference"):
            runs = results.get(row, {}).get(name, [])
            m = med[row, name] = median(runs, "infer_per_s")
            per = ", ".join(f"{r['infer_per_s']:,.0f}" if r else "-" for r in runs)
            p50, p99 = median(runs, "p50_us"), median(runs, "p99_us")
            cells += (
                [f"{m:,.1f} ({per})", f"{p50:,.0f} / {p99:,.0f}" if p50 and p99 else "-"] if m else ["-", "-"]
            )
        x, y = med[row, "inferd"], med[row, "reference"]
        cells.append(f"{x / y:.2f}x" if x and y else "-")
        lines.append(f"| `{row}` | " + " | ".join(cells) + " |")

    def per_round(name: str, row: str) -> list[float | None]:
        return [r.get("infer_per_s") for r in results.get(row, {}).get(name, [])]

    def best_reference(i: int | None) -> float | None:
        """The reference's best async row: of the medians, or of round ``i``'s figures."""
        vals = [
            med.get((row, "reference")) if i is None else _at(per_round("reference", row), i)
            for row in ASYNC_ROWS
        ]
        return max((v for v in vals if v), default=None)

    def ratios(top: list[float | None], bottom: list[float | None]) -> str:
        each = [f"{a / b:.2f}x" if a and b else "-" for a, b in zip(top, bottom, strict=False)]
        return f" (rounds: {', '.join(each)})" if any(x != "-" for x in each) else ""

    asyncs, syncs = per_round("inferd", "io_async_http_c16"), per_round("inferd", "io_sync_http_c16")
    best = [best_reference(i) for i in range(len(asyncs))]
    a, s, r = (
        med.get(("io_async_http_c16", "inferd")),
        med.get(("io_sync_http_c16", "inferd")),
        best_reference(None),
    )
    lines += [
        "",
        f"- inferd `io_async` / inferd `io_sync` (HTTP): {f'{a / s:.2f}x' if a and s else 'n/a'}"
        f"{ratios(asyncs, syncs)} (goal >= 10x)",
        f"- inferd `io_async` (HTTP) / the reference's best async row: {f'{a / r:.2f}x' if a and r else 'n/a'}"
        f"{ratios(asyncs, best)} (goal >= 1.0x)",
    ]
    return "\n".join(lines) + "\n"


def _at(values: list[float | None], i: int) -> float | None:
    return values[i] if i < len(values) else None


if __name__ == "__main__":
    sys.exit(main())
