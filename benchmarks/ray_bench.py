"""add_sub at concurrency 8 through Ray Serve (``inferd serve-ray``, 1 and 2 replicas) against plain
``inferd serve``, HTTP and gRPC, with perf_analyzer (issue 14's performance rows).

A two-node Ray cluster (head and worker on 127.0.0.1, one CPU each) is started here and stopped
after; each replica reserves half a CPU. ``render()`` returns the markdown section.

    .venv/bin/python benchmarks/ray_bench.py [--rounds 3] [--count 1000]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import servers
from async_bench import perf_analyzer
from bench_paths import ROOT

REPO = ROOT / "tests" / "fixtures" / "reference_models"
CONCURRENCY = 8
ROWS = (("http", ""), ("grpc", ""))


def _free() -> int:
    return servers.free_ports().http


class RayNodes:
    """``ray start --block`` nodes, each in a session of its own (stopped by process group)."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.port = _free()
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, *args: str) -> None:
        log = self.out / f"node{len(self.procs)}.log"
        with open(log, "wb") as f:
            proc = subprocess.Popen(
                [str(Path(sys.executable).with_name("ray")), "start", "--block", "--disable-usage-stats",
                 "--node-ip-address=127.0.0.1", "--num-cpus=1", *args],
                stdout=f, stderr=subprocess.STDOUT, start_new_session=True,
                env=dict(os.environ, RAY_USAGE_STATS_ENABLED="0"),
            )  # fmt: skip
        self.procs.append(proc)
        deadline = time.monotonic() + 120
        while b"--block" not in log.read_bytes():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"Ray node did not start: {servers.tail(log)}")
            time.sleep(0.2)

    def stop(self) -> None:
        for proc in reversed(self.procs):
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.killpg(proc.pid, sig)
                    proc.wait(15)
                    break
                except ProcessLookupError:
                    break
                except subprocess.TimeoutExpired:
                    continue
        self.procs.clear()


def measure(url_http: str, url_grpc: str, count: int, out: Path, tag: str) -> dict[str, dict[str, float]]:
    got: dict[str, dict[str, float]] = {}
    for proto, _ in ROWS:
        url = url_http if proto == "http" else url_grpc
        got[proto] = perf_analyzer(
            "add_sub", url, proto, [], count, CONCURRENCY, out / f"{tag}-{proto}.txt", None
        )
        print(f"{tag:10} {proto:5} {got[proto]}", flush=True)
    return got


def run(count: int, out: Path) -> dict[str, dict[str, dict[str, float]]]:
    results: dict[str, dict[str, dict[str, float]]] = {}
    plain = servers.inferd(REPO, out / "inferd.log")
    ports = plain.start()
    try:
        results["inferd serve"] = measure(
            f"localhost:{ports.http}", f"localhost:{ports.grpc}", count, out, "plain"
        )
    finally:
        plain.stop()
    nodes = RayNodes(out)
    try:
        nodes.start("--head", f"--port={nodes.port}", "--include-dashboard=false")
        nodes.start(f"--address=127.0.0.1:{nodes.port}")
        http, grpc = _free(), _free()
        for replicas in (1, 2):
            deploy = subprocess.run(
                [sys.executable, "-m", "inferd", "serve-ray", f"--model-repository={REPO}",
                 f"--address=127.0.0.1:{nodes.port}", "--http-address=127.0.0.1", f"--http-port={http}",
                 f"--grpc-port={grpc}", f"--min-replicas={replicas}", "--replica-cpus=0.5"],
                capture_output=True, text=True, timeout=300,
            )  # fmt: skip
            if deploy.returncode != 0:
                raise RuntimeError(deploy.stdout + deploy.stderr)
            tag = f"serve x{replicas}"
            results[tag] = measure(f"127.0.0.1:{http}", f"127.0.0.1:{grpc}", count, out, tag.replace(" ", ""))
    finally:
        nodes.stop()
    return results


Runs = dict[str, dict[str, list[dict[str, float]]]]  # path -> protocol -> one dict per round


def _median(runs: list[dict[str, float]], key: str) -> float | None:
    vals = sorted(r[key] for r in runs if r)
    return vals[len(vals) // 2] if vals else None


def render(results: Runs, load: tuple[str, str], rounds: int) -> str:
    """The section: median infer/s (with each round's) and p99 per path and protocol, and each Serve
    path against plain ``inferd serve``."""
    lines = [
        "## Ray Serve (add_sub, perf_analyzer, concurrency 8)",
        "",
        "`benchmarks/ray_bench.py`, run after the rounds above: plain `inferd serve`, then `inferd serve-ray` on "
        "two Ray nodes on this machine (one CPU each, replicas half a CPU) with 1 and then 2 replicas, through "
        f"Serve's HTTP and gRPC proxies. {rounds} round(s); load average at start / end: {load[0]} / {load[1]}.",
        "",
        "| path | HTTP infer/s (median; rounds) | HTTP p99 (ms) | gRPC infer/s (median; rounds) | gRPC p99 (ms) "
        "| HTTP / plain | gRPC / plain |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    base = results.get("inferd serve", {})
    for row, got in results.items():
        cells = [row]
        for proto in ("http", "grpc"):
            runs = got.get(proto, [])
            m, p99 = _median(runs, "infer_per_s"), _median(runs, "p99_us")
            per = " ".join(f"{r['infer_per_s']:.0f}" if r else "-" for r in runs)
            cells += [f"{m:.0f} ({per})" if m is not None else "failed", f"{p99 / 1000:.1f}" if p99 else "-"]
        for proto in ("http", "grpc"):
            m, b = _median(got.get(proto, []), "infer_per_s"), _median(base.get(proto, []), "infer_per_s")
            cells.append(f"{m / b:.2f}x" if m is not None and b else "-")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--count", type=int, default=1000, help="requests per measurement window")
    ap.add_argument("--output", type=Path, default=None, help="results folder (default: a new one)")
    args = ap.parse_args()
    out = args.output or ROOT / "benchmarks" / "results" / time.strftime("ray-%Y%m%d-%H%M%S", time.gmtime())
    out.mkdir(parents=True, exist_ok=True)
    start = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    results: Runs = {}
    for rnd in range(1, args.rounds + 1):
        (out / f"r{rnd}").mkdir(exist_ok=True)
        for path, got in run(args.count, out / f"r{rnd}").items():
            for proto in ("http", "grpc"):
                results.setdefault(path, {}).setdefault(proto, []).append(got.get(proto, {}))
    end = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    text = render(results, (start, end), args.rounds)
    (out / "ray.md").write_text(text)
    (out / "summary.json").write_text(json.dumps(results, indent=1))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
