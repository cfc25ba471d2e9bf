"""What a benchmark run measured: the scenario ids, the rows parsed from bench.sh and measure.sh,
one RunData per run (saved as summary.json and read back to render the report again)."""

from __future__ import annotations

import contextlib
import csv
import datetime as dt
import json
import os
import platform
import re
import statistics
import subprocess
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import shm_bench  # benchmarks/shm_bench.py: the system shared-memory rows
from bench_paths import COMMON_SH, ROOT
from servers import rel

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


def scenario_model(sid: str) -> str:
    """The model a bench.sh scenario id runs: ``identity_fp32_1MiB_http_c4`` -> ``identity_fp32``."""
    head = re.split(r"_(?:http|grpc)_c\d+$", sid)[0]
    return re.sub(r"_\d+[KMG]iB$", "", head)


# run by the harness itself (shm_bench.py), after bench.sh, against the same server
SHM_SCENARIOS = list(shm_bench.IDS)
# every scenario id (orders the tables)
ALL_SCENARIOS = BENCH_SH_SCENARIOS + SHM_SCENARIOS

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
    #: the server's process-tree CPU over the successes its statistics counted (benchmarks/cpu.py)
    cpu_us: float | None = None
    #: batching models' rows (cpu.BATCHING_MODELS): the instance's busy share and mean batch size
    busy: float | None = None
    mean_batch: float | None = None


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
    cpu_us: float | None = None
    cpu_per_round: list[float | None] = field(default_factory=list)
    busy: float | None = None
    busy_per_round: list[float | None] = field(default_factory=list)
    mean_batch: float | None = None


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
    #: the response cache rows (cache_bench.py): its markdown, or why it is missing
    cache: str = ""
    #: the sequence rows (sequence_bench.py): its markdown, or why it is missing
    sequence: str = ""
    #: the Ray Serve rows (ray_bench.py): its markdown, or why it is missing
    ray: str = ""
    #: the tracing and scraping rows (observability_bench.py): its markdown, or why it is missing
    observability: str = ""
    #: the object-storage rows (object_storage_bench.py): its markdown, or why it is missing
    object_storage: str = ""
    #: the fil backend's rows (fil_bench.py): its markdown, or why it is missing; goals.py reads their
    #: figures from <results_dir>/fil/summary.json
    fil: str = ""

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
            cpu_us=median([x.cpu_us if x else None for x in rows]),
            cpu_per_round=[x.cpu_us if x else None for x in rows],
            busy=median([x.busy if x else None for x in rows]),
            busy_per_round=[x.busy if x else None for x in rows],
            mean_batch=median([x.mean_batch if x else None for x in rows]),
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
        cache=raw.get("cache", ""),
        sequence=raw.get("sequence", ""),
        ray=raw.get("ray", ""),
        observability=raw.get("observability", ""),
        object_storage=raw.get("object_storage", ""),
        fil=raw.get("fil", ""),
    )


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
