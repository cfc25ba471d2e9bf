"""The async-execute rows: a Python model whose execute awaits I/O for 10 ms, one instance, concurrency 16.

    python benchmarks/async_bench.py                      # inferd and the reference, one after the other
    python benchmarks/async_bench.py --servers inferd --count 3000

Three models, each one instance, max_batch_size 0, in a repository written into the results folder:
``io_sync`` (``def execute``: ``time.sleep(0.01)``), ``io_async`` (``async def execute``: ``await
asyncio.sleep(0.01)``) and ``io_async_decoupled`` (the same, decoupled: answers through its response
sender). perf_analyzer (the reference's, as bench.sh runs it: count windows, sync mode, batch 1) drives
each at concurrency 16: the first two over HTTP, the decoupled one over a gRPC stream (``--streaming``,
the only way perf_analyzer drives a decoupled model). The reference runs coroutine executes of one
instance concurrently only for decoupled models (a non-decoupled ``async def execute`` is awaited to
the end before the next request: observed on 2.51), so its best async figure is the decoupled row.

Goals (issue 16): inferd's ``io_async`` >= 10x inferd's ``io_sync``, and >= the reference's best async row.
Raw output and a Markdown table: ``benchmarks/results/async-<UTC timestamp>/``. Python stdlib only.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from bench_paths import ROOT, TRITON_SH

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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_repository(dest: Path) -> Path:
    for name, body in MODEL_BODY.items():
        (dest / name / "1").mkdir(parents=True, exist_ok=True)
        (dest / name / "1" / "model.py").write_text(body.lstrip())
        extra = "model_transaction_policy { decoupled: True }\n" if "decoupled" in name else ""
        (dest / name / "config.pbtxt").write_text(CONFIG.format(name=name, count=1, extra=extra))
    return dest


def wait_ready(http: int, proc: subprocess.Popen[bytes] | None, timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError("server exited during start")
        try:
            if urllib.request.urlopen(f"http://127.0.0.1:{http}/v2/health/ready", timeout=1).status == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError("server not ready")


class Inferd:
    name = "inferd"

    def __init__(self, repo: Path, log: Path, python: str) -> None:
        self.repo, self.log, self.python = repo, log, python
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> tuple[int, int]:
        self.http, self.grpc = free_port(), free_port()
        cmd = [self.python, "-m", "inferd", "serve", "--model-repository", str(self.repo), "--http-port",
               str(self.http), "--grpc-port", str(self.grpc), "--metrics-port", str(free_port())]  # fmt: skip
        env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
        with open(self.log, "ab") as f:
            self.proc = subprocess.Popen(
                cmd, stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        wait_ready(self.http, self.proc)
        return self.http, self.grpc

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(30)


class Reference:
    name = "reference"

    def __init__(self, repo: Path, log: Path) -> None:
        self.repo, self.log = repo, log

    def start(self) -> tuple[int, int]:
        self.http, self.grpc, metrics = free_port(), free_port(), free_port()
        args = ["bash", str(TRITON_SH), "start", str(self.repo), str(self.http), str(self.grpc)]
        with open(self.log, "ab") as f:
            subprocess.run([*args, str(metrics)], check=True, stdout=f, stderr=subprocess.STDOUT)
        return self.http, self.grpc

    def stop(self) -> None:
        subprocess.run(["bash", str(TRITON_SH), "stop", str(self.repo), str(self.http)],
                       capture_output=True)  # fmt: skip


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
    cmd = [str(pa), "-v", "-m", model, "-i", proto, "-u", url, "--concurrency-range", str(concurrency), "-b", "1",
           *(["--shape", shape] if shape else []), "--measurement-mode", "count_windows", "--measurement-request-count", str(count),
           "-s", "25", "-r", "6", *extra, "-f", str(out_csv)]  # fmt: skip
    with open(raw, "w") as f:
        rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, timeout=300).returncode
    if rc != 0 or not out_csv.exists():
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
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--count", type=int, default=2000, help="requests per measurement window (async rows)")
    ap.add_argument("--python", default=sys.executable, help="the interpreter that runs inferd")
    args = ap.parse_args()
    out = ROOT / "benchmarks" / "results" / time.strftime("async-%Y%m%d-%H%M%S", time.gmtime())
    repo = write_repository(out / "models")
    load_start = Path("/proc/loadavg").read_text().split()[:3]
    results: dict[str, dict[str, dict[str, float]]] = {}
    for name in args.servers.split(","):
        server = (
            Inferd(repo, out / "inferd.log", args.python)
            if name == "inferd"
            else Reference(repo, out / "reference.log")
        )
        http, grpc = server.start()
        try:
            for row, model, proto, extra, factor in ROWS:
                url = f"localhost:{http}" if proto == "http" else f"localhost:{grpc}"
                count = max(50, int(args.count * factor))
                got = perf_analyzer(
                    model, url, proto, extra, count, args.concurrency, out / f"{name}-{row}.txt"
                )
                results.setdefault(row, {})[name] = got
                print(f"{name:9} {row:38} {got}", flush=True)
        finally:
            server.stop()
    load_end = Path("/proc/loadavg").read_text().split()[:3]
    lines = [
        f"Load average at start / end: {' '.join(load_start)} / {' '.join(load_end)}; concurrency {args.concurrency}.",
        "",
        "| row | inferd infer/s | inferd p50 / p99 (us) | reference infer/s | reference p50 / p99 (us) |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for row, *_ in ROWS:
        cells = []
        for name in ("inferd", "reference"):
            r = results.get(row, {}).get(name)
            cells += (
                [f"{r['infer_per_s']:,.1f}", f"{r['p50_us']:,.0f} / {r['p99_us']:,.0f}"] if r else ["-", "-"]
            )
        lines.append(f"| `{row}` | " + " | ".join(cells) + " |")
    inferd = {row: r.get("inferd", {}).get("infer_per_s") for row, r in results.items()}
    ref = {row: r.get("reference", {}).get("infer_per_s") for row, r in results.items()}
    if inferd.get("io_async_http_c16") and inferd.get("io_sync_http_c16"):
        lines.append(
            f"\ninferd async / inferd sync: {inferd['io_async_http_c16'] / inferd['io_sync_http_c16']:.1f}x"
        )
    best_ref = max((v for k, v in ref.items() if k != "io_sync_http_c16" and v), default=None)
    if inferd.get("io_async_http_c16") and best_ref:
        lines.append(
            f"inferd async (HTTP) / reference's best async row: {inferd['io_async_http_c16'] / best_ref:.2f}x"
        )
    text = "\n".join(lines) + "\n"
    (out / "async_io.md").write_text(text)
    (out / "summary.json").write_text(json.dumps(results, indent=1))
    print(text)
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
