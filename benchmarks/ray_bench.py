"""add_sub at concurrency 8 through Ray Serve (``inferd serve-ray``) against plain ``inferd serve``,
HTTP and gRPC, with perf_analyzer (issue 14's performance rows), and the CPU each request costs.

A two-node Ray cluster (head and worker on 127.0.0.1, one CPU each) is started here and stopped
after; each replica reserves half a CPU. The rows: plain ``inferd serve``; one replica with
serve-ray's defaults; one replica with Serve's own defaults for the two settings serve-ray sets
(``--run-user-code-in-separate-thread=true --access-log=true``); two replicas. ``--settings``
measures each of the two settings alone instead (one replica; what chose serve-ray's defaults).

CPU per request: the CPU time of every process of the cluster (both nodes' process trees: Serve's
controller, proxy and replicas, Ray's own daemons) over the successes the statistics count, around
each perf_analyzer run (``cpu.py``; plain ``inferd serve``: its own process tree). Ray's daemons'
idle CPU is in it: measured alone (``idle``) and left in, it is small beside a request's cost.
Each row is deployed on a Serve started for it (``--delete`` stops Serve with the last
application), because the proxies' access log is set when Serve starts. ``render()`` returns the
markdown section.

    .venv/bin/python benchmarks/ray_bench.py [--rounds 3] [--count 1000] [--settings]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import servers
from async_bench import perf_analyzer
from bench_paths import ROOT
from cpu import cpu_seconds, successes

REPO = ROOT / "tests" / "fixtures" / "reference_models"
CONCURRENCY = 8
PROTOCOLS = ("http", "grpc")
PLAIN = "inferd serve"
IDLE_S = 5.0
#: a process's role in the cluster, by the title Ray gives its worker processes
ROLES = {"proxy": b"ray::ProxyActor", "replica": b"ray::ServeReplica"}
_TICK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Row:
    """One Serve deployment measured: its label, replicas and Serve's two per-request settings."""

    label: str
    replicas: int
    separate_thread: bool
    access_log: bool

    @property
    def tag(self) -> str:
        """The label as a file name (perf_analyzer's raw output)."""
        return "-".join("".join(c if c.isalnum() else " " for c in self.label).split())

    def flags(self) -> list[str]:
        return [
            f"--min-replicas={self.replicas}",
            f"--run-user-code-in-separate-thread={str(self.separate_thread).lower()}",
            f"--access-log={str(self.access_log).lower()}",
        ]


ROWS = (
    Row("serve x1", 1, False, False),
    Row("serve x1, Serve's defaults", 1, True, True),
    Row("serve x2", 2, False, False),
)
SETTINGS_ROWS = (
    Row("x1: thread, access log (Serve's defaults)", 1, True, True),
    Row("x1: thread, no access log", 1, True, False),
    Row("x1: replica's loop, access log", 1, False, True),
    Row("x1: replica's loop, no access log (serve-ray's defaults)", 1, False, False),
)


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

    def cpu(self) -> dict[str, float]:
        """CPU seconds so far of the cluster's processes, by role (``ROLES``: Serve's proxies, the
        replicas, the rest: Serve's controller and Ray's daemons) and in all."""
        parents: dict[int, int] = {}
        seconds: dict[int, float] = {}
        titles: dict[int, bytes] = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                titles[int(entry.name)] = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            parents[int(entry.name)] = int(fields[1])
            seconds[int(entry.name)] = (int(fields[11]) + int(fields[12])) / _TICK
        out = dict.fromkeys((*ROLES, "other"), 0.0)
        todo = [p.pid for p in self.procs]
        while todo:
            pid = todo.pop()
            role = next((r for r, title in ROLES.items() if titles.get(pid, b"").startswith(title)), "other")
            out[role] += seconds.get(pid, 0.0)
            todo += [child for child, parent in parents.items() if parent == pid]
        out["all"] = sum(out.values())
        return out

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


def measure(
    urls: dict[str, str],
    http_port: int,
    cpu: Callable[[], dict[str, float]],
    count: int,
    out: Path,
    tag: str,
) -> dict[str, dict[str, float]]:
    """perf_analyzer on each protocol, with the CPU per success (ms) ``cpu()`` grew by, in all
    (``cpu_ms``) and by role (``cpu_ms_<role>``)."""
    got: dict[str, dict[str, float]] = {}
    for proto in PROTOCOLS:
        cpu0, n0 = cpu(), successes(http_port, "add_sub")
        row = perf_analyzer(
            "add_sub", urls[proto], proto, [], count, CONCURRENCY, out / f"{tag}-{proto}.txt", None
        )
        cpu1, n1 = cpu(), successes(http_port, "add_sub")
        if row and n0 is not None and n1 is not None and n1 > n0:
            for role, seconds in cpu1.items():
                key = "cpu_ms" if role == "all" else f"cpu_ms_{role}"
                row[key] = (seconds - cpu0[role]) / (n1 - n0) * 1000
        got[proto] = row
        print(f"{tag:10} {proto:5} {row}", flush=True)
    return got


def _serve_ray(nodes: RayNodes, http: int, grpc: int, *flags: str) -> None:
    cmd = [sys.executable, "-m", "inferd", "serve-ray", f"--model-repository={REPO}",
           f"--address=127.0.0.1:{nodes.port}", "--http-address=127.0.0.1", f"--http-port={http}",
           f"--grpc-port={grpc}", "--replica-cpus=0.5", *flags]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=420)
    if done.returncode != 0:
        raise RuntimeError(done.stdout + done.stderr)


def run(count: int, out: Path, rows: tuple[Row, ...], plain: bool) -> dict[str, dict[str, dict[str, float]]]:
    results: dict[str, dict[str, dict[str, float]]] = {}
    if plain:
        server = servers.inferd(REPO, out / "inferd.log")
        ports = server.start()
        pid = server.pid
        try:
            urls = {"http": f"localhost:{ports.http}", "grpc": f"localhost:{ports.grpc}"}
            results[PLAIN] = measure(
                urls, ports.http, lambda: {"all": cpu_seconds(pid) if pid else 0.0}, count, out, "plain"
            )
        finally:
            server.stop()
    nodes = RayNodes(out)
    ray_tmp = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # short: Ray's socket paths live there
    try:
        nodes.start("--head", f"--port={nodes.port}", "--include-dashboard=false", f"--temp-dir={ray_tmp}")
        nodes.start(f"--address=127.0.0.1:{nodes.port}")
        http, grpc = _free(), _free()
        for row in rows:
            _serve_ray(nodes, http, grpc, *row.flags())
            idle0 = nodes.cpu()["all"]
            time.sleep(IDLE_S)
            idle = (nodes.cpu()["all"] - idle0) / IDLE_S
            urls = {"http": f"127.0.0.1:{http}", "grpc": f"127.0.0.1:{grpc}"}
            results[row.label] = measure(urls, http, nodes.cpu, count, out, row.tag)
            results[row.label]["idle"] = {"cpu_s_per_s": idle}
            _serve_ray(nodes, http, grpc, "--delete")
    finally:
        nodes.stop()
        shutil.rmtree(ray_tmp, ignore_errors=True)
    return results


Runs = dict[str, dict[str, list[dict[str, float]]]]  # row -> protocol -> one dict per round


def _median(runs: list[dict[str, float]], key: str) -> float | None:
    vals = sorted(r[key] for r in runs if r and key in r)
    return vals[len(vals) // 2] if vals else None


def render(results: Runs, load: tuple[str, str], rounds: int) -> str:
    """The section: median infer/s (with each round's), p99 and CPU per request per row and
    protocol, and each row against plain ``inferd serve``."""
    lines = [
        "## Ray Serve (add_sub, perf_analyzer, concurrency 8)",
        "",
        "`benchmarks/ray_bench.py`, run after the rounds above: plain `inferd serve`, then `inferd serve-ray` on "
        "two Ray nodes on this machine (one CPU each, replicas half a CPU), each row on a Serve started for it, "
        "through Serve's HTTP and gRPC proxies. \"Serve's defaults\": `--run-user-code-in-separate-thread=true "
        "--access-log=true` (serve-ray's defaults are false for both). CPU: the server's (plain) or the whole "
        "cluster's (Serve: proxies, replicas, controller, Ray's daemons) CPU time per successful request, the "
        "proxy's and the replicas' share in brackets (medians each). "
        f"{rounds} round(s); load average at start / end: {load[0]} / {load[1]}.",
        "",
        "| path | HTTP infer/s (median; rounds) | HTTP p99 (ms) | HTTP CPU/req, ms (proxy / replica) "
        "| gRPC infer/s (median; rounds) | gRPC p99 (ms) | gRPC CPU/req, ms (proxy / replica) | HTTP / plain "
        "| gRPC / plain |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    base = results.get(PLAIN, {})
    idles: list[str] = []
    for row, got in results.items():
        cells = [row]
        for proto in PROTOCOLS:
            runs = got.get(proto, [])
            m, p99, cpu, proxy, replica = (
                _median(runs, k)
                for k in ("infer_per_s", "p99_us", "cpu_ms", "cpu_ms_proxy", "cpu_ms_replica")
            )
            per = " ".join(f"{r['infer_per_s']:.0f}" if r else "-" for r in runs)
            split = f" ({proxy:.1f} / {replica:.1f})" if proxy is not None and replica is not None else ""
            cells += [
                f"{m:.0f} ({per})" if m is not None else "failed",
                f"{p99 / 1000:.1f}" if p99 else "-",
                f"{cpu:.{1 if cpu >= 1 else 2}f}{split}" if cpu is not None else "-",
            ]
        for proto in PROTOCOLS:
            m, b = _median(got.get(proto, []), "infer_per_s"), _median(base.get(proto, []), "infer_per_s")
            cells.append(f"{m / b:.2f}x" if m is not None and b else "-")
        lines.append("| " + " | ".join(cells) + " |")
        idle = _median(got.get("idle", []), "cpu_s_per_s")
        if idle is not None:
            idles.append(f"{row}: {idle * 1000:.0f} ms/s")
    if idles:
        lines += ["", "- the cluster's CPU while idle, before each row's load: " + "; ".join(idles)]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--count", type=int, default=1000, help="requests per measurement window")
    ap.add_argument("--output", type=Path, default=None, help="results folder (default: a new one)")
    ap.add_argument(
        "--settings",
        action="store_true",
        help="one replica with each combination of Serve's two settings, no plain or x2 rows",
    )
    args = ap.parse_args()
    out = args.output or ROOT / "benchmarks" / "results" / time.strftime("ray-%Y%m%d-%H%M%S", time.gmtime())
    out.mkdir(parents=True, exist_ok=True)
    start = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    rows = SETTINGS_ROWS if args.settings else ROWS
    results: Runs = {label: {} for label in ([] if args.settings else [PLAIN]) + [r.label for r in rows]}
    for rnd in range(1, args.rounds + 1):
        (out / f"r{rnd}").mkdir(exist_ok=True)
        turn = rnd % len(rows)  # each round starts at another row: no row always runs first
        for path, got in run(
            args.count, out / f"r{rnd}", rows[turn:] + rows[:turn], not args.settings
        ).items():
            for key, value in got.items():
                results.setdefault(path, {}).setdefault(key, []).append(value)
    end = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    text = render(results, (start, end), args.rounds)
    (out / "ray.md").write_text(text)
    (out / "summary.json").write_text(json.dumps(results, indent=1))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
