"""The shared-memory rows of `make bench`: perf_analyzer through system shared memory.

Used by run.py (stdlib only, like it). bench.sh has no shared-memory scenario, so these rows are
run by the harness itself, against each server while it is still up after bench.sh, with the same
settings bench.sh uses (count windows, BENCH_STABILITY / BENCH_MAX_TRIALS with one "loose" retry at
-s 100 -r 4, BENCH_SCALE, PA_CPUSET, PA_TIMEOUT, sync mode, batch 1). Each row has a binary-HTTP
twin among bench.sh's rows (same model, shape and concurrency), which the report sets beside it.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx_bench  # parse_perf: perf_analyzer's -f CSV and verbose output
from bench_paths import COMMON_SH

RunLogged = Callable[..., int]


@dataclass(frozen=True)
class ShmScenario:
    id: str
    model: str
    concurrency: int
    window: int  # requests per measurement window (times BENCH_SCALE, at least 50), as bench.sh
    args: tuple[str, ...]
    twin: str  # bench.sh's binary-HTTP row of the same model, shape and concurrency

    def perf_args(self) -> list[str]:
        return ["-m", self.model, "-i", "http", "--concurrency-range", str(self.concurrency), *self.args]


MIB = 1024 * 1024
SCENARIOS = [
    ShmScenario(
        "identity_fp32_1MiB_shm_c4",
        "identity_fp32",
        4,
        300,  # = bench.sh's identity_fp32_1MiB_http_c4
        (
            "--shape",
            "INPUT0:262144",  # 262144 FP32 = 1 MiB
            "--shared-memory",
            "system",
            "--output-shared-memory-size",
            str(MIB),
        ),
        "identity_fp32_1MiB_http_c4",
    ),
]
IDS = [s.id for s in SCENARIOS]


def measure(s: ShmScenario, http_url: str, raw: Path, scale: float, run_logged: RunLogged) -> dict[str, Any]:
    """One scenario bench.sh's way; a dict with BenchRow's fields (scenario, status, figures)."""
    raw.mkdir(parents=True, exist_ok=True)
    n = max(50, int(s.window * scale))
    stab = os.environ.get("BENCH_STABILITY", "25")
    trials = os.environ.get("BENCH_MAX_TRIALS", "6")
    timeout = os.environ.get("PA_TIMEOUT", "90")
    taskset = f"taskset -c {shlex.quote(os.environ['PA_CPUSET'])} " if os.environ.get("PA_CPUSET") else ""
    script = (
        f"source {shlex.quote(str(COMMON_SH))}; anchor_paths || exit 1; "
        f'LD_LIBRARY_PATH=$(pa_ld_path) exec timeout {shlex.quote(timeout)} {taskset}"$PERF_ANALYZER" "$@"'
    )
    status, rc = "stable", 1
    for attempt, (sp, tr) in enumerate(((stab, trials), ("100", "4")), 1):
        csv_path = raw / f"{s.id}.csv"
        txt = raw / f"{s.id}.attempt{attempt}.txt"
        csv_path.unlink(missing_ok=True)
        args = [
            "-v",
            *s.perf_args(),
            "-u",
            http_url,
            "-b",
            "1",
            "--measurement-mode",
            "count_windows",
            "--measurement-request-count",
            str(n),
            "-s",
            sp,
            "-r",
            tr,
            "-f",
            str(csv_path),
        ]
        rc = run_logged(["bash", "-c", script, "perf_analyzer", *args], txt, echo=False)
        if rc == 0 and csv_path.exists() and csv_path.stat().st_size > 0:
            got = onnx_bench.parse_perf(csv_path, txt)
            return {
                "scenario": s.id,
                "status": status,
                "infer_per_s": got["infer_per_s"],
                "p50_us": got["p50_us"],
                "p99_us": got["p99_us"],
                "spread_pct": got["spread_pct"],
            }
        status = "loose"
    return {
        "scenario": s.id,
        "status": f"failed (rc {rc})",
        "infer_per_s": None,
        "p50_us": None,
        "p99_us": None,
        "spread_pct": None,
    }
