"""The every-core rows (issue 9): Python instances in threads and in worker processes, against the reference.

    python benchmarks/cores_bench.py                       # 3 rounds, inferd and the reference in turn
    python benchmarks/cores_bench.py --rounds 1 --servers inferd

Models, written into the results folder, Python backend, max_batch_size 0:
- ``cpu_work``: each execute does about 3 ms of pure-Python work per request (a tokenizer-like loop
  that holds the interpreter lock), ``instance_group [{ count: 2 }]``, no ``execution_mode``: what an
  unmodified Triton repository gives inferd, which decides by itself (``auto``);
- ``cpu_work_thread``: the same with ``execution_mode: thread`` (inferd's instances as threads);
- ``add_sub_process`` / ``add_sub_thread``: the reference's add_sub with ``execution_mode`` process /
  thread, one instance: what a worker process costs a light model.
perf_analyzer (the reference's build, bench.sh's settings: count windows, sync, batch 1, HTTP) drives
``cpu_work*`` at concurrency 4 and ``add_sub*`` at concurrency 8. The reference serves ``cpu_work``
and ``add_sub_process`` (it ignores ``execution_mode``: its instances are always processes).
``workers``: inferd with ``--workers 2`` (two serving processes on the same ports) serves the
thread-mode rows, against one process: what a second front-end process buys on this machine.

Goals (issue 9): ``cpu_work`` >= 1.0x the reference and >= 1.7x ``cpu_work_thread``; the process
mode's cost on add_sub stated, aiming at >= 1.5x the reference even so. Medians over the rounds with
the per-round figures: ``benchmarks/results/cores-<UTC timestamp>/cores.md``. Python stdlib only.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import servers
from async_bench import CONFIG, perf_analyzer
from bench_paths import ROOT

REFERENCE_MODELS = ROOT / "tests" / "fixtures" / "reference_models"

CPU_WORK = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            x = r.inputs()[0].as_numpy()
            n = 0
            for i in range(60_000):  # about 3 ms of Python: a tokenizer or a feature loop
                n = (n + i * 7) % 1_000_003
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x + np.float32(n % 2))]))
        return out
"""
MODE = 'parameters: {{ key: "execution_mode" value: {{ string_value: "{mode}" }} }}\n'

#: (row id, model, concurrency, servers, request count, perf_analyzer --shape)
ROWS = [
    ("cpu_work_http_c4", "cpu_work", 4, ("inferd", "reference"), 600, "INPUT0:4"),
    ("cpu_work_thread_http_c4", "cpu_work_thread", 4, ("inferd", "workers"), 600, "INPUT0:4"),
    ("add_sub_process_http_c8", "add_sub_process", 8, ("inferd", "reference"), 4000, None),
    ("add_sub_thread_http_c8", "add_sub_thread", 8, ("inferd", "workers"), 4000, None),
]
#: what the supervisor logs once every ``--workers`` process serves
ALL_SERVING = "all 2 workers serving"


def write_repository(dest: Path) -> Path:
    for name, mode in (("cpu_work", None), ("cpu_work_thread", "thread")):
        (dest / name / "1").mkdir(parents=True, exist_ok=True)
        (dest / name / "1" / "model.py").write_text(CPU_WORK.lstrip())
        extra = MODE.format(mode=mode) if mode else ""
        (dest / name / "config.pbtxt").write_text(CONFIG.format(name=name, count=2, extra=extra))
    src = REFERENCE_MODELS / "add_sub"
    for mode in ("process", "thread"):
        name = f"add_sub_{mode}"
        (dest / name / "1").mkdir(parents=True, exist_ok=True)
        (dest / name / "1" / "model.py").write_text((src / "1" / "model.py").read_text())
        config = (src / "config.pbtxt").read_text().replace('name: "add_sub"', f'name: "{name}"')
        if f'name: "{name}"' not in config:
            raise RuntimeError(f"{src / 'config.pbtxt'}: no name line to rewrite")
        (dest / name / "config.pbtxt").write_text(config + MODE.format(mode=mode))
    return dest


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--servers", default="inferd,reference,workers")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--python", default=sys.executable, help="the interpreter that runs inferd")
    ap.add_argument("--output", type=Path, default=None, help="results folder (default: a new one)")
    args = ap.parse_args()
    out = args.output or ROOT / "benchmarks" / "results" / time.strftime("cores-%Y%m%d-%H%M%S", time.gmtime())
    repo = write_repository(out / "models")
    load_start = Path("/proc/loadavg").read_text().split()[:3]
    names = args.servers.split(",")
    #: row -> server -> one dict per round
    results: dict[str, dict[str, list[dict[str, float]]]] = {}
    for rnd in range(1, args.rounds + 1):
        for name in names if rnd % 2 else list(reversed(names)):  # who goes first flips each round
            if name == "inferd":
                server = servers.inferd(repo, out / "inferd.log", args.python)
            elif name == "workers":
                server = servers.inferd(repo, out / f"workers-r{rnd}.log", args.python, "--workers 2")
            else:
                server = servers.reference(repo, out / "reference.log")
            http = server.start().http
            try:
                if name == "workers":  # perf_analyzer's connections must find both processes listening
                    wait_for_line(out / f"workers-r{rnd}.log", ALL_SERVING)
                for row, model, conc, sides, count, shape in ROWS:
                    if name not in sides:
                        continue
                    raw = out / f"r{rnd}-{name}-{row}.txt"
                    got = perf_analyzer(model, f"localhost:{http}", "http", [], count, conc, raw, shape)
                    results.setdefault(row, {}).setdefault(name, []).append(got)
                    print(f"round {rnd} {name:9} {row:26} {got}", flush=True)
            finally:
                server.stop()
    load_end = Path("/proc/loadavg").read_text().split()[:3]
    text = render(results, load_start, load_end, args.rounds)
    (out / "cores.md").write_text(text)
    (out / "summary.json").write_text(json.dumps(results, indent=1))
    print(text)
    print(f"results: {out}")
    return 0


def wait_for_line(log: Path, line: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while line not in log.read_text(errors="replace"):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{log}: no '{line}' after {timeout:g} s")
        time.sleep(0.1)


def median(runs: list[dict[str, float]], key: str) -> float | None:
    vals = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def render(
    results: dict[str, dict[str, list[dict[str, float]]]], start: list[str], end: list[str], rounds: int
) -> str:
    lines = [
        f"{rounds} round(s); load average at start / end: {' '.join(start)} / {' '.join(end)}.",
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
            per = ", ".join(f"{r['infer_per_s']:,.0f}" for r in runs if r)
            p50, p99 = median(runs, "p50_us"), median(runs, "p99_us")
            cells += (
                [f"{m:,.1f} ({per})", f"{p50:,.0f} / {p99:,.0f}" if p50 and p99 else "-"] if m else ["-", "-"]
            )
        x, y = med[row, "inferd"], med[row, "reference"]
        cells.append(f"{x / y:.2f}x" if x and y else "-")
        lines.append(f"| `{row}` | " + " | ".join(cells) + " |")

    def ratio(a: tuple[str, str], b: tuple[str, str]) -> str:
        x, y = med.get(a), med.get(b)
        return f"{x / y:.2f}x" if x and y else "n/a"

    lines += [
        "",
        f"- `cpu_work` (auto) / reference: {ratio(('cpu_work_http_c4', 'inferd'), ('cpu_work_http_c4', 'reference'))}"
        " (goal >= 1.0x)",
        f"- `cpu_work` (auto) / `cpu_work_thread`: "
        f"{ratio(('cpu_work_http_c4', 'inferd'), ('cpu_work_thread_http_c4', 'inferd'))} (goal >= 1.7x)",
        f"- add_sub in a worker process / in a thread: "
        f"{ratio(('add_sub_process_http_c8', 'inferd'), ('add_sub_thread_http_c8', 'inferd'))}",
        f"- add_sub in a worker process / reference: "
        f"{ratio(('add_sub_process_http_c8', 'inferd'), ('add_sub_process_http_c8', 'reference'))}"
        " (aim >= 1.5x)",
        "",
        "`--workers 2` (two serving processes sharing the ports) against one process, the same rows:",
        "",
        "| row | one process infer/s (median; rounds) | `--workers 2` infer/s (median; rounds) "
        "| `--workers 2` p50 / p99 (us) | `--workers 2` / one |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for row, _model, _conc, sides, *_ in ROWS:
        if "workers" not in sides:
            continue
        runs = results.get(row, {}).get("workers", [])
        m = med[row, "workers"] = median(runs, "infer_per_s")
        per = ", ".join(f"{r['infer_per_s']:,.0f}" for r in runs if r)
        p50, p99 = median(runs, "p50_us"), median(runs, "p99_us")
        one = med[row, "inferd"]
        lines.append(
            f"| `{row}` | {f'{one:,.1f}' if one else '-'} | {f'{m:,.1f} ({per})' if m else '-'} | "
            f"{f'{p50:,.0f} / {p99:,.0f}' if p50 and p99 else '-'} | {ratio((row, 'workers'), (row, 'inferd'))} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
