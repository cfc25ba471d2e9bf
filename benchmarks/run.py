#!/usr/bin/env python3
"""Benchmark inferd against the reference (real Triton 2.51) in one run, one server at a time.

    .venv/bin/python benchmarks/run.py                      # what `make bench` runs; rewrites BENCHMARKS.md
    .venv/bin/python benchmarks/run.py --servers reference --quick

For each round (``--repeat N``) and each server in turn (the order flips every other round), the
server is started on free ports serving tests/fixtures/reference_models, scripts/reference/bench.sh
(perf_analyzer) runs the selected scenarios against it, then the shared-memory rows
(shm_bench.py, perf_analyzer --shared-memory system), the server is stopped, and then
scripts/reference/measure.sh measures cold start, memory and client latency with the server as
its START_CMD. Medians over the rounds go into BENCHMARKS.md; raw outputs stay under
benchmarks/results/<timestamp>/. Python 3.11 standard library only.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import datetime as dt
import json
import os
import platform
import random
import re
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

import onnx_bench  # benchmarks/onnx_bench.py: the ONNX Runtime rows
import shm_bench  # benchmarks/shm_bench.py: the system shared-memory rows
from bench_paths import BENCH_SH, COMMON_SH, MEASURE_SH, REFERENCE_MODELS, ROOT, SETUP_SH, TRITON_SH

MODELS = REFERENCE_MODELS
RESULTS_ROOT = ROOT / "benchmarks" / "results"
DEFAULT_REPORT = ROOT / "BENCHMARKS.md"

REFERENCE_VERSION = "Triton 2.51.0 (nvidia-pytriton 0.7.0, CPU)"

# bench.sh's scenario ids, in its own order
BENCH_SH_SCENARIOS = [
    "add_sub_http_c1",
    "add_sub_http_c8",
    "add_sub_http_c32",
    "add_sub_grpc_c1",
    "add_sub_grpc_c8",
    "add_sub_grpc_c32",
    "identity_fp32_1MiB_http_c4",
    "batched_sleep_http_c1",
    "batched_sleep_http_c32",
    "ensemble_add_sub_http_c8",
]
HTTP_SCENARIOS = [
    "add_sub_http_c1",
    "add_sub_http_c8",
    "add_sub_http_c32",
    "identity_fp32_1MiB_http_c4",
    "batched_sleep_http_c1",
    "batched_sleep_http_c32",
    "ensemble_add_sub_http_c8",
]
GRPC_SCENARIOS = ["add_sub_grpc_c1", "add_sub_grpc_c8", "add_sub_grpc_c32"]
# run by the harness itself (shm_bench.py), after bench.sh, against the same server
SHM_SCENARIOS = list(shm_bench.IDS)
# every scenario id (orders the tables)
ALL_SCENARIOS = BENCH_SH_SCENARIOS + SHM_SCENARIOS

# {models}/{repo}: model repository; {root}: this checkout; {http} {grpc} {metrics}: ports
DEFAULT_INFERD_CMD = (
    "{root}/.venv/bin/inferd serve --model-repository {models} "
    "--http-port {http} --grpc-port {grpc} --metrics-port {metrics}"
)

READY_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 20.0


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def anchored(ids: Sequence[str]) -> str:
    """A bash ERE matching exactly these scenario ids (bench.sh matches BENCH_ONLY unanchored)."""
    return "^(" + "|".join(re.escape(i) for i in ids) + ")$"


# --------------------------------------------------------------------------------------------
# ports, readiness, subprocesses


@dataclass(frozen=True)
class Ports:
    http: int
    grpc: int
    metrics: int


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) != 0


def free_ports() -> Ports:
    """Three free ports below the usual ephemeral range (so perf_analyzer's own sockets never collide)."""
    picked: list[int] = []
    while len(picked) < 3:
        p = random.randrange(20000, 32000)
        if p not in picked and _port_free(p):
            picked.append(p)
    return Ports(*picked)


def http_status(port: int, path: str, timeout: float = 1.0) -> int | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as e:
        return int(e.code)
    except (OSError, ValueError):
        return None


def wait_port_released(port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and http_status(port, "/v2/health/live", 0.5) is not None:
        time.sleep(0.1)


_current_child: subprocess.Popen[str] | None = None


def run_logged(
    cmd: Sequence[str], log_path: Path, env: dict[str, str] | None = None, echo: bool = True
) -> int:
    """Run cmd (cwd = repo root), stream its output to stdout (if echo) and into log_path; return rc."""
    global _current_child
    with open(log_path, "a", encoding="utf-8") as lf:
        lf.write(f"$ {shlex.join(cmd)}\n")
        lf.flush()
        proc = subprocess.Popen(
            list(cmd),
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            bufsize=1,
        )
        _current_child = proc
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                lf.write(line)
                if echo:
                    sys.stdout.write("    " + line)
                    sys.stdout.flush()
            return proc.wait()
        finally:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
            _current_child = None


def _on_sigterm(signum: int, frame: Any) -> None:
    if _current_child is not None and _current_child.poll() is None:
        _current_child.send_signal(signal.SIGTERM)
    raise KeyboardInterrupt(f"signal {signum}")


# --------------------------------------------------------------------------------------------
# servers


class StartError(RuntimeError):
    pass


class Server(ABC):
    """A server under test: started/stopped for bench.sh, and given to measure.sh as a foreground command."""

    name: str
    label: str

    @abstractmethod
    def start(self, ports: Ports, log_path: Path) -> None: ...

    @abstractmethod
    def stop(self) -> None:
        """Stop what start() started; idempotent; never raises for a server that is already gone."""

    @abstractmethod
    def alive(self) -> bool: ...

    @abstractmethod
    def foreground_cmd(self, ports: Ports) -> str:
        """Command for measure.sh's START_CMD (word-split by bash without quote handling)."""

    @abstractmethod
    def describe(self) -> str: ...


class ReferenceServer(Server):
    """Real Triton through scripts/reference/triton.sh start/stop."""

    name = "reference"
    label = "reference"

    def __init__(self) -> None:
        self._ports: Ports | None = None
        self._log: Path | None = None

    def start(self, ports: Ports, log_path: Path) -> None:
        self._log = log_path
        self._ports = ports  # set first: stop() also cleans up after a failed start (e.g. not ready in time)
        cmd = [
            "bash",
            str(TRITON_SH),
            "start",
            str(MODELS),
            str(ports.http),
            str(ports.grpc),
            str(ports.metrics),
        ]
        rc = run_logged(cmd, log_path)
        if rc != 0:
            self.stop()
            raise StartError(f"triton.sh start exited {rc}:\n{tail(log_path)}")

    def stop(self) -> None:
        if self._ports is None:
            return
        ports, self._ports = self._ports, None
        assert self._log is not None
        run_logged(["bash", str(TRITON_SH), "stop", str(MODELS), str(ports.http)], self._log)
        server_log = anchor_run_dir() / f"triton-{ports.http}.log"
        if server_log.exists():
            with open(self._log, "a", encoding="utf-8") as f:
                f.write(f"\n--- {server_log} ---\n")
                f.write(server_log.read_text(errors="replace"))
        wait_port_released(ports.http)

    def alive(self) -> bool:
        if self._ports is None:
            return False
        rc = subprocess.run(
            ["bash", str(TRITON_SH), "status", str(MODELS), str(self._ports.http)],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=False,
        ).returncode
        return rc == 0

    def foreground_cmd(self, ports: Ports) -> str:
        return f"bash {TRITON_SH} run {MODELS} {ports.http} {ports.grpc} {ports.metrics}"

    def describe(self) -> str:
        return f"`{rel(TRITON_SH)} start|run <models> <http> <grpc> <metrics>`"


class CommandServer(Server):
    """A server started from a command template, in its own process group; stopped with SIGTERM."""

    def __init__(
        self,
        name: str,
        label: str,
        template: str,
        ready_timeout: float = READY_TIMEOUT_S,
        models: Path = MODELS,
    ) -> None:
        self.name = name
        self.label = label
        self.template = template
        self.ready_timeout = ready_timeout
        self.models = models
        self._proc: subprocess.Popen[bytes] | None = None
        self._logf: IO[bytes] | None = None
        self._ports: Ports | None = None

    def command(self, ports: Ports) -> str:
        return self.template.format(
            root=ROOT,
            repo=self.models,
            models=self.models,
            http=ports.http,
            grpc=ports.grpc,
            metrics=ports.metrics,
        )

    def foreground_cmd(self, ports: Ports) -> str:
        return self.command(ports)

    def describe(self) -> str:
        return f"`{self.template}`"

    def start(self, ports: Ports, log_path: Path) -> None:
        cmd = self.command(ports)
        log(f"{self.name}: {cmd}")
        self._logf = open(log_path, "ab")  # noqa: SIM115 - closed in stop()
        self._logf.write(f"$ {cmd}\n".encode())
        self._logf.flush()
        try:
            self._proc = subprocess.Popen(
                shlex.split(cmd),
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stdout=self._logf,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as e:
            self._close_log()
            raise StartError(f"cannot start {self.name}: {e}") from e
        self._ports = ports
        t0 = time.monotonic()
        while True:
            if self._proc.poll() is not None:
                rc = self._proc.returncode
                self.stop()
                raise StartError(f"{self.name} exited with {rc} during startup:\n{tail(log_path)}")
            if http_status(ports.http, "/v2/health/ready") == 200:
                break
            if time.monotonic() - t0 > self.ready_timeout:
                self.stop()
                raise StartError(f"{self.name} not ready after {self.ready_timeout:.0f}s:\n{tail(log_path)}")
            time.sleep(0.05)
        log(f"{self.name}: ready in {time.monotonic() - t0:.2f}s (pid {self._proc.pid})")

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    log(f"{self.name}: pid {proc.pid} alive {STOP_TIMEOUT_S:.0f}s after SIGTERM, SIGKILL")
                    proc.kill()
                    proc.wait()
            # leftovers of the process group we created (start_new_session: pgid == pid)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        if self._ports is not None:
            wait_port_released(self._ports.http)
            self._ports = None
        self._close_log()

    def _close_log(self) -> None:
        if self._logf is not None:
            self._logf.close()
            self._logf = None


def anchor_run_dir() -> Path:
    anchor = Path(
        os.environ.get("ANCHOR_DIR") or Path(os.environ.get("TMPDIR") or "/tmp") / "inferd-reference"
    )
    return Path(os.environ.get("ANCHOR_RUN_DIR") or anchor / "run")


def tail(path: Path, n: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ""


def rel(p: Path) -> str:
    try:
        return os.path.relpath(p, ROOT)
    except ValueError:
        return str(p)


# --------------------------------------------------------------------------------------------
# results


@dataclass
class BenchRow:
    scenario: str
    status: str
    infer_per_s: float | None
    p50_us: float | None
    p99_us: float | None
    spread_pct: float | None


@dataclass
class Latency:
    protocol: str
    n: int
    p50_us: float
    p90_us: float
    p99_us: float
    mean_us: float
    min_us: float
    line: str


@dataclass
class Measure:
    ok: bool
    error: str | None = None
    cold_runs_ms: list[float] = field(default_factory=list)
    cold_median_ms: float | None = None
    rss_idle_mib: float | None = None
    pss_idle_mib: float | None = None
    nprocs_idle: int | None = None
    rss_after_mib: float | None = None
    pss_after_mib: float | None = None
    latency: dict[str, Latency] = field(default_factory=dict)
    process_lines: list[str] = field(default_factory=list)
    latency_error: str | None = None


@dataclass
class ServerRound:
    server: str
    round: int
    ports: dict[str, int] = field(default_factory=dict)
    bench: dict[str, BenchRow] = field(default_factory=dict)
    bench_error: str | None = None
    bench_wall_s: float | None = None
    measure: Measure | None = None
    measure_wall_s: float | None = None


def _num(v: str | None) -> float | None:
    if v is None or v.strip() == "":
        return None
    try:
        return float(v)
    except ValueError:
        return None


def parse_bench_csv(path: Path) -> dict[str, BenchRow]:
    """The CSV written by bench_report.py: scenario, status, infer_per_s, p50_us, p99_us, spread_pct, ..."""
    rows: dict[str, BenchRow] = {}
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            rows[r["scenario"]] = BenchRow(
                scenario=r["scenario"],
                status=r.get("status", ""),
                infer_per_s=_num(r.get("infer_per_s")),
                p50_us=_num(r.get("p50_us")),
                p99_us=_num(r.get("p99_us")),
                spread_pct=_num(r.get("spread_pct")),
            )
    return rows


_LAT_RE = re.compile(
    r"client_latency (\S+)\s+n=(\d+) p50=([\d.]+)us p90=([\d.]+)us p99=([\d.]+)us "
    r"mean=([\d.]+)us min=([\d.]+)us"
)
_MEM_RE = r"rss_sum=(\d+) MiB pss_sum=(\d+) MiB over (\d+) processes"


def parse_measure(path: Path) -> Measure:
    if not path.exists():
        return Measure(ok=False, error=f"{rel(path)} not written")
    text = path.read_text(errors="replace")
    m = Measure(ok=True)
    m.cold_runs_ms = [float(x) for x in re.findall(r"^cold_start run \d+: (\d+) ms", text, re.M)]
    if mm := re.search(r"cold_start_ms all runs \(sorted\):.*median: (\d+)", text):
        m.cold_median_ms = float(mm.group(1))
    if mm := re.search(r"memory after load \(idle\): " + _MEM_RE, text):
        m.rss_idle_mib, m.pss_idle_mib, m.nprocs_idle = float(mm[1]), float(mm[2]), int(mm[3])
    if mm := re.search(r"memory after latency loops: " + _MEM_RE, text):
        m.rss_after_mib, m.pss_after_mib = float(mm[1]), float(mm[2])
    m.process_lines = [ln.strip() for ln in text.splitlines() if ln.startswith("    pid ")]
    for mm in _LAT_RE.finditer(text):
        m.latency[mm[1]] = Latency(
            mm[1], int(mm[2]), float(mm[3]), float(mm[4]), float(mm[5]), float(mm[6]), float(mm[7]), mm[0]
        )
    if "Traceback (most recent call last)" in text:
        after = text.split("Traceback (most recent call last)", 1)[1].splitlines()[1:]
        last = next((ln for ln in after if ln and not ln[0].isspace()), "?")
        m.latency_error = f"client_latency.py failed: {last[:200]}"
    if mm := re.search(r"^run \d+: server not ready.*$", text, re.M):
        m.ok, m.error = False, mm[0]
    elif m.cold_median_ms is None:
        m.ok, m.error = False, "measure.sh did not finish (no cold_start_ms summary line)"
    return m


def median(values: Sequence[float | None]) -> float | None:
    got = [v for v in values if v is not None]
    return statistics.median(got) if got else None


def ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return a / b


@dataclass
class BenchAgg:
    infer_per_s: float | None
    p50_us: float | None
    p99_us: float | None
    per_round: list[float | None]
    statuses: list[str]


@dataclass
class RunData:
    started: dt.datetime
    finished: dt.datetime | None
    settings: dict[str, Any]
    machine: dict[str, str]
    servers: dict[str, str]  # name -> how it is started (markdown)
    results_dir: Path
    rounds: list[ServerRound] = field(default_factory=list)
    #: ONNX rows (onnx_bench.py): dicts with round, side ("inferd" | "bare"), scenario, status, figures
    onnx: list[dict[str, Any]] = field(default_factory=list)
    #: the every-core rows (cores_bench.py): its markdown, or why it is missing
    cores: str = ""
    #: the async-execute rows (async_bench.py): its markdown, or why it is missing
    async_io: str = ""
    #: the OpenAI embeddings rows (openai_bench.py): its markdown, or why it is missing
    openai: str = ""

    @property
    def wall_s(self) -> float:
        end = self.finished or dt.datetime.now(dt.UTC)
        return (end - self.started).total_seconds()

    def of(self, server: str) -> list[ServerRound]:
        return [r for r in self.rounds if r.server == server]

    def has(self, server: str) -> bool:
        return any(r.bench or (r.measure and r.measure.ok) for r in self.of(server))

    def scenario_ids(self) -> list[str]:
        """Scenarios asked for (BENCH_ONLY read as a Python regex) plus any that produced rows."""
        seen = {sid for r in self.rounds for sid in r.bench}
        with contextlib.suppress(re.error):
            only = re.compile(self.settings["bench_only"])
            seen |= {s for s in ALL_SCENARIOS if only.search(s)}
        return [s for s in ALL_SCENARIOS if s in seen] + sorted(seen - set(ALL_SCENARIOS))

    def bench(self, server: str, sid: str) -> BenchAgg:
        rows = [r.bench.get(sid) for r in self.of(server)]
        return BenchAgg(
            infer_per_s=median([x.infer_per_s if x else None for x in rows]),
            p50_us=median([x.p50_us if x else None for x in rows]),
            p99_us=median([x.p99_us if x else None for x in rows]),
            per_round=[x.infer_per_s if x else None for x in rows],
            statuses=[x.status if x else "missing" for x in rows],
        )

    def measures(self, server: str) -> list[Measure]:
        return [r.measure for r in self.of(server) if r.measure is not None]

    def cold_start_ms(self, server: str) -> float | None:
        return median([v for m in self.measures(server) for v in m.cold_runs_ms])

    def mem(self, server: str, attr: str) -> float | None:
        return median([getattr(m, attr) for m in self.measures(server)])

    def latency(self, server: str, proto: str, attr: str) -> float | None:
        return median([getattr(m.latency[proto], attr) for m in self.measures(server) if proto in m.latency])

    def latency_protocols(self) -> list[str]:
        seen: list[str] = []
        for r in self.rounds:
            for p in r.measure.latency if r.measure else {}:
                if p not in seen:
                    seen.append(p)
        return seen


# --------------------------------------------------------------------------------------------
# report: a list of Section objects, each rendering markdown (empty string = left out)


def fmt(v: float | None, digits: int = 0) -> str:
    return "n/a" if v is None else f"{v:,.{digits}f}"


def fmt_ratio(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.2f}x"


def md_table(header: Sequence[str], rows: Sequence[Sequence[str]], align: str = "") -> str:
    align = align or "l" + "r" * (len(header) - 1)
    sep = ["---:" if a == "r" else "---" for a in align]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(sep) + " |"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


class Section(ABC):
    @abstractmethod
    def render(self, data: RunData) -> str: ...


class HeaderSection(Section):
    def render(self, data: RunData) -> str:
        m = data.machine
        s = data.settings
        lines = [
            "# Benchmarks: inferd vs the reference",
            "",
            f"Run {data.started:%Y-%m-%d %H:%M} UTC, {data.wall_s / 60:.1f} min wall time; "
            f"{s['repeat']} round(s), figures are medians over the rounds."
            + (" **The run was interrupted; figures are partial.**" if s.get("interrupted") else ""),
            "",
            "## Machine",
            "",
            f"- CPU: {m['cpu']}, nproc {m['nproc']}",
            f"- Memory: {m['memory']}",
            f"- Kernel: {m['kernel']}",
            f"- Python (inferd venv): {m['python']}",
            f"- perf_analyzer: {m['perf_analyzer']}",
            f"- Reference: {REFERENCE_VERSION}",
            f"- Load average at start / end: {m.get('loadavg_start', '?')} / {m.get('loadavg_end', '?')}",
        ]
        with contextlib.suppress(ValueError, IndexError):
            if float(m["loadavg_start"].split()[0]) >= 1.0:
                lines.append(
                    "\n**Warning:** the machine was not idle when the run started (1-min load average >= 1): "
                    "other work competed for the cores and the figures are less reliable."
                )
        return "\n".join(lines)


class ReproduceSection(Section):
    def render(self, data: RunData) -> str:
        s = data.settings
        servers = "\n".join(f"- {name}: {how}" for name, how in data.servers.items())
        opts = []
        if s["quick"]:
            opts.append("`--quick` (BENCH_SCALE=0.3, one measure.sh run)")
        if s["scenarios_option"]:
            opts.append(f"`--scenarios '{s['scenarios_option']}'`")
        if s.get("grpc_option") is False:
            opts.append("`--no-grpc`")
        elif s.get("grpc_option") or (s.get("grpc") and "grpc_option" not in s):
            opts.append("`--grpc`")
        if s.get("shm_option") is False:
            opts.append("`--no-shm`")
        if s["inferd_cmd_overridden"]:
            opts.append("`--inferd-cmd` (inferd start command overridden)")
        used = f"\n\nThis run's options: {', '.join(opts)}." if opts else ""
        return (
            "## How to reproduce\n\n"
            "```\nmake bench            # = .venv/bin/python benchmarks/run.py\n```\n\n"
            "`benchmarks/run.py --help` lists the options (`--repeat N`, `--no-grpc`, `--no-shm`, "
            "`--no-onnx`, `--scenarios REGEX`, `--servers`, `--quick`). Each round starts one server at "
            f"a time on free ports, serving `{rel(MODELS)}`, runs `{rel(BENCH_SH)}` (perf_analyzer) and "
            "the shared-memory rows (`benchmarks/shm_bench.py`) against it, stops it, then runs "
            f"`{rel(MEASURE_SH)}` (cold start, memory, client latency) with it. Rounds alternate the "
            "server order. Servers:\n\n"
            f"{servers}{used}\n\n"
            f"Raw outputs of this run: `{rel(data.results_dir)}/`.\n\n"
            f"**Note:** perf_analyzer runs on the same {data.machine['nproc']}-core machine as the server "
            "and shares the cores with it; the numbers are client + server on shared cores. Compare servers "
            "only within one run, as ratios, never across runs."
        )


class ProblemsSection(Section):
    """Servers that did not start, benches that failed, measure.sh runs that did not finish."""

    def render(self, data: RunData) -> str:
        items = []
        for r in data.rounds:
            for what, err in (
                ("perf_analyzer", r.bench_error),
                ("measure.sh", r.measure and r.measure.error),
                ("measure.sh", r.measure and r.measure.latency_error),
            ):
                if not err:
                    continue
                first, _, rest = err.strip().partition("\n")
                items.append(f"- {r.server}, round {r.round}, {what}: {first}")
                if rest.strip():
                    items.append("\n  ```\n" + "\n".join("  " + ln for ln in rest.splitlines()) + "\n  ```")
        if not items:
            return ""
        return "## Problems in this run\n\n" + "\n".join(items)


class ScenarioSection(Section):
    """perf_analyzer rows whose scenario id matches `pattern`: subject vs baseline."""

    def __init__(
        self, title: str, pattern: str, subject: str = "inferd", baseline: str = "reference"
    ) -> None:
        self.title = title
        self.pattern = re.compile(pattern)
        self.subject = subject
        self.baseline = baseline

    def render(self, data: RunData) -> str:
        ids = [s for s in data.scenario_ids() if self.pattern.search(s)]
        if not ids:
            return ""
        a, b = self.subject, self.baseline
        multi = data.settings["repeat"] > 1
        header = [
            "scenario",
            f"{a} infer/s",
            f"{b} infer/s",
            f"ratio {a}/{b}",
            f"{a} p50 / p99 (us)",
            f"{b} p50 / p99 (us)",
            "p99 ratio",
        ]
        if multi:
            header.append(f"infer/s per round ({a} ; {b})")
        header.append("notes")
        rows = []
        for sid in ids:
            x, y = data.bench(a, sid), data.bench(b, sid)
            row = [
                f"`{sid}`",
                fmt(x.infer_per_s, 1),
                fmt(y.infer_per_s, 1),
                fmt_ratio(ratio(x.infer_per_s, y.infer_per_s)),
                f"{fmt(x.p50_us)} / {fmt(x.p99_us)}",
                f"{fmt(y.p50_us)} / {fmt(y.p99_us)}",
                fmt_ratio(ratio(x.p99_us, y.p99_us)),
            ]
            if multi:
                row.append(
                    " ".join(fmt(v) for v in x.per_round) + " ; " + " ".join(fmt(v) for v in y.per_round)
                )
            row.append(self._notes(data, sid))
            rows.append(row)
        return (
            f"## {self.title}\n\n"
            f"perf_analyzer, sync mode, batch 1. ratio > 1: {a} has more throughput; "
            f"p99 ratio < 1: {a} has the lower tail latency.\n\n"
            + md_table(header, rows, "l" + "r" * 6 + "l" * (len(header) - 7))
        )

    def _notes(self, data: RunData, sid: str) -> str:
        """Rows that were not 'stable' (or were noisy), grouped: 'inferd r1,r3: loose'."""
        groups: dict[tuple[str, str], list[str]] = {}
        for srv in (self.subject, self.baseline):
            for r in data.of(srv):
                row = r.bench.get(sid)
                if row is None:
                    note = "no data" if r.bench_error else ""
                elif row.status != "stable":
                    note = row.status.replace("|", "/")[:70].strip()
                elif row.spread_pct is not None and row.spread_pct > 25:
                    note = "spread > 25%"
                else:
                    note = ""
                if note:
                    groups.setdefault((srv, note), []).append(f"r{r.round}")
        return "; ".join(f"{srv} {','.join(rounds)}: {note}" for (srv, note), rounds in groups.items())


class ColdStartMemorySection(Section):
    def __init__(self, subject: str = "inferd", baseline: str = "reference") -> None:
        self.subject = subject
        self.baseline = baseline

    def render(self, data: RunData) -> str:
        a, b = self.subject, self.baseline
        if not (data.measures(a) or data.measures(b)):
            return ""
        items: list[tuple[str, Callable[[str], float | None], int]] = [
            ("cold start, median (ms)", data.cold_start_ms, 0),
            ("RSS sum after load, idle (MiB)", lambda s: data.mem(s, "rss_idle_mib"), 0),
            ("PSS sum after load, idle (MiB)", lambda s: data.mem(s, "pss_idle_mib"), 0),
            ("processes", lambda s: data.mem(s, "nprocs_idle"), 0),
            ("RSS sum after latency loops (MiB)", lambda s: data.mem(s, "rss_after_mib"), 0),
            ("PSS sum after latency loops (MiB)", lambda s: data.mem(s, "pss_after_mib"), 0),
        ]
        rows = []
        for label, get, digits in items:
            x, y = get(a), get(b)
            rows.append([label, fmt(x, digits), fmt(y, digits), fmt_ratio(ratio(x, y))])
        runs = {s: sum(len(m.cold_runs_ms) for m in data.measures(s)) for s in (a, b)}
        return (
            "## Cold start and memory\n\n"
            f"From `{rel(MEASURE_SH)}`: cold start = fork to first 200 on `/v2/health/ready` "
            f"({runs[a]} run(s) of {a}, {runs[b]} of {b}); memory = RSS / PSS summed over the server "
            "process and all its descendants, 2 s after ready and again after the client latency loops.\n\n"
            + md_table(["", a, b, f"ratio {a}/{b}"], rows)
        )


class ClientLatencySection(Section):
    def __init__(self, subject: str = "inferd", baseline: str = "reference") -> None:
        self.subject = subject
        self.baseline = baseline

    def render(self, data: RunData) -> str:
        protos = data.latency_protocols()
        if not protos:
            return ""
        a, b = self.subject, self.baseline
        rows = []
        for p in protos:
            xa, xb = data.latency(a, p, "p50_us"), data.latency(b, p, "p50_us")
            ya, yb = data.latency(a, p, "p99_us"), data.latency(b, p, "p99_us")
            rows.append(
                [p, fmt(xa), fmt(xb), fmt_ratio(ratio(xa, xb)), fmt(ya), fmt(yb), fmt_ratio(ratio(ya, yb))]
            )
        raw = []
        for r in data.rounds:
            if r.measure and r.measure.latency:
                raw.append(f"# {r.server}, round {r.round}")
                raw += [lat.line for lat in r.measure.latency.values()]
        return (
            "## Client latency\n\n"
            "`client_latency.py`: sequential loop of tiny add_sub requests through the Python tritonclient "
            "(its overhead included).\n\n"
            + md_table(
                [
                    "protocol",
                    f"{a} p50 (us)",
                    f"{b} p50 (us)",
                    "p50 ratio",
                    f"{a} p99 (us)",
                    f"{b} p99 (us)",
                    "p99 ratio",
                ],
                rows,
            )
            + "\n\n```\n"
            + "\n".join(raw)
            + "\n```"
        )


@dataclass(frozen=True)
class GoalResult:
    status: str  # "met" | "missed" | "not measured"
    detail: str


@dataclass(frozen=True)
class Goal:
    text: str
    check: Callable[[RunData], GoalResult]


def throughput_goal(
    sid: str,
    min_ratio: float,
    p99_not_worse: bool = False,
    subject: str = "inferd",
    baseline: str = "reference",
    text: str | None = None,
) -> Goal:
    text = text or f"`{sid}` throughput >= {min_ratio:g}x {baseline}" + (
        f" with p99 <= {baseline}" if p99_not_worse else ""
    )

    def check(data: RunData) -> GoalResult:
        x, y = data.bench(subject, sid), data.bench(baseline, sid)
        r = ratio(x.infer_per_s, y.infer_per_s)
        if r is None:
            return GoalResult(
                "not measured",
                f"{subject} {fmt(x.infer_per_s, 1)} vs {baseline} {fmt(y.infer_per_s, 1)} infer/s",
            )
        ok = r >= min_ratio
        detail = f"{fmt(x.infer_per_s, 1)} vs {fmt(y.infer_per_s, 1)} infer/s = {fmt_ratio(r)}"
        if p99_not_worse:
            if x.p99_us is None or y.p99_us is None:
                return GoalResult("not measured", detail + "; p99 n/a")
            ok = ok and x.p99_us <= y.p99_us
            detail += f"; p99 {fmt(x.p99_us)} vs {fmt(y.p99_us)} us = {fmt_ratio(ratio(x.p99_us, y.p99_us))}"
        return GoalResult("met" if ok else "missed", detail)

    return Goal(text, check)


def less_than_goal(
    text: str,
    get: Callable[[RunData, str], float | None],
    max_ratio: float,
    unit: str,
    subject: str = "inferd",
    baseline: str = "reference",
) -> Goal:
    def check(data: RunData) -> GoalResult:
        x, y = get(data, subject), get(data, baseline)
        r = ratio(x, y)
        detail = f"{fmt(x)} vs {fmt(y)} {unit} = {fmt_ratio(r)}"
        if r is None:
            return GoalResult("not measured", detail)
        return GoalResult("met" if r < max_ratio else "missed", detail)

    return Goal(text, check)


def shm_goal(sid: str, min_ratio: float, server: str = "inferd") -> Goal:
    """server's shared-memory row vs its own binary-HTTP twin, same run."""
    scen = next(s for s in shm_bench.SCENARIOS if s.id == sid)

    def check(data: RunData) -> GoalResult:
        x, y = data.bench(server, sid), data.bench(server, scen.twin)
        r = ratio(x.infer_per_s, y.infer_per_s)
        detail = (
            f"shm {fmt(x.infer_per_s, 1)} vs binary HTTP {fmt(y.infer_per_s, 1)} infer/s = {fmt_ratio(r)}"
        )
        others = [s for s in ("reference", "inferd") if s != server]
        for o in others:
            ro = ratio(data.bench(o, sid).infer_per_s, data.bench(o, scen.twin).infer_per_s)
            if ro is not None:
                detail += f" ({o}: {fmt_ratio(ro)})"
        if r is None:
            return GoalResult("not measured", detail)
        return GoalResult("met" if r >= min_ratio else "missed", detail)

    return Goal(
        f"`{scen.model}` 1 MiB through system shm >= {min_ratio:g}x {server}'s binary HTTP throughput "
        f"(`{sid}` / `{scen.twin}`)",
        check,
    )


def onnx_throughput_goal(scenario: str, min_ratio: float, against: str = "bare") -> Goal:
    """``against``: "bare" (inferd's own sessions, bare), "bare-default" (a default InferenceSession)
    or "best" (the fastest bare layout measured)."""

    def check(data: RunData) -> GoalResult:
        x = onnx_bench.aggregate(data.onnx, "inferd", scenario)["infer_per_s"]
        sides = ("bare", "bare-default", "bare-shared") if against == "best" else (against,)
        figures = {k: onnx_bench.aggregate(data.onnx, k, scenario)["infer_per_s"] for k in sides}
        side, y = max(
            ((k, v) for k, v in figures.items() if v), key=lambda kv: kv[1], default=(against, None)
        )
        r = ratio(x, y)
        detail = f"{fmt(x, 1)} vs {side} {fmt(y, 1)} infer/s = {fmt_ratio(r)}"
        if r is None:
            return GoalResult("not measured", detail)
        return GoalResult("met" if r >= min_ratio else "missed", detail)

    what = {
        "bare": "bare ONNX Runtime (the same sessions)",
        "bare-default": "a bare InferenceSession with default options",
        "best": "the best bare layout",
    }[against]
    return Goal(f"`{scenario}` served throughput >= {min_ratio:g}x {what}", check)


def onnx_added_p50_goal(scenario: str, max_us: float) -> Goal:
    """Judged on the lean client's round trip (lean_http.py); perf_analyzer's is given beside it."""

    def check(data: RunData) -> GoalResult:
        y = onnx_bench.aggregate(data.onnx, "bare", scenario)["p50_us"]
        x = onnx_bench.aggregate(data.onnx, "lean", scenario)["p50_us"]
        pa = onnx_bench.aggregate(data.onnx, "inferd", scenario)["p50_us"]
        via_pa = f" (perf_analyzer: p50 {fmt(pa)} us, +{fmt(pa - y)} us)" if pa is not None and y else ""
        if x is None or y is None:
            return GoalResult("not measured", f"lean p50 {fmt(x)} vs bare {fmt(y)} us{via_pa}")
        added = x - y
        return GoalResult(
            "met" if added <= max_us else "missed",
            f"lean client p50 {fmt(x)} vs bare {fmt(y)} us: +{fmt(added)} us{via_pa}",
        )

    return Goal(
        f"`{scenario}` over binary HTTP adds <= {max_us:g} us to bare ONNX Runtime's p50 (lean client)", check
    )


DEFAULT_GOALS = [
    throughput_goal("add_sub_http_c8", 2.0, p99_not_worse=True),
    throughput_goal("identity_fp32_1MiB_http_c4", 1.5),
    throughput_goal(
        "add_sub_grpc_c8",
        1.0,
        p99_not_worse=True,
        text="gRPC add_sub c8 (`add_sub_grpc_c8`) >= 1.0x the reference's throughput with p99 no higher",
    ),
    shm_goal("identity_fp32_1MiB_shm_c4", 3.0),
    less_than_goal("cold start < 0.25x reference", lambda d, s: d.cold_start_ms(s), 0.25, "ms"),
    less_than_goal(
        "memory (RSS sum after load, idle) < 0.5x reference",
        lambda d, s: d.mem(s, "rss_idle_mib"),
        0.5,
        "MiB",
    ),
    onnx_throughput_goal("densenet_onnx_c1", 0.95, "bare-default"),
    onnx_throughput_goal("densenet_onnx_c4", 0.95, "best"),
    onnx_added_p50_goal("tiny_mlp_c1", 100),
]


class ShmSection(Section):
    """Each shared-memory row beside its binary-HTTP twin, per server: shm/binary ratios."""

    def __init__(self, servers: Sequence[str] = ("inferd", "reference")) -> None:
        self.servers = list(servers)

    def render(self, data: RunData) -> str:
        asked = set(data.scenario_ids())
        scens = [s for s in shm_bench.SCENARIOS if s.id in asked]
        if not scens:
            return ""
        rows = []
        for s in scens:
            for srv in self.servers:
                x, y = data.bench(srv, s.id), data.bench(srv, s.twin)
                notes = sorted(
                    {
                        f"{sid.rsplit('_', 2)[-2]} r{r.round}: {row.status.replace('|', '/')[:60]}"
                        for r in data.of(srv)
                        for sid in (s.id, s.twin)
                        if (row := r.bench.get(sid)) is not None and row.status != "stable"
                    }
                )
                rows.append(
                    [
                        f"`{s.model}` c{s.concurrency}",
                        srv,
                        fmt(x.infer_per_s, 1),
                        f"{fmt(x.p50_us)} / {fmt(x.p99_us)}",
                        fmt(y.infer_per_s, 1),
                        f"{fmt(y.p50_us)} / {fmt(y.p99_us)}",
                        fmt_ratio(ratio(x.infer_per_s, y.infer_per_s)),
                        fmt_ratio(ratio(x.p50_us, y.p50_us)),
                        "; ".join(notes),
                    ]
                )
        ids = ", ".join(f"`{s.id}` vs `{s.twin}`" for s in scens)
        return (
            "## System shared memory vs binary HTTP (perf_analyzer)\n\n"
            f"{ids}: the same model, 1 MiB FP32 input (`--shape INPUT0:262144`) and concurrency, once with "
            "the tensors in system shared memory (`--shared-memory system --output-shared-memory-size "
            f"{shm_bench.MIB}`: perf_analyzer registers the regions over HTTP; requests carry only "
            "region names) and once as binary tensors in the HTTP body (bench.sh's row). The shm row is "
            "run by the harness right after bench.sh against the same server, with bench.sh's settings "
            "(count windows, stability band, sync, batch 1). ratio > 1: shm has more throughput.\n\n"
            + md_table(
                [
                    "scenario",
                    "server",
                    "shm infer/s",
                    "shm p50 / p99 (us)",
                    "binary HTTP infer/s",
                    "binary HTTP p50 / p99 (us)",
                    "shm/binary throughput",
                    "shm/binary p50",
                    "notes",
                ],
                rows,
                "ll" + "r" * 6 + "l",
            )
        )


class OnnxSection(Section):
    def render(self, data: RunData) -> str:
        return onnx_bench.render(data.onnx)


class CoresSection(Section):
    """benchmarks/cores_bench.py's table: Python instances in threads and in worker processes (issue 9)."""

    def render(self, data: RunData) -> str:
        if not data.cores:
            return ""
        return (
            "## Every core: Python instances in threads and in worker processes (perf_analyzer, HTTP)\n\n"
            "`benchmarks/cores_bench.py`, run after the rounds above with as many rounds: `cpu_work` does about "
            "3 ms of pure-Python work per request with 2 instances and no `execution_mode` (inferd decides: "
            "`auto`), `cpu_work_thread` is the same model held in threads, `add_sub_process` / `add_sub_thread` "
            "the reference's add_sub with its one instance in a worker process / a thread. The reference "
            "ignores `execution_mode` (its instances are always processes).\n\n" + data.cores
        )


class AsyncSection(Section):
    """benchmarks/async_bench.py's table: an async execute awaiting I/O vs a sync one vs the reference (issue 16)."""

    def render(self, data: RunData) -> str:
        if not data.async_io:
            return ""
        return (
            "## Async execute: a Python model awaiting I/O (perf_analyzer, concurrency 16)\n\n"
            "`benchmarks/async_bench.py`, run after the rounds above with as many rounds: one instance, each "
            "request waits 10 ms of I/O, `io_sync` with `def execute` (`time.sleep`), `io_async` with `async def "
            "execute` (`await asyncio.sleep`), both over HTTP, and `io_async_decoupled` (the same, answering "
            "through its response sender) over a gRPC stream. The reference overlaps coroutine executes only in "
            "decoupled models (a non-decoupled one is awaited to its end before the next request), so its best "
            "async row is what inferd's HTTP `io_async` is held against.\n\n" + data.async_io
        )


class OpenAISection(Section):
    """benchmarks/openai_bench.py's table: /v1/embeddings against the KServe endpoint doing the same work (issue 15)."""

    def render(self, data: RunData) -> str:
        if not data.openai:
            return ""
        return (
            "## The OpenAI API: /v1/embeddings against the KServe endpoint (minilm, HTTP)\n\n"
            "`benchmarks/openai_bench.py`, run after the rounds above with as many rounds, inferd only (the "
            "reference has no OpenAI front end for such models): the example `minilm` "
            "(all-MiniLM-L6-v2) embeds the same sentence, 1 or 8 a request, through `POST /v1/embeddings` "
            "(`encoding_format` `base64`, the official SDK's default, and `float`) and through `POST "
            "/v2/models/minilm/infer` (binary tensors, as tritonclient sends them, and JSON), from the same "
            "stdlib client (4 threads, keep-alive connections). The last column is the cost of the OpenAI "
            "layer: each row's requests/s over the KServe binary row of its batch; the server's CPU per "
            "request (process tree, from /proc) is the steadier figure on a shared machine.\n\n" + data.openai
        )


class GoalsSection(Section):
    def __init__(self, goals: Sequence[Goal]) -> None:
        self.goals = list(goals)

    def results(self, data: RunData) -> list[tuple[Goal, GoalResult]]:
        return [(g, g.check(data)) for g in self.goals]

    def render(self, data: RunData) -> str:
        mark = {"met": "met", "missed": "**missed**", "not measured": "not measured"}
        rows = [[g.text, mark[r.status], r.detail] for g, r in self.results(data)]
        return "## Goals\n\n" + md_table(
            ["goal", "status", "inferd vs reference (or bare, or itself)"], rows, "lll"
        )


def default_sections() -> list[Section]:
    return [
        HeaderSection(),
        ReproduceSection(),
        ProblemsSection(),
        ScenarioSection("HTTP (perf_analyzer)", r"_http_"),
        ScenarioSection("gRPC (perf_analyzer)", r"_grpc_"),
        ShmSection(),
        OnnxSection(),
        CoresSection(),
        AsyncSection(),
        OpenAISection(),
        ColdStartMemorySection(),
        ClientLatencySection(),
        GoalsSection(DEFAULT_GOALS),
    ]


def render_report(data: RunData, sections: Sequence[Section]) -> str:
    parts = [s.render(data) for s in sections]
    return "\n\n".join(p.strip() for p in parts if p.strip()) + "\n"


# --------------------------------------------------------------------------------------------
# machine


def machine_info() -> dict[str, str]:
    cpu = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem = "unknown"
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
                break
    nproc = subprocess.run(["nproc"], capture_output=True, text=True, check=False).stdout.strip()
    pa = subprocess.run(
        [
            "bash",
            "-c",
            f'source "{COMMON_SH}"; anchor_paths >/dev/null 2>&1; '
            'LD_LIBRARY_PATH=$(pa_ld_path) "$PERF_ANALYZER" --version 2>&1 | head -1',
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    ).stdout.strip()
    return {
        "cpu": cpu,
        "nproc": nproc or str(os.cpu_count()),
        "memory": mem,
        "kernel": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "perf_analyzer": pa or "unknown",
        "loadavg_start": loadavg(),
    }


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


# --------------------------------------------------------------------------------------------
# the run


@dataclass
class Options:
    servers: list[str]
    repeat: int
    bench_only: str
    quick: bool
    measure_runs: int
    skip_bench: bool
    skip_measure: bool
    shm: bool = True


def bench_round(server: Server, rnd: int, opts: Options, outdir: Path) -> ServerRound:
    sr = ServerRound(server=server.name, round=rnd)
    tag = f"r{rnd}-{server.name}"
    if not opts.skip_bench:
        t0 = time.monotonic()
        ports = free_ports()
        sr.ports["bench_http"], sr.ports["bench_grpc"] = ports.http, ports.grpc
        log(f"round {rnd}: {server.name}: starting for perf_analyzer on {ports}")
        try:
            server.start(ports, outdir / f"{tag}-server.log")
        except StartError as e:
            sr.bench_error = str(e)
            log(f"round {rnd}: {server.name}: {e}")
        else:
            try:
                only = matching(opts.bench_only, BENCH_SH_SCENARIOS)
                if only:
                    run_bench_sh(server, ports, opts, outdir, tag, sr)
                shm = matching(opts.bench_only, SHM_SCENARIOS) if opts.shm else []
                if shm and server.alive():
                    run_shm(server, ports, opts, outdir, tag, sr, shm)
            finally:
                log(f"round {rnd}: {server.name}: stopping")
                server.stop()
        sr.bench_wall_s = time.monotonic() - t0
    if not opts.skip_measure:
        t0 = time.monotonic()
        ports = free_ports()
        sr.ports["measure_http"] = ports.http
        cmd = server.foreground_cmd(ports)
        log(f"round {rnd}: {server.name}: measure.sh ({opts.measure_runs} run(s)), START_CMD={cmd}")
        out = outdir / f"{tag}-measure.txt"
        env = dict(os.environ, START_CMD=cmd)
        run_logged(
            ["bash", str(MEASURE_SH), str(ports.http), str(ports.grpc), str(opts.measure_runs), str(out)],
            outdir / f"{tag}-measure.log",
            env=env,
        )
        sr.measure = parse_measure(out)
        for f in sorted(anchor_run_dir().glob(f"measure-{ports.http}-run*.log")):
            with contextlib.suppress(OSError):
                (outdir / f"{tag}-measure-server-{f.name.rsplit('-', 1)[-1]}").write_bytes(f.read_bytes())
        if sr.measure.error:
            log(f"round {rnd}: {server.name}: measure.sh: {sr.measure.error}")
        sr.measure_wall_s = time.monotonic() - t0
    return sr


def matching(bench_only: str, ids: Sequence[str]) -> list[str]:
    """The ids that BENCH_ONLY (a bash ERE, unanchored; read here as a Python regex) selects."""
    try:
        only = re.compile(bench_only)
    except re.error:
        return list(ids)  # let bench.sh judge it
    return [i for i in ids if only.search(i)]


def run_bench_sh(
    server: Server, ports: Ports, opts: Options, outdir: Path, tag: str, sr: ServerRound
) -> None:
    env = dict(os.environ, BENCH_ONLY=opts.bench_only)
    if opts.quick:
        env["BENCH_SCALE"] = "0.3"
    csv_path = outdir / f"{tag}-bench.csv"
    rc = run_logged(
        ["bash", str(BENCH_SH), f"localhost:{ports.http}", f"localhost:{ports.grpc}", str(csv_path)],
        outdir / f"{tag}-bench.log",
        env=env,
    )
    if not server.alive():
        sr.bench_error = f"{server.name} was not running any more after bench.sh"
    if csv_path.exists():
        sr.bench.update(parse_bench_csv(csv_path))
    if rc != 0 or not sr.bench:
        sr.bench_error = (sr.bench_error or "") + f" bench.sh exited {rc}, {len(sr.bench)} rows"


def run_shm(
    server: Server, ports: Ports, opts: Options, outdir: Path, tag: str, sr: ServerRound, ids: Sequence[str]
) -> None:
    """shm_bench.py's scenarios (perf_analyzer --shared-memory system), bench.sh's settings."""
    scale = 0.3 if opts.quick else float(os.environ.get("BENCH_SCALE", "1.0"))
    raw = outdir / f"{tag}-shm.raw"
    for s in shm_bench.SCENARIOS:
        if s.id not in ids:
            continue
        row = shm_bench.measure(s, f"localhost:{ports.http}", raw, scale, run_logged)
        sr.bench[s.id] = BenchRow(**row)
        log(
            f"{server.name}: {s.id}: {row['status']}, {fmt(row['infer_per_s'], 1)} infer/s, "
            f"p50 {fmt(row['p50_us'])} us, p99 {fmt(row['p99_us'])} us"
        )
        if not row["status"].startswith(("stable", "loose")):
            sr.bench_error = (
                sr.bench_error or ""
            ) + f" {s.id}: perf_analyzer {row['status']} (see {rel(raw)}/)"
    if not server.alive():
        sr.bench_error = (
            sr.bench_error or ""
        ) + f" {server.name} was not running any more after the shm rows"


def onnx_round(
    rnd: int, outdir: Path, template: str, ready_timeout: float, quick: bool
) -> list[dict[str, Any]]:
    """The ONNX rows of one round: bare ONNX Runtime in-process, and perf_analyzer against inferd."""
    repo = outdir / "onnx-models"
    if not repo.exists():
        log(f"round {rnd}: onnx: building {', '.join(onnx_bench.MODELS)} into {rel(repo)}")
        onnx_bench.build_repository(repo, outdir / "onnx-build.log", run_logged)
    scale = 0.3 if quick else float(os.environ.get("BENCH_SCALE", "1.0"))
    tag = f"r{rnd}"
    server = CommandServer("inferd-onnx", "inferd", template, ready_timeout, models=repo)
    ports = free_ports()
    log(f"round {rnd}: onnx: inferd on {ports}; each scenario bare ONNX Runtime and perf_analyzer in turn")
    try:
        server.start(ports, outdir / f"{tag}-onnx-server.log")
    except StartError as e:
        log(f"round {rnd}: onnx: {e}")
        return [
            {"round": rnd, "side": "inferd", "scenario": s.id, "status": "no server"}
            for s in onnx_bench.SCENARIOS
        ]
    rows: list[dict[str, Any]] = []
    try:
        for s in onnx_bench.SCENARIOS:
            sides = ("bare", "inferd", "lean") if rnd % 2 == 1 else ("lean", "inferd", "bare")
            for side in sides:
                if side == "bare":
                    for layout in s.layouts:
                        row = onnx_bench.measure_bare(repo, s, outdir, tag, run_logged, layout)
                        rows.append(row)
                        log(f"round {rnd}: onnx: {s.id} bare ({layout} layout): {row['status']}")
                    row = onnx_bench.measure_bare(repo, s, outdir, tag, run_logged)
                elif side == "inferd":
                    row = onnx_bench.measure_served(ports.http, s, outdir, tag, scale, run_logged)
                elif s.lean:
                    row = onnx_bench.measure_lean(ports.http, s, outdir, tag, run_logged)
                else:
                    continue
                rows.append(row)
                log(f"round {rnd}: onnx: {s.id} {side}: {row['status']}")
    finally:
        server.stop()
    for row in rows:
        row["round"] = rnd
    return rows


def cores_rows(rounds: int, outdir: Path) -> str:
    """cores_bench.py, its own servers and rounds: the markdown it wrote, or a line saying why none."""
    log(f"cores: benchmarks/cores_bench.py --rounds {rounds} (log {rel(outdir)}/cores.log)")
    cmd = [str(ROOT / ".venv" / "bin" / "python"), str(ROOT / "benchmarks" / "cores_bench.py")]
    log_path = outdir / "cores.log"
    rc = run_logged([*cmd, "--rounds", str(rounds), "--output", str(outdir / "cores")], log_path, echo=False)
    md = outdir / "cores" / "cores.md"
    if rc != 0 or not md.exists():
        return f"cores_bench.py failed (rc {rc}); see {rel(log_path)}\n"
    return md.read_text()


def async_rows(rounds: int, outdir: Path, quick: bool) -> str:
    """async_bench.py, its own servers and rounds: the markdown it wrote, or a line saying why none."""
    log(f"async: benchmarks/async_bench.py --rounds {rounds} (log {rel(outdir)}/async.log)")
    cmd = [str(ROOT / ".venv" / "bin" / "python"), str(ROOT / "benchmarks" / "async_bench.py")]
    cmd += ["--rounds", str(rounds), "--output", str(outdir / "async")]
    if quick:  # as BENCH_SCALE=0.3 shortens bench.sh's windows
        cmd += ["--count", "600"]
    log_path = outdir / "async.log"
    rc = run_logged(cmd, log_path, echo=False)
    md = outdir / "async" / "async_io.md"
    if rc != 0 or not md.exists():
        return f"async_bench.py failed (rc {rc}); see {rel(log_path)}\n"
    return md.read_text()


def openai_rows(rounds: int, outdir: Path, quick: bool) -> str:
    """openai_bench.py, its own server and rounds: the markdown it wrote, or a line saying why none."""
    log(f"openai: benchmarks/openai_bench.py --rounds {rounds} (log {rel(outdir)}/openai.log)")
    cmd = [str(ROOT / ".venv" / "bin" / "python"), str(ROOT / "benchmarks" / "openai_bench.py")]
    cmd += ["--rounds", str(rounds), "--output", str(outdir / "openai")]
    if quick:  # as BENCH_SCALE=0.3 shortens bench.sh's windows
        cmd += ["--seconds", "3"]
    log_path = outdir / "openai.log"
    rc = run_logged(cmd, log_path, echo=False)
    md = outdir / "openai" / "openai.md"
    if rc != 0 or not md.exists():
        return f"openai_bench.py failed (rc {rc}); see {rel(log_path)}\n"
    return md.read_text()


def ensure_reference(outdir: Path) -> None:
    log(f"ensuring the reference is installed: bash {rel(SETUP_SH)} (log {rel(outdir)}/setup.log)")
    rc = run_logged(["bash", str(SETUP_SH)], outdir / "setup.log", echo=False)
    if rc != 0:
        print(tail(outdir / "setup.log", 30), file=sys.stderr)
        raise SystemExit(f"reference setup failed (rc {rc}); see {outdir / 'setup.log'}")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description="Benchmark inferd against the reference Triton 2.51 and rewrite BENCHMARKS.md.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument(
        "--servers",
        default="reference,inferd",
        help="comma-separated subset of reference,inferd (default: both)",
    )
    ap.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="rounds of the reference/inferd alternation (medians; default 3)",
    )
    ap.add_argument(
        "--scenarios",
        default=None,
        help="BENCH_ONLY regex on scenario ids (bash ERE, unanchored; bench.sh's ids and "
        f"{', '.join(SHM_SCENARIOS)}); default: all of them (7 HTTP, 3 gRPC, {len(SHM_SCENARIOS)} shm)",
    )
    ap.add_argument(
        "--grpc",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the add_sub gRPC rows (default: on; --no-grpc leaves them out; with --scenarios they "
        "are added only by an explicit --grpc)",
    )
    ap.add_argument(
        "--shm",
        action=argparse.BooleanOptionalAction,
        default=True,
        help=f"the system shared-memory rows ({', '.join(SHM_SCENARIOS)}; default: on, where "
        "the scenario selection matches them)",
    )
    ap.add_argument("--quick", action="store_true", help="BENCH_SCALE=0.3 and one measure.sh run")
    ap.add_argument(
        "--measure-runs", type=int, default=None, help="measure.sh RUNS (default 3; 1 with --quick)"
    )
    ap.add_argument("--no-bench", action="store_true", help="skip perf_analyzer (bench.sh)")
    ap.add_argument("--no-measure", action="store_true", help="skip measure.sh")
    ap.add_argument(
        "--inferd-cmd",
        default=DEFAULT_INFERD_CMD,
        help="inferd start command template (foreground); placeholders {repo}/{models} = model "
        "repository, {root} = this checkout, {http} {grpc} {metrics} = ports "
        f"(default: {DEFAULT_INFERD_CMD!r})",
    )
    ap.add_argument(
        "--ready-timeout",
        type=float,
        default=READY_TIMEOUT_S,
        help="seconds to wait for inferd's /v2/health/ready",
    )
    ap.add_argument(
        "--output",
        type=Path,
        default=None,
        help="report path (default: BENCHMARKS.md after a full run in which both servers produced data; "
        "otherwise only the copy in the results folder)",
    )
    ap.add_argument(
        "--render-only",
        type=Path,
        metavar="RESULTS_DIR",
        help="run nothing: render the report again from RESULTS_DIR/summary.json "
        "(into RESULTS_DIR/BENCHMARKS.md, or --output)",
    )
    ap.add_argument("--no-onnx", action="store_true", help="skip the ONNX rows (tiny_mlp, densenet_onnx)")
    ap.add_argument(
        "--no-cores", action="store_true", help="skip the every-core rows (benchmarks/cores_bench.py)"
    )
    ap.add_argument(
        "--no-async",
        action="store_true",
        help="skip the async-execute rows (benchmarks/async_bench.py)",
    )
    ap.add_argument(
        "--no-openai",
        action="store_true",
        help="skip the OpenAI embeddings rows (benchmarks/openai_bench.py)",
    )
    ap.add_argument(
        "--openai-only",
        action="store_true",
        help="only the OpenAI embeddings rows (openai_bench.py, its own server, --repeat rounds): no "
        "bench.sh, measure.sh, ONNX or Python rows",
    )
    ap.add_argument(
        "--python-rows-only",
        action="store_true",
        help="only the rows of cores_bench.py and async_bench.py (each with its own servers and "
        "--repeat rounds; --no-cores / --no-async leave one out): no bench.sh, measure.sh or ONNX rows",
    )
    ap.add_argument(
        "--onnx-only",
        action="store_true",
        help="only the ONNX rows: inferd vs bare ONNX Runtime (no reference, no measure.sh)",
    )
    ap.add_argument("--no-setup", action="store_true", help="do not run setup.sh first")
    ap.add_argument("--check-goals", action="store_true", help="exit 3 if a goal is missed or not measured")
    a = ap.parse_args(argv)
    a.server_list = [s.strip() for s in a.servers.split(",") if s.strip()]
    bad = [s for s in a.server_list if s not in ("reference", "inferd")]
    if bad or not a.server_list:
        ap.error(f"--servers: unknown {bad}; choose from reference,inferd")
    if a.repeat < 1:
        ap.error("--repeat must be >= 1")
    if sum((a.onnx_only, a.python_rows_only, a.openai_only)) > 1:
        ap.error("--onnx-only, --python-rows-only and --openai-only exclude each other")
    return a


def bench_selection(a: argparse.Namespace) -> str:
    """BENCH_ONLY: --scenarios as given (plus the gRPC rows on an explicit --grpc), else every row
    (HTTP, gRPC unless --no-grpc, shm unless --no-shm); nothing with --onnx-only or --python-rows-only."""
    if a.onnx_only or a.python_rows_only or a.openai_only:
        return "^$"  # no bench.sh scenario: the report leaves those tables out
    if a.scenarios:
        return f"{a.scenarios}|{anchored(GRPC_SCENARIOS)}" if a.grpc else a.scenarios
    default = HTTP_SCENARIOS + ([] if a.grpc is False else GRPC_SCENARIOS)
    return anchored(default + (SHM_SCENARIOS if a.shm else []))


def main(argv: Sequence[str] | None = None) -> int:
    a = parse_args(argv)
    if a.render_only:
        return rerender(a.render_only, a.output)
    signal.signal(signal.SIGTERM, _on_sigterm)
    started = dt.datetime.now(dt.UTC)
    outdir = RESULTS_ROOT / started.strftime("%Y%m%d-%H%M%S")
    outdir.mkdir(parents=True, exist_ok=True)

    bench_only = bench_selection(a)
    opts = Options(
        servers=a.server_list,
        repeat=a.repeat,
        bench_only=bench_only,
        quick=a.quick,
        measure_runs=a.measure_runs or (1 if a.quick else 3),
        skip_bench=a.no_bench,
        skip_measure=a.no_measure,
        shm=a.shm,
    )
    all_servers: dict[str, Server] = {
        "reference": ReferenceServer(),
        "inferd": CommandServer("inferd", "inferd", a.inferd_cmd, a.ready_timeout),
    }
    bench_rounds = not (a.onnx_only or a.python_rows_only or a.openai_only)
    servers = [all_servers[n] for n in ("reference", "inferd") if n in opts.servers and bench_rounds]
    run_onnx = not (a.no_onnx or a.python_rows_only or a.openai_only) and "inferd" in opts.servers

    if not (a.no_setup or a.openai_only):  # the OpenAI rows need neither the reference nor perf_analyzer
        ensure_reference(outdir)
    data = RunData(
        started=started,
        finished=None,
        machine=machine_info(),
        results_dir=outdir,
        servers={s.name: s.describe() for s in servers},
        settings={
            "repeat": a.repeat,
            "quick": a.quick,
            "bench_only": bench_only,
            "scenarios_option": a.scenarios,
            "grpc": a.grpc is not False and bool(matching(bench_only, GRPC_SCENARIOS)),
            "grpc_option": a.grpc,
            "shm": a.shm and bool(matching(bench_only, SHM_SCENARIOS)),
            "shm_option": a.shm,
            "servers": opts.servers,
            "measure_runs": opts.measure_runs,
            "inferd_cmd": a.inferd_cmd,
            "inferd_cmd_overridden": a.inferd_cmd != DEFAULT_INFERD_CMD,
            "bench_scale": "0.3" if a.quick else os.environ.get("BENCH_SCALE", "1.0"),
            "onnx": run_onnx,
        },
    )
    log(f"results: {outdir}; servers {opts.servers}; {a.repeat} round(s); BENCH_ONLY={bench_only}")
    interrupted = False
    try:
        for rnd in range(1, a.repeat + 1):
            order = servers if rnd % 2 == 1 else list(reversed(servers))
            for srv in order:
                data.rounds.append(bench_round(srv, rnd, opts, outdir))
                write_json(data, outdir / "summary.json")
            if run_onnx:
                data.onnx += onnx_round(rnd, outdir, a.inferd_cmd, a.ready_timeout, a.quick)
                write_json(data, outdir / "summary.json")
        python_rows = not (a.onnx_only or a.openai_only) and {"reference", "inferd"} <= set(opts.servers)
        if python_rows and not a.no_cores:
            data.cores = cores_rows(a.repeat, outdir)
            write_json(data, outdir / "summary.json")
        if python_rows and not a.no_async:
            data.async_io = async_rows(a.repeat, outdir, a.quick)
            write_json(data, outdir / "summary.json")
        run_openai = not (a.onnx_only or a.python_rows_only or a.no_openai) and "inferd" in opts.servers
        if run_openai:
            data.openai = openai_rows(a.repeat, outdir, a.quick)
            write_json(data, outdir / "summary.json")
    except KeyboardInterrupt:
        interrupted = True
        log("interrupted; writing what was measured so far")
    finally:
        for srv in servers:
            srv.stop()

    data.finished = dt.datetime.now(dt.UTC)
    data.settings["interrupted"] = interrupted
    data.machine["loadavg_end"] = loadavg()
    write_json(data, outdir / "summary.json")
    sections = default_sections()
    report = render_report(data, sections)
    (outdir / "BENCHMARKS.md").write_text(report)
    # BENCHMARKS.md only from a full comparison; quick/partial runs leave their report in the results folder
    complete = all(data.has(s) for s in ("reference", "inferd")) and not (
        interrupted or a.quick or a.no_bench or a.no_measure
    )
    target = a.output or (DEFAULT_REPORT if complete else None)
    if target is not None:
        target.write_text(report)
    print()
    print(report)
    log(
        f"wall time {data.wall_s / 60:.1f} min; report: {target or outdir / 'BENCHMARKS.md'}"
        + ("" if target else " (BENCHMARKS.md left alone: quick/partial run or a server produced no data)")
    )
    if interrupted:
        return 130
    if a.check_goals:
        goals = next(s for s in sections if isinstance(s, GoalsSection)).results(data)
        if any(r.status != "met" for _, r in goals):
            return 3
    return 0 if all(data.has(s.name) for s in servers) else 1


def write_json(data: RunData, path: Path) -> None:
    def default(o: object) -> object:
        if isinstance(o, dt.datetime):
            return o.isoformat()
        if isinstance(o, Path):
            return str(o)
        raise TypeError(type(o).__name__)

    path.write_text(json.dumps(asdict(data), default=default, indent=1))


def read_json(path: Path) -> RunData:
    """The RunData of an earlier run (its summary.json), to render the report again."""
    raw = json.loads(path.read_text())
    rounds = []
    for r in raw["rounds"]:
        measure = None
        if r.get("measure") is not None:
            md = dict(r["measure"])
            md["latency"] = {k: Latency(**v) for k, v in md.get("latency", {}).items()}
            measure = Measure(**md)
        bench = {k: BenchRow(**v) for k, v in r.get("bench", {}).items()}
        rounds.append(ServerRound(**{**r, "bench": bench, "measure": measure}))
    return RunData(
        started=dt.datetime.fromisoformat(raw["started"]),
        finished=dt.datetime.fromisoformat(raw["finished"]) if raw.get("finished") else None,
        settings=raw["settings"],
        machine=raw["machine"],
        servers=raw["servers"],
        results_dir=Path(raw["results_dir"]),
        rounds=rounds,
        onnx=raw.get("onnx", []),
        cores=raw.get("cores", ""),
        async_io=raw.get("async_io", ""),
        openai=raw.get("openai", ""),
    )


def rerender(results_dir: Path, output: Path | None) -> int:
    data = read_json(results_dir / "summary.json")
    report = render_report(data, default_sections())
    target = output or results_dir / "BENCHMARKS.md"
    target.write_text(report)
    print(report)
    log(f"report rendered again from {results_dir / 'summary.json'}: {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
