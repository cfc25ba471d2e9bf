#!/usr/bin/env python3
"""SageMaker's ``POST /invocations`` (add_sub) at concurrency 8: inferd against the reference, alternating.

    .venv/bin/python benchmarks/sagemaker_bench.py [--rounds 3] [--seconds 8] [--body binary|json]

perf_analyzer speaks only the KServe paths, so the client is wrk (``apt install wrk``: C, epoll, two
threads, keep-alive; a Lua script posts the prepared body), or without it lean_http's Connection in
``--concurrency`` threads (a Python client: on two shared cores it holds the server back more than
perf_analyzer does, so compare its figures with its own only). Either shares the cores with the
server, the same for both servers: compare the ratio, not the figures across machines. The server's
CPU per request (benchmarks/cpu.py) is printed beside the rate: the steadier figure on a shared
machine, and the one that carries over to a client on other cores. The body
is add_sub's batch-1 request, binary (SageMaker's ``binary+json;json-header-size=N`` content type) or
JSON. Each round starts the reference (scripts/reference/triton.sh, ``--allow-sagemaker``) and inferd
(``--allow-sagemaker``) in turn, each warmed up, each alone on the machine while measured. Prints one
JSON line per server and round, then the medians and their ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_paths import REFERENCE_MODELS, ROOT, TRITON_SH
from cpu import CpuMeter
from lean_http import Connection, http_request

MIME = "application/vnd.sagemaker-triton.binary+json;json-header-size="


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def kserve_request(host: str) -> bytes:
    """The same binary request on the HTTP API's path, for comparison (``--path kserve``)."""
    raw = request("binary", host)
    head, _, body = raw.partition(b"\r\n\r\n")
    size = int(head.rsplit(b"json-header-size=", 1)[1].split(b"\r\n")[0])
    extra = f"Inference-Header-Content-Length: {size}\r\nContent-Type: application/octet-stream\r\n"
    return http_request("POST", "/v2/models/add_sub/infer", host, body, extra)


def request(kind: str, host: str) -> bytes:
    seq = [float(i) for i in range(16)]
    if kind == "json":
        doc = {
            "inputs": [
                {"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": seq},
                {"name": "INPUT1", "shape": [1, 16], "datatype": "FP32", "data": [1.0] * 16},
            ]
        }
        return http_request(
            "POST", "/invocations", host, json.dumps(doc).encode(), "Content-Type: application/json\r\n"
        )
    head = json.dumps(
        {
            "inputs": [
                {"name": n, "shape": [1, 16], "datatype": "FP32", "parameters": {"binary_data_size": 64}}
                for n in ("INPUT0", "INPUT1")
            ],
            "outputs": [{"name": n, "parameters": {"binary_data": True}} for n in ("OUTPUT0", "OUTPUT1")],
        }
    ).encode()
    body = head + struct.pack("<16f", *seq) + struct.pack("<16f", *([1.0] * 16))
    return http_request("POST", "/invocations", host, body, f"Content-Type: {MIME}{len(head)}\r\n")


def drive(port: int, payload: bytes, concurrency: int, warmup_s: float, seconds: float) -> dict[str, Any]:
    """``concurrency`` connections sending ``payload`` back to back; answers counted in the window."""
    start = time.monotonic() + warmup_s
    stop = start + seconds
    counts = [0] * concurrency
    latencies: list[list[float]] = [[] for _ in range(concurrency)]
    failures: list[str] = []

    def one(i: int) -> None:
        conn = Connection("127.0.0.1", port)
        try:
            while True:
                t0 = time.monotonic()
                status, body = conn.roundtrip(payload)
                t1 = time.monotonic()
                if status != 200:
                    failures.append(f"HTTP {status}: {body[:200]!r}")
                    return
                if t1 >= stop:
                    return
                if t0 >= start:
                    counts[i] += 1
                    latencies[i].append(t1 - t0)
        finally:
            conn.close()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        raise SystemExit(f"sagemaker_bench: {failures[0]}")
    lat = sorted(x for per in latencies for x in per)
    return {
        "infer_per_s": sum(counts) / seconds,
        "p50_ms": statistics.median(lat) * 1e3,
        "p99_ms": lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1e3,
    }


def wait_port(port: int, proc: subprocess.Popen[bytes] | None, what: str) -> None:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        if proc is not None and proc.poll() is not None:
            raise SystemExit(f"{what} exited")
        time.sleep(0.1)
    raise SystemExit(f"{what} did not listen on {port}")


_WRK_SCRIPT = """
local f = io.open(os.getenv("BENCH_BODY"), "rb")
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
for name, value in string.gmatch(os.getenv("BENCH_HEADERS"), "([^:\\n]+): ([^\\n]*)") do
  wrk.headers[name] = value
end
"""


def drive_wrk(port: int, payload: bytes, concurrency: int, warmup_s: float, seconds: float) -> dict[str, Any]:
    """The same requests from wrk (C, epoll, two threads: a client that costs far less than the
    server, as perf_analyzer is to the KServe paths): a warm-up run, then the measured one."""
    head, _, body = payload.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    path = lines[0].split()[1]
    kept = [ln for ln in lines[1:] if ln.split(":", 1)[0].lower() not in ("host", "content-length")]
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "body").write_bytes(body)
        (Path(tmp) / "post.lua").write_text(_WRK_SCRIPT)
        env = dict(os.environ, BENCH_BODY=str(Path(tmp) / "body"), BENCH_HEADERS="\n".join(kept))
        url = f"http://127.0.0.1:{port}{path}"

        def run(secs: float) -> str:
            cmd = [
                "wrk",
                "-t2",
                f"-c{concurrency}",
                f"-d{max(1, round(secs))}s",
                "--latency",
                "-s",
                str(Path(tmp) / "post.lua"),
                url,
            ]
            return subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout

        run(warmup_s)
        text = run(seconds)
    if "Non-2xx" in text or "error" in text.lower():  # (a script error leaves wrk sending GETs)
        raise SystemExit(f"sagemaker_bench: failed requests:\n{text}")
    rate = float(text.split("Requests/sec:")[1].split()[0])

    def ms(label: str) -> float:
        m = re.match(r"([0-9.]+)(us|ms|s)", text.split(label, 1)[1].split()[0])
        assert m is not None, text
        return float(m.group(1)) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[m.group(2)]

    return {"infer_per_s": rate, "p50_ms": ms(" 50%"), "p99_ms": ms(" 99%")}


def measured(pid: int, http: int, port: int, payload: bytes, a: argparse.Namespace) -> dict[str, Any]:
    """``drive`` with the server's CPU per request (its process tree's CPU over the successes its
    statistics count, warm-up included on both sides: the steadier figure on a shared machine)."""
    meter = CpuMeter(pid, http, "add_sub")
    client = drive_wrk if a.client == "wrk" else drive
    out = client(port, payload, a.concurrency, a.warmup, a.seconds)
    out["cpu_us_per_request"] = meter.us_per_success()
    return out


def reference_round(repo: Path, a: argparse.Namespace) -> dict[str, Any]:
    http, grpc, metrics, sm = (free_port() for _ in range(4))
    env = dict(
        os.environ,
        SAGEMAKER_TRITON_DEFAULT_MODEL_NAME="add_sub",
        TRITON_EXTRA_ARGS=f"--allow-sagemaker=true --sagemaker-port={sm}",
    )
    subprocess.run(
        ["bash", str(TRITON_SH), "start", str(repo), str(http), str(grpc), str(metrics)],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    try:
        wait_port(sm, None, "the reference's SageMaker port")
        run_dir = Path(
            os.environ.get("ANCHOR_RUN_DIR")
            or Path(os.environ.get("TMPDIR", "/tmp")) / "inferd-reference" / "run"
        )
        pid = int((run_dir / f"triton-{http}.pid").read_text())
        if a.path == "kserve":
            return measured(pid, http, http, kserve_request(f"127.0.0.1:{http}"), a)
        return measured(pid, http, sm, request(a.body, f"127.0.0.1:{sm}"), a)
    finally:
        subprocess.run(
            ["bash", str(TRITON_SH), "stop", str(repo), str(http)], check=False, stdout=subprocess.DEVNULL
        )


def inferd_round(repo: Path, a: argparse.Namespace) -> dict[str, Any]:
    http, grpc, metrics, sm = (free_port() for _ in range(4))
    env = dict(os.environ, SAGEMAKER_TRITON_DEFAULT_MODEL_NAME="add_sub", PYTHONPATH=str(ROOT / "src"))
    cmd = [
        sys.executable,
        "-m",
        "inferd",
        "serve",
        f"--model-repository={repo}",
        f"--http-port={http}",
        f"--grpc-port={grpc}",
        f"--metrics-port={metrics}",
        "--allow-sagemaker=true",
        f"--sagemaker-port={sm}",
    ]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(sm, proc, "inferd's SageMaker port")
        wait_port(http, proc, "inferd's HTTP port")
        if a.path == "kserve":
            return measured(proc.pid, http, http, kserve_request(f"127.0.0.1:{http}"), a)
        return measured(proc.pid, http, sm, request(a.body, f"127.0.0.1:{sm}"), a)
    finally:
        proc.terminate()
        proc.wait(30)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--warmup", type=float, default=2.0)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--body", choices=("binary", "json"), default="binary")
    ap.add_argument(
        "--client",
        choices=("wrk", "python"),
        default="wrk" if shutil.which("wrk") else "python",
        help="wrk (apt install wrk; the default when installed) or threads of lean_http's Connection",
    )
    ap.add_argument(
        "--path",
        choices=("invocations", "kserve"),
        default="invocations",
        help="kserve: /v2/models/add_sub/infer",
    )
    a = ap.parse_args()
    results: dict[str, list[float]] = {"reference": [], "inferd": []}
    cpu: dict[str, list[float]] = {"reference": [], "inferd": []}
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "models"
        repo.mkdir()
        shutil.copytree(
            REFERENCE_MODELS / "add_sub", repo / "add_sub", ignore=shutil.ignore_patterns("__pycache__")
        )
        for r in range(a.rounds):
            for name, fn in (("reference", reference_round), ("inferd", inferd_round)):
                out = fn(repo, a)
                results[name].append(out["infer_per_s"])
                if out["cpu_us_per_request"] is not None:
                    cpu[name].append(out["cpu_us_per_request"])
                print(
                    json.dumps({"round": r, "server": name, "path": a.path, "body": a.body, **out}),
                    flush=True,
                )
    ref, mine = statistics.median(results["reference"]), statistics.median(results["inferd"])
    summary = {"median_reference": ref, "median_inferd": mine, "ratio": mine / ref}
    if cpu["reference"] and cpu["inferd"]:
        summary["cpu_us_reference"] = statistics.median(cpu["reference"])
        summary["cpu_us_inferd"] = statistics.median(cpu["inferd"])
        summary["cpu_ratio"] = summary["cpu_us_reference"] / summary["cpu_us_inferd"]
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
