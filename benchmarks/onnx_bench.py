"""The ONNX rows of `make bench`: inferd serving the ONNX example models vs bare ONNX Runtime.

Used by run.py (stdlib only, like it). The example models (MODELS: tiny_mlp, densenet_onnx and
digits_onnx) are built once (examples/build_models.py --only ...). Per round, with inferd serving
that folder, each scenario is measured twice back to back, so that both see the same machine: bare
ONNX Runtime in-process with bare_onnxruntime.py (the same sessions and thread settings inferd
gives the model), and perf_analyzer against inferd (binary HTTP, sync, batch 1, count windows, as
bench.sh does). Which of the two goes first flips every other round. The small models at
concurrency 1 are also timed by lean_http.py, a client whose own cost is small next to theirs:
what perf_analyzer's client costs shows as the gap between the two.
"""

from __future__ import annotations

import csv
import json
import re
import shlex
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench_paths import COMMON_SH, ROOT
from cpu import CpuMeter

MODELS = ("tiny_mlp", "densenet_onnx", "digits_onnx")


@dataclass(frozen=True)
class Scenario:
    model: str
    concurrency: int
    window: int  # perf_analyzer requests per measurement window (times BENCH_SCALE)
    timeout_s: int
    lean: bool = False  # also timed by lean_http.py (concurrency 1 only)
    #: other bare layouts measured beside it (bare_onnxruntime.py --layout): a default InferenceSession,
    #: the cores shared out evenly; what inferd's thread choice is judged against (issue 9)
    layouts: tuple[str, ...] = ()
    #: also served by the floor (floor_server.py --onnx-model: inferd's own session behind the least
    #: a Python KServe v2 server does), measured as inferd is (issue 48)
    floor: bool = False

    @property
    def id(self) -> str:
        return f"{self.model}_c{self.concurrency}"


SCENARIOS = [
    Scenario("tiny_mlp", 1, 3000, 120, lean=True),
    Scenario("tiny_mlp", 4, 4000, 120),
    Scenario("densenet_onnx", 1, 40, 300, layouts=("default", "shared"), floor=True),
    Scenario("densenet_onnx", 4, 60, 300, layouts=("default", "shared")),
    Scenario("digits_onnx", 1, 3000, 120, lean=True),
    Scenario("digits_onnx", 4, 4000, 120),
]
BARE_SECONDS = {"tiny_mlp": 8.0, "densenet_onnx": 15.0, "digits_onnx": 8.0}
LEAN_SECONDS = 8.0

RunLogged = Callable[..., int]


def venv_python() -> str:
    py = ROOT / ".venv" / "bin" / "python"
    return str(py) if py.exists() else "python3"


def build_repository(dest: Path, log_path: Path, run_logged: RunLogged) -> None:
    """The example models this section measures, into ``dest``."""
    cmd = [venv_python(), str(ROOT / "examples" / "build_models.py"), str(dest), "--only", ",".join(MODELS)]
    if run_logged(cmd, log_path) != 0:
        raise RuntimeError(f"building the ONNX examples failed; see {log_path}")


def measure_bare(
    repo: Path, s: Scenario, outdir: Path, tag: str, run_logged: RunLogged, layout: str = "inferd"
) -> dict[str, Any]:
    """bare_onnxruntime.py for one scenario: its model at its concurrency, with inferd's sessions
    (side "bare") or another layout (side "bare-LAYOUT")."""
    side = "bare" if layout == "inferd" else f"bare-{layout}"
    out = outdir / f"{tag}-{side}-{s.id}.jsonl"
    out.unlink(missing_ok=True)
    cmd = [
        venv_python(),
        str(ROOT / "benchmarks" / "bare_onnxruntime.py"),
        str(repo / s.model),
        "--concurrency",
        str(s.concurrency),
        "--seconds",
        str(BARE_SECONDS[s.model]),
        "--layout",
        layout,
        "--output",
        str(out),
    ]
    rc = run_logged(cmd, outdir / f"{tag}-bare.log", echo=False)
    r = json.loads(out.read_text().splitlines()[0]) if out.exists() and out.read_text().strip() else None
    if r is None:
        return {"side": side, "scenario": s.id, "status": f"failed (rc {rc})"}
    return {
        "side": side,
        "scenario": s.id,
        "status": "ok",
        "infer_per_s": r["infer_per_s"],
        "p50_us": r["p50_us"],
        "p99_us": r["p99_us"],
        "threads": r.get("threads"),
        "sessions": r.get("sessions"),
    }


def measure_served(
    http_port: int,
    s: Scenario,
    outdir: Path,
    tag: str,
    scale: float,
    run_logged: RunLogged,
    side: str = "inferd",
    pid: int | None = None,
) -> dict[str, Any]:
    """perf_analyzer against inferd (or the floor: ``side``) for one scenario, bench.sh's way (stable,
    else one 'loose' retry); with the server's ``pid``, its CPU per request too (cpu.py)."""
    raw = outdir / f"{tag}-onnx-perf"
    raw.mkdir(parents=True, exist_ok=True)
    n = max(20, int(s.window * scale))
    status = "stable"
    meter = CpuMeter(pid, http_port, s.model)
    for attempt, (stab, trials) in enumerate(((25, 6), (100, 4)), 1):
        csv_path = raw / f"{s.id}-{side}.csv"
        txt = raw / f"{s.id}-{side}.attempt{attempt}.txt"
        csv_path.unlink(missing_ok=True)
        args = [
            "-v",
            "-m",
            s.model,
            "-i",
            "http",
            "-u",
            f"localhost:{http_port}",
            "--concurrency-range",
            str(s.concurrency),
            "-b",
            "1",
            "--measurement-mode",
            "count_windows",
            "--measurement-request-count",
            str(n),
            "-s",
            str(stab),
            "-r",
            str(trials),
            "-f",
            str(csv_path),
        ]
        script = (
            f"source {shlex.quote(str(COMMON_SH))}; anchor_paths || exit 1; "
            f'LD_LIBRARY_PATH=$(pa_ld_path) exec timeout {s.timeout_s} "$PERF_ANALYZER" "$@"'
        )
        rc = run_logged(["bash", "-c", script, "perf_analyzer", *args], txt, echo=False)
        if rc == 0 and csv_path.exists():
            cpu = meter.us_per_success()
            return {
                "side": side,
                "scenario": s.id,
                "status": status,
                "cpu_us": cpu,
                **parse_perf(csv_path, txt),
            }
        status = "loose"
    return {"side": side, "scenario": s.id, "status": f"failed (rc {rc})"}


def measure_lean(
    http_port: int, s: Scenario, outdir: Path, tag: str, run_logged: RunLogged
) -> dict[str, Any]:
    """lean_http.py against inferd for one concurrency-1 scenario."""
    out = outdir / f"{tag}-lean-{s.id}.json"
    cmd = [
        venv_python(),
        str(ROOT / "benchmarks" / "lean_http.py"),
        f"localhost:{http_port}",
        s.model,
        "--seconds",
        str(LEAN_SECONDS),
    ]
    rc = run_logged(cmd, out, echo=False)
    lines = out.read_text().splitlines() if out.exists() else []
    r = next((json.loads(x) for x in lines if x.startswith("{")), None)
    if rc != 0 or r is None:
        return {"side": "lean", "scenario": s.id, "status": f"failed (rc {rc})"}
    return {
        "side": "lean",
        "scenario": s.id,
        "status": "ok",
        "infer_per_s": r["infer_per_s"],
        "p50_us": r["p50_us"],
        "p99_us": r["p99_us"],
        "floor_p50_us": r["floor_p50_us"],
    }


def parse_perf(csv_path: Path, txt: Path) -> dict[str, Any]:
    with open(csv_path, newline="") as f:
        recs = list(csv.DictReader(f))
    out: dict[str, Any] = {"infer_per_s": None, "p50_us": None, "p99_us": None, "spread_pct": None}
    if recs:
        r = recs[0]
        out["infer_per_s"] = float(r["Inferences/Second"])
        out["p50_us"] = float(r["p50 latency"]) if r.get("p50 latency") else None
        out["p99_us"] = float(r["p99 latency"]) if r.get("p99 latency") else None
    text = txt.read_text(errors="replace") if txt.exists() else ""
    passes = [float(x) for x in re.findall(r"Pass \[\d+\] throughput: ([\d.]+) infer/sec", text)]
    if len(passes) >= 3 and min(passes[-3:]) > 0:
        out["spread_pct"] = round((max(passes[-3:]) / min(passes[-3:]) - 1) * 100, 1)
    m = re.search(r"Avg request latency: (\d+) usec \((.*?)\)", text)
    if m:
        out["server"] = f"{m.group(1)} us ({m.group(2)})"
    return out


# -- aggregation and report ----------------------------------------------------------------------


def aggregate(rows: Sequence[dict[str, Any]], side: str, scenario: str) -> dict[str, float | None]:
    """Medians over the rounds of one side's rows of one scenario."""
    got = [r for r in rows if r["side"] == side and r["scenario"] == scenario]

    def med(key: str) -> float | None:
        vals = [r[key] for r in got if r.get(key) is not None]
        return statistics.median(vals) if vals else None

    return {
        "infer_per_s": med("infer_per_s"),
        "cpu_us": med("cpu_us"),
        "p50_us": med("p50_us"),
        "p99_us": med("p99_us"),
        "floor_p50_us": med("floor_p50_us"),
    }


def added_p50(rows: Sequence[dict[str, Any]], side: str, scenario: str) -> float | None:
    """``side``'s p50 minus bare ONNX Runtime's (medians over the rounds)."""
    x, y = aggregate(rows, side, scenario)["p50_us"], aggregate(rows, "bare", scenario)["p50_us"]
    return x - y if x is not None and y is not None else None


def _fmt(v: float | None, digits: int = 0) -> str:
    return "n/a" if v is None else f"{v:,.{digits}f}"


def render(rows: Sequence[dict[str, Any]]) -> str:
    """The markdown section (empty when the run measured no ONNX rows)."""
    if not rows:
        return ""
    lines = [
        "## ONNX Runtime backend: inferd vs bare ONNX Runtime",
        "",
        "inferd serving the example models (`examples/build_models.py`: tiny_mlp, densenet_onnx, "
        "digits_onnx: scikit-learn's digits classifier exported by skl2onnx), "
        "measured by perf_analyzer (binary HTTP, sync, batch 1), against `benchmarks/bare_onnxruntime.py`: "
        "`session.run` called in-process by as many threads as the concurrency, with the same sessions "
        "(one per instance) and session options (threads, graph level) as inferd makes. "
        "`added p50` = inferd's p50 minus bare p50: what the server (HTTP, scheduling) and the client "
        "add. perf_analyzer's own client is not light (libcurl, its threads), so the small models at "
        "concurrency 1 are also timed by `benchmarks/lean_http.py`: one keep-alive socket, one binary "
        "request built once and sent again and again (`lean` columns; `lean floor`: the same client's "
        "round trip to `/v2/health/live`, no inference). Server, clients and bare runs share the two "
        "cores with whatever else runs on the machine.",
        "",
        "| scenario | inferd infer/s | bare infer/s | ratio inferd/bare | inferd p50 / p99 (us) | "
        "bare p50 / p99 (us) | added p50 (us) | lean p50 / p99 (us) | lean added p50 (us) | "
        "lean floor p50 (us) | notes |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for s in SCENARIOS:
        x, y = aggregate(rows, "inferd", s.id), aggregate(rows, "bare", s.id)
        r = x["infer_per_s"] / y["infer_per_s"] if x["infer_per_s"] and y["infer_per_s"] else None
        lean = aggregate(rows, "lean", s.id)
        lean_cells = (
            f"{_fmt(lean['p50_us'])} / {_fmt(lean['p99_us'])} | {_fmt(added_p50(rows, 'lean', s.id))} | "
            f"{_fmt(lean['floor_p50_us'])}"
            if s.lean
            else "- | - | -"
        )
        notes = sorted(
            {
                f"{row['side']}: {row['status']}"
                for row in rows
                if row["scenario"] == s.id and row["status"] not in ("ok", "stable")
            }
        )
        lines.append(
            f"| `{s.id}` | {_fmt(x['infer_per_s'], 1)} | {_fmt(y['infer_per_s'], 1)} | "
            f"{'n/a' if r is None else f'{r:.2f}x'} | {_fmt(x['p50_us'])} / {_fmt(x['p99_us'])} | "
            f"{_fmt(y['p50_us'])} / {_fmt(y['p99_us'])} | {_fmt(added_p50(rows, 'inferd', s.id))} | "
            f"{lean_cells} | {'; '.join(notes)} |"
        )
    threads = {
        r["scenario"].rsplit("_c", 1)[0]: (r.get("sessions"), r.get("threads"))
        for r in rows
        if r["side"] == "bare" and r.get("threads")
    }
    layouts = [s for s in SCENARIOS if s.layouts]
    if layouts:
        lines += [
            "",
            "Against other bare layouts (same rounds): `default`, one InferenceSession with ONNX Runtime's "
            "default options (every core, spinning threads), as a user's own script would make it; "
            "`shared`, one session per instance with the cores shared out evenly (inferd before issue 9). "
            "inferd gives its first instance every core with threads that do not spin and hands one request "
            "at a time to it.",
            "",
            "| scenario | inferd infer/s | bare inferd layout | bare default | bare shared | "
            "inferd / default | inferd / best bare |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for s in layouts:
            x = aggregate(rows, "inferd", s.id)["infer_per_s"]
            bare = {
                k: aggregate(rows, k, s.id)["infer_per_s"] for k in ("bare", "bare-default", "bare-shared")
            }
            best = max((v for v in bare.values() if v), default=None)
            d = bare["bare-default"]
            lines.append(
                f"| `{s.id}` | {_fmt(x, 1)} | {_fmt(bare['bare'], 1)} | {_fmt(d, 1)} | "
                f"{_fmt(bare['bare-shared'], 1)} | {'n/a' if not (x and d) else f'{x / d:.2f}x'} | "
                f"{'n/a' if not (x and best) else f'{x / best:.2f}x'} |"
            )
    lines += render_floor(rows)
    if threads:
        lines.append("")
        lines.append(
            "Sessions and threads (both sides): "
            + "; ".join(
                f"{m}: {n} session(s), intra-op threads {t['intra_op']}" for m, (n, t) in threads.items()
            )
            + "."
        )
    last = max((r.get("round", 0) for r in rows), default=0)
    server = [
        f"`{r['scenario']}`: {r['server']}"
        for r in rows
        if r["side"] == "inferd" and r.get("server") and r.get("round", 0) == last
    ]
    if server:
        lines.append("")
        lines.append(
            "inferd's own accounting (perf_analyzer's server-side statistics, last round): "
            + "; ".join(server)
        )
    return "\n".join(lines)


def render_floor(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The floor rows (issue 48): inferd against its own session behind floor_server.py."""
    floors = [
        s for s in SCENARIOS if s.floor and any(r["side"] == "floor" for r in rows if r["scenario"] == s.id)
    ]
    if not floors:
        return []
    lines = [
        "",
        "Against the floor (same rounds, issue 48): `benchmarks/floor_server.py --onnx-model`, uvloop + "
        "httptools serving the same session inferd's first instance runs (opened by the backend's own "
        "`open_instance_session`: threads, spinning, graph level), run on the loop, binary tensors both "
        "ways; perf_analyzer the same. CPU: the server's CPU per request (its process, perf_analyzer's not "
        "counted). Per round: inferd/floor infer/s of that round.",
        "",
        "| scenario | inferd infer/s | floor infer/s | inferd / floor | inferd CPU (us/req) | "
        "floor CPU (us/req) | per round |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for s in floors:
        x, y = aggregate(rows, "inferd", s.id), aggregate(rows, "floor", s.id)
        r = x["infer_per_s"] / y["infer_per_s"] if x["infer_per_s"] and y["infer_per_s"] else None
        by_round: dict[int, dict[str, float]] = {}
        for row in rows:
            if row["scenario"] == s.id and row["side"] in ("inferd", "floor") and row.get("infer_per_s"):
                by_round.setdefault(row.get("round", 0), {})[row["side"]] = row["infer_per_s"]
        per_round = ", ".join(
            f"{v['inferd'] / v['floor']:.2f}" for _, v in sorted(by_round.items()) if len(v) == 2
        )
        lines.append(
            f"| `{s.id}` | {_fmt(x['infer_per_s'], 1)} | {_fmt(y['infer_per_s'], 1)} | "
            f"{'n/a' if r is None else f'{r:.2f}x'} | {_fmt(x['cpu_us'])} | {_fmt(y['cpu_us'])} | "
            f"{per_round or 'n/a'} |"
        )
    return lines
