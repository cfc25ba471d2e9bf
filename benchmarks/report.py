"""BENCHMARKS.md: a list of Section objects, each rendering markdown from a RunData (an empty
string leaves it out)."""

from __future__ import annotations

import contextlib
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from pathlib import Path

import onnx_bench  # benchmarks/onnx_bench.py: the ONNX Runtime rows
import shm_bench  # benchmarks/shm_bench.py: the system shared-memory rows
from bench_paths import BENCH_SH, MEASURE_SH, MEASUREMENTS_MD
from results import REFERENCE_VERSION, RunData, ratio
from servers import MODELS, rel

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
            f"{a} / {b} CPU per request (us)",
            "CPU ratio",
        ]
        if multi:
            header.append(f"infer/s per round ({a} ; {b})")
            header.append(f"CPU per request per round ({a} ; {b})")
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
                f"{fmt(x.cpu_us)} / {fmt(y.cpu_us)}",
                fmt_ratio(ratio(x.cpu_us, y.cpu_us)),
            ]
            if multi:
                row.append(
                    " ".join(fmt(v) for v in x.per_round) + " ; " + " ".join(fmt(v) for v in y.per_round)
                )
                row.append(
                    " ".join(fmt(v) for v in x.cpu_per_round)
                    + " ; "
                    + " ".join(fmt(v) for v in y.cpu_per_round)
                )
            row.append(self._notes(data, sid))
            rows.append(row)
        return (
            f"## {self.title}\n\n"
            f"perf_analyzer, sync mode, batch 1. ratio > 1: {a} has more throughput; "
            f"p99 ratio < 1: {a} has the lower tail latency. CPU per request: the server's process "
            "tree's CPU time over the successes its statistics counted during the row (warm-up and "
            f"every trial; benchmarks/cpu.py); CPU ratio < 1: {a} spends less.\n\n"
            + md_table(header, rows, "l" + "r" * 8 + "l" * (len(header) - 9))
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


class FloorSection(Section):
    """inferd's CPU per request against the floor's (benchmarks/floor_server.py, issue 48), per round."""

    def __init__(self, subject: str = "inferd", floor: str = "floor", goal: float = 1.3) -> None:
        self.subject, self.floor, self.goal = subject, floor, goal

    def render(self, data: RunData) -> str:
        a, f = self.subject, self.floor
        ids = [s for s in data.scenario_ids() if any(s in r.bench for r in data.of(f))]
        if not ids:
            return ""
        rows = []
        for sid in ids:
            x, y = data.bench(a, sid), data.bench(f, sid)
            floor_rounds = {r.round: r.bench.get(sid) for r in data.of(f)}
            per_round = []
            for r in data.of(a):
                mine, theirs = r.bench.get(sid), floor_rounds.get(r.round)
                cx, cy = mine.cpu_us if mine else None, theirs.cpu_us if theirs else None
                per_round.append(f"r{r.round}: {fmt(cx)} / {fmt(cy)} = {fmt_ratio(ratio(cx, cy))}")
            rows.append(
                [
                    f"`{sid}`",
                    fmt(x.cpu_us),
                    fmt(y.cpu_us),
                    fmt_ratio(ratio(x.cpu_us, y.cpu_us)),
                    fmt(x.infer_per_s, 1),
                    fmt(y.infer_per_s, 1),
                    "; ".join(per_round),
                ]
            )
        return (
            f"## The floor: {a} against a minimal Python KServe v2 server (perf_analyzer, HTTP)\n\n"
            "`benchmarks/floor_server.py` (issue 48) is the least a Python server does for add_sub: uvloop "
            "and httptools, keep-alive, the JSON header parsed with orjson, the binary tensors read with "
            "numpy, the answer's header and binary outputs written in one piece; no validation, statistics "
            "(one counter) or scheduling. It runs in the same rounds as the others, next to inferd, with "
            f"the same perf_analyzer load. Goal: {a}'s CPU per request <= {self.goal:g}x the floor's (the "
            "server's process tree over its successes, benchmarks/cpu.py; medians, then per round).\n\n"
            + md_table(
                [
                    "scenario",
                    f"{a} CPU/req (us)",
                    f"{f} CPU/req (us)",
                    f"{a}/{f} CPU",
                    f"{a} infer/s",
                    f"{f} infer/s",
                    f"per round: {a} / {f} CPU (us)",
                ],
                rows,
                "l" + "r" * 5 + "l",
            )
        )


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


class SequenceSection(Section):
    """benchmarks/sequence_bench.py's table: stateful models driven as sequences (issue 12)."""

    def render(self, data: RunData) -> str:
        return data.sequence


class ObservabilitySection(Section):
    """benchmarks/observability_bench.py's table: what tracing and scraping cost (issue 13)."""

    def render(self, data: RunData) -> str:
        return data.observability


class RaySection(Section):
    """benchmarks/ray_bench.py's table: add_sub through Ray Serve against plain inferd serve (issue 14)."""

    def render(self, data: RunData) -> str:
        return data.ray


class ObjectStorageSection(Section):
    """benchmarks/object_storage_bench.py's table: time to READY from S3 against a local folder (issue 14)."""

    def render(self, data: RunData) -> str:
        return data.object_storage


class FilSection(Section):
    """benchmarks/fil_bench.py's table: tree models served by the fil backend against native predict (issue 30)."""

    def render(self, data: RunData) -> str:
        return data.fil


class CacheSection(Section):
    """benchmarks/cache_bench.py's table: a response-cache hit against a miss on densenet_onnx (issue 12)."""

    def render(self, data: RunData) -> str:
        return data.cache


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


class MeasurementsSection(Section):
    """benchmarks/measurements.md, verbatim: the component measurements run by hand (a bench script, a
    profiler, a reliability attack) that ARCHITECTURE.md's decisions rest on. They are no run's data, so
    the file keeps them and every `make bench` renders it again; left out when the file is missing."""

    def __init__(self, path: Path = MEASUREMENTS_MD) -> None:
        self.path = path

    def render(self, data: RunData) -> str:
        try:
            return self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return ""


def render_report(data: RunData, sections: Sequence[Section]) -> str:
    parts = [s.render(data) for s in sections]
    return "\n\n".join(p.strip() for p in parts if p.strip()) + "\n"
