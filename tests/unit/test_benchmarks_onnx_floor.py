"""The densenet_onnx floor row (issue 48): onnx_bench renders inferd against the floor serving the
same session (medians, ratio, CPU per request, each round's ratio) and goals.py judges inferd's
throughput >= 0.95x the floor's; with no floor rows, no table and the goal "not measured"."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from repo_paths import ROOT

# in a process of its own, as test_benchmarks_import.py: benchmarks/' module names stay out of this run
_PROBE = """
import datetime as dt, json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import goals, onnx_bench
from results import RunData
rows = json.loads(sys.argv[2])
data = RunData(dt.datetime.now(), None, {}, {}, {}, Path("."), onnx=rows)
goal = next(g for g in goals.DEFAULT_GOALS if "floor server" in g.text)
result = goal.check(data)
print(json.dumps({"text": goal.text, "status": result.status, "detail": result.detail,
                  "table": "\\n".join(onnx_bench.render_floor(rows))}))
"""


def _probe(rows: list[dict[str, Any]]) -> dict[str, str]:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, str(ROOT / "benchmarks"), json.dumps(rows)],
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, str] = json.loads(out.stdout)
    return result


def _row(rnd: int, side: str, infer_per_s: float, cpu_us: float) -> dict[str, Any]:
    return {
        "round": rnd,
        "side": side,
        "scenario": "densenet_onnx_c1",
        "status": "stable",
        "infer_per_s": infer_per_s,
        "cpu_us": cpu_us,
    }


def test_inferd_below_the_floor_misses_the_goal() -> None:
    rows = [
        _row(1, "inferd", 8.0, 90_000),
        _row(1, "floor", 10.0, 88_000),
        _row(2, "inferd", 10.0, 92_000),
        _row(2, "floor", 10.0, 90_000),
    ]
    got = _probe(rows)
    assert (
        got["text"]
        == "`densenet_onnx_c1` served throughput >= 0.95x the same session behind the floor server"
    )
    assert got["status"] == "missed"
    assert got["detail"] == "9.0 vs floor 10.0 infer/s = 0.90x"
    assert "| `densenet_onnx_c1` | 9.0 | 10.0 | 0.90x | 91,000 | 89,000 | 0.80, 1.00 |" in got["table"]


def test_inferd_at_the_floor_meets_it() -> None:
    got = _probe([_row(1, "inferd", 9.6, 90_000), _row(1, "floor", 10.0, 90_000)])
    assert got["status"] == "met"


def test_without_floor_rows_no_table_and_not_measured() -> None:
    got = _probe([_row(1, "inferd", 9.6, 90_000)])
    assert got["status"] == "not measured"
    assert got["table"] == ""
