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
import datetime as dt
import os
import re
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import cache_bench  # benchmarks/cache_bench.py: the response cache rows
import shm_bench  # benchmarks/shm_bench.py: the system shared-memory rows
from bench_paths import BENCH_SH, MEASURE_SH, ROOT, SETUP_SH
from cpu import BATCHING_MODELS, CpuMeter, ExecuteMeter
from goals import DEFAULT_GOALS, GoalsSection
from onnx_round import onnx_round  # benchmarks/onnx_round.py: one round of them
from report import (
    AsyncSection,
    CacheSection,
    ClientLatencySection,
    ColdStartMemorySection,
    CoresSection,
    FilSection,
    FloorSection,
    HeaderSection,
    MeasurementsSection,
    ObjectStorageSection,
    ObservabilitySection,
    OnnxSection,
    OpenAISection,
    ProblemsSection,
    RaySection,
    ReproduceSection,
    ScenarioSection,
    Section,
    SequenceSection,
    ShmSection,
    fmt,
    render_report,
)
from results import (
    BENCH_SH_SCENARIOS,
    DEFAULT_REPORT,
    GRPC_SCENARIOS,
    HTTP_SCENARIOS,
    RESULTS_ROOT,
    SHM_SCENARIOS,
    BenchRow,
    RunData,
    ServerRound,
    loadavg,
    machine_info,
    parse_bench_csv,
    parse_measure,
    read_json,
    scenario_model,
    write_json,
)
from servers import (
    READY_TIMEOUT_S,
    CommandServer,
    FloorServer,
    Ports,
    ReferenceServer,
    Server,
    StartError,
    anchor_run_dir,
    free_ports,
    log,
    on_sigterm,
    rel,
    run_logged,
    tail,
)

# {models}/{repo}: model repository; {root}: this checkout; {http} {grpc} {metrics}: ports
DEFAULT_INFERD_CMD = (
    "{root}/.venv/bin/inferd serve --model-repository {models} "
    "--http-port {http} --grpc-port {grpc} --metrics-port {metrics}"
)


def anchored(ids: Sequence[str]) -> str:
    """A bash ERE matching exactly these scenario ids (bench.sh matches BENCH_ONLY unanchored)."""
    return "^(" + "|".join(re.escape(i) for i in ids) + ")$"


SERVER_NAMES = ("reference", "inferd", "floor")
#: the one row the floor (benchmarks/floor_server.py) runs in every round, beside inferd's (issue 48)
FLOOR_ROW = "add_sub_http_c8"

#: the side benches' skip flags and the rows each skips
SIDE_BENCH_FLAGS = (
    ("--no-cores", "every-core rows (benchmarks/cores_bench.py)"),
    ("--no-async", "async-execute rows (benchmarks/async_bench.py)"),
    ("--no-openai", "OpenAI embeddings rows (benchmarks/openai_bench.py)"),
    ("--no-sequence", "sequence rows (benchmarks/sequence_bench.py)"),
    ("--no-observability", "tracing and scraping rows (benchmarks/observability_bench.py)"),
    ("--no-ray", "Ray Serve rows (benchmarks/ray_bench.py)"),
    ("--no-cache", "response cache rows (benchmarks/cache_bench.py)"),
    ("--no-fil", "tree-model rows of the fil backend (benchmarks/fil_bench.py)"),
)


def default_sections() -> list[Section]:
    return [
        HeaderSection(),
        ReproduceSection(),
        ProblemsSection(),
        ScenarioSection("HTTP (perf_analyzer)", r"_http_"),
        FloorSection(),
        ScenarioSection("gRPC (perf_analyzer)", r"_grpc_"),
        ShmSection(),
        OnnxSection(),
        CoresSection(),
        AsyncSection(),
        OpenAISection(),
        SequenceSection(),
        CacheSection(),
        FilSection(),
        ObservabilitySection(),
        RaySection(),
        ObjectStorageSection(),
        ColdStartMemorySection(),
        ClientLatencySection(),
        GoalsSection(DEFAULT_GOALS),
        MeasurementsSection(),
    ]


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
    serves = server.serves
    only = [i for i in matching(opts.bench_only, BENCH_SH_SCENARIOS) if serves is None or serves.search(i)]
    shm = [i for i in matching(opts.bench_only, SHM_SCENARIOS) if serves is None or serves.search(i)]
    if not opts.skip_bench and (only or (shm and opts.shm) or serves is None):
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
                if only:
                    run_bench_sh(server, ports, opts, outdir, tag, sr, only)
                if shm and opts.shm and server.alive():
                    run_shm(server, ports, opts, outdir, tag, sr, shm)
            finally:
                log(f"round {rnd}: {server.name}: stopping")
                server.stop()
        sr.bench_wall_s = time.monotonic() - t0
    if not opts.skip_measure and server.measured:
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
    server: Server, ports: Ports, opts: Options, outdir: Path, tag: str, sr: ServerRound, ids: Sequence[str]
) -> None:
    """bench.sh once per scenario, so that each row gets the server's CPU per request around it."""
    env = dict(os.environ)
    if opts.quick:
        env["BENCH_SCALE"] = "0.3"
    failed = []
    for sid in ids:
        env["BENCH_ONLY"] = f"^{sid}$"
        csv_path = outdir / f"{tag}-bench-{sid}.csv"
        meter = CpuMeter(server.pid, ports.http, scenario_model(sid))
        runs = (
            ExecuteMeter(ports.http, scenario_model(sid)) if scenario_model(sid) in BATCHING_MODELS else None
        )
        rc = run_logged(
            ["bash", str(BENCH_SH), f"localhost:{ports.http}", f"localhost:{ports.grpc}", str(csv_path)],
            outdir / f"{tag}-bench.log",
            env=env,
        )
        if runs is not None:
            runs.stop()
        rows = parse_bench_csv(csv_path) if csv_path.exists() else {}
        if sid in rows:
            rows[sid].cpu_us = meter.us_per_success()
            if runs is not None:
                rows[sid].busy, rows[sid].mean_batch = runs.busy(), runs.mean_batch()
            sr.bench[sid] = rows[sid]
        if rc != 0 or sid not in rows:
            failed.append(f"{sid} (rc {rc})")
        if not server.alive():
            sr.bench_error = f"{server.name} was not running any more after bench.sh's {sid}"
            return
    if failed:
        sr.bench_error = (sr.bench_error or "") + f" bench.sh failed: {', '.join(failed)}"


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


def side_bench(name: str, rounds: int, outdir: Path, extra: Sequence[str] = ()) -> str:
    """benchmarks/<name>_bench.py with its own servers and rounds: the markdown it wrote into
    <outdir>/<name>/<name>.md, or a line saying why there is none."""
    script = f"{name}_bench.py"
    log(f"{name}: benchmarks/{script} --rounds {rounds} (log {rel(outdir)}/{name}.log)")
    cmd = [str(ROOT / ".venv" / "bin" / "python"), str(ROOT / "benchmarks" / script)]
    cmd += ["--rounds", str(rounds), "--output", str(outdir / name), *extra]
    log_path = outdir / f"{name}.log"
    rc = run_logged(cmd, log_path, echo=False)
    md = outdir / name / f"{name}.md"
    if rc != 0 or not md.exists():
        return f"{script} failed (rc {rc}); see {rel(log_path)}\n"
    return md.read_text()


def cache_rows(outdir: Path, quick: bool) -> str:
    """cache_bench.py, its own server: the markdown it wrote, or a line saying why none."""
    log(f"cache: benchmarks/cache_bench.py (log {rel(outdir)}/cache/inferd.log)")
    (outdir / "cache").mkdir(parents=True, exist_ok=True)
    try:
        text, _ = cache_bench.section(outdir / "cache", requests=30 if quick else 100)
    except (RuntimeError, OSError) as e:
        return f"## Response cache\n\ncache_bench.py failed: {e}\n"
    return text


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
        default="reference,inferd,floor",
        help="comma-separated subset of reference,inferd,floor (default: all three; the floor, "
        "benchmarks/floor_server.py, runs add_sub_http_c8 only)",
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
    for flag, rows in SIDE_BENCH_FLAGS:
        ap.add_argument(flag, action="store_true", help=f"skip the {rows}")
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
    bad = [s for s in a.server_list if s not in SERVER_NAMES]
    if bad or not a.server_list:
        ap.error(f"--servers: unknown {bad}; choose from {','.join(SERVER_NAMES)}")
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
    signal.signal(signal.SIGTERM, on_sigterm)
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
        "floor": FloorServer(rows=anchored([FLOOR_ROW])),
    }
    bench_rounds = not (a.onnx_only or a.python_rows_only or a.openai_only)
    if a.no_bench or FLOOR_ROW not in matching(bench_only, BENCH_SH_SCENARIOS):
        all_servers.pop("floor")  # nothing to run: it has no measure.sh rows
    servers = [s for n, s in all_servers.items() if n in opts.servers and bench_rounds]
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
            data.cores = side_bench("cores", a.repeat, outdir)
            write_json(data, outdir / "summary.json")
        if python_rows and not a.no_async:
            data.async_io = side_bench("async", a.repeat, outdir, ["--count", "600"] if a.quick else [])
            write_json(data, outdir / "summary.json")
        if python_rows and not a.no_sequence:
            data.sequence = side_bench("sequence", a.repeat, outdir, ["--count", "600"] if a.quick else [])
            write_json(data, outdir / "summary.json")
        run_openai = not (a.onnx_only or a.python_rows_only or a.no_openai) and "inferd" in opts.servers
        if run_openai:
            data.openai = side_bench("openai", a.repeat, outdir, ["--seconds", "3"] if a.quick else [])
            write_json(data, outdir / "summary.json")
        if "inferd" in opts.servers and not (
            a.onnx_only or a.python_rows_only or a.openai_only or a.no_cache
        ):
            data.cache = cache_rows(outdir, a.quick)
            write_json(data, outdir / "summary.json")
        if "inferd" in opts.servers and not (
            a.onnx_only or a.python_rows_only or a.openai_only or a.no_observability
        ):
            extra = ["--count", "600"] if a.quick else []
            data.observability = side_bench("observability", a.repeat, outdir, extra)
            write_json(data, outdir / "summary.json")
        if "inferd" in opts.servers and not (a.onnx_only or a.python_rows_only or a.openai_only or a.no_fil):
            data.fil = side_bench("fil", a.repeat, outdir, ["--seconds", "2"] if a.quick else [])
            write_json(data, outdir / "summary.json")
        if "inferd" in opts.servers and not (a.onnx_only or a.python_rows_only or a.openai_only or a.no_ray):
            data.ray = side_bench("ray", a.repeat, outdir, ["--count", "300"] if a.quick else [])
            write_json(data, outdir / "summary.json")
        if "inferd" in opts.servers and not (a.onnx_only or a.python_rows_only or a.openai_only):
            data.object_storage = side_bench("object_storage", a.repeat, outdir)
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
