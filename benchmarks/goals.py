"""The performance goals the issues set, judged on a run's medians, and their section."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import fil_bench  # benchmarks/fil_bench.py: the fil backend's rows
import onnx_bench  # benchmarks/onnx_bench.py: the ONNX Runtime rows
import shm_bench  # benchmarks/shm_bench.py: the system shared-memory rows
from report import Section, fmt, fmt_ratio, md_table
from results import RunData, ratio


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


def cpu_goal(sid: str, max_ratio: float, baseline: str = "reference", subject: str = "inferd") -> Goal:
    """subject's server CPU per request over baseline's in the same row of the same run: the
    reference's, or the floor's (benchmarks/floor_server.py); both issue 48's."""

    def check(data: RunData) -> GoalResult:
        x, y = data.bench(subject, sid).cpu_us, data.bench(baseline, sid).cpu_us
        r = ratio(x, y)
        detail = f"CPU per request {fmt(x)} vs the {baseline}'s {fmt(y)} us = {fmt_ratio(r)}"
        if r is None:
            return GoalResult("not measured", detail)
        return GoalResult("met" if r <= max_ratio else "missed", detail)

    return Goal(f"`{sid}` server CPU per request <= {max_ratio:g}x the {baseline}'s", check)


def busy_goal(sid: str, min_busy: float, subject: str = "inferd") -> Goal:
    """How much of the row's wall time subject's one instance computed (the executes' compute_infer
    over the window, cpu.ExecuteMeter), per round; the reference's beside it (issue 48)."""

    def check(data: RunData) -> GoalResult:
        mine, ref = data.bench(subject, sid), data.bench("reference", sid)
        rounds = " ".join(fmt(b, 2) for b in mine.busy_per_round)
        detail = (
            f"busy {fmt(mine.busy, 2)} (rounds {rounds}), mean batch {fmt(mine.mean_batch, 1)}; "
            f"the reference's busy {fmt(ref.busy, 2)}, mean batch {fmt(ref.mean_batch, 1)}"
        )
        if mine.busy is None:
            return GoalResult("not measured", detail)
        return GoalResult("met" if mine.busy >= min_busy else "missed", detail)

    return Goal(f"`{sid}`: the instance computes >= {min_busy:g} of the wall time", check)


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
    """``against``: "bare" (inferd's own sessions, bare), "bare-default" (a default InferenceSession),
    "best" (the fastest bare layout measured) or "floor" (inferd's session behind floor_server.py)."""

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
        "floor": "the same session behind the floor server",
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


def _fil_figures(data: RunData) -> dict[str, Any]:
    """fil_bench.py's goal figures, from the summary.json it wrote into the results folder ({}: none)."""
    path = data.results_dir / "fil" / "summary.json"
    try:
        return dict(fil_bench.goal_figures(json.loads(path.read_text())))
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def fil_goal(text: str, keys: Sequence[str], ok: Callable[[float], bool], unit: str = "") -> Goal:
    """One of issue 30's goals, met when ``ok`` holds for every figure ``keys`` name (fil_bench.goal_figures)."""

    def check(data: RunData) -> GoalResult:
        fig = _fil_figures(data)
        values = {k: fig.get(k) for k in keys}
        detail = "; ".join(
            f"{k}: " + ("n/a" if v is None else (f"{v:.2f}x" if unit == "x" else f"{fmt(v, 2)}{unit}"))
            for k, v in values.items()
        )
        if any(v is None for v in values.values()):
            return GoalResult("not measured", detail or "fil_bench.py did not run")
        return GoalResult("met" if all(ok(v) for v in values.values() if v is not None) else "missed", detail)

    return Goal(text, check)


_FIL_MODELS = tuple(fil_bench.MODELS)
FIL_GOALS = [
    fil_goal(
        "tree models at c1 (1 row a request) served over binary HTTP >= 0.9x native predict, same threads",
        [f"{m}_c1_ratio" for m in _FIL_MODELS],
        lambda v: v >= fil_bench.GOAL_RATIO,
        "x",
    ),
    fil_goal(
        "tree models at c4 (1,024 rows a request) served over binary HTTP >= 0.9x native predict, same threads",
        [f"{m}_c4_ratio" for m in _FIL_MODELS],
        lambda v: v >= fil_bench.GOAL_RATIO,
        "x",
    ),
    fil_goal(
        "tree models at c1 add <= 100 us to native predict's p50 (same threads)",
        [f"{m}_c1_added_us" for m in _FIL_MODELS],
        lambda v: v <= fil_bench.GOAL_ADDED_US,
        " us",
    ),
    fil_goal(
        "a 1,000-tree model READY <= 2 s (its server's first tree model)",
        ["ready_first_s"],
        lambda v: v <= fil_bench.GOAL_READY_S,
        " s",
    ),
]

DEFAULT_GOALS = [
    throughput_goal("add_sub_http_c8", 2.0, p99_not_worse=True),
    cpu_goal("add_sub_http_c8", 1.3, "floor"),
    *(cpu_goal(sid, 0.20) for sid in ("add_sub_http_c8", "add_sub_grpc_c8", "ensemble_add_sub_http_c8")),
    throughput_goal("identity_fp32_1MiB_http_c4", 1.5),
    busy_goal("batched_sleep_http_c32", 0.9),
    # issue 48's 2.0x; the reference's batching rule caps a never-idle instance near 1.85x at c32
    # (two back-to-back batches hold at most the 32 requests in flight: benchmarks/measurements.md)
    throughput_goal("batched_sleep_http_c32", 2.0),
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
    onnx_throughput_goal("densenet_onnx_c1", 0.95, "floor"),
    onnx_throughput_goal("densenet_onnx_c4", 0.95, "best"),
    onnx_added_p50_goal("tiny_mlp_c1", 100),
    *FIL_GOALS,
]


class GoalsSection(Section):
    def __init__(self, goals: Sequence[Goal]) -> None:
        self.goals = list(goals)

    def results(self, data: RunData) -> list[tuple[Goal, GoalResult]]:
        return [(g, g.check(data)) for g in self.goals]

    def render(self, data: RunData) -> str:
        mark = {"met": "met", "missed": "**missed**", "not measured": "not measured"}
        rows = [[g.text, mark[r.status], r.detail] for g, r in self.results(data)]
        return "## Goals\n\n" + md_table(
            ["goal", "status", "inferd vs reference (or bare, the floor, or itself)"], rows, "lll"
        )
