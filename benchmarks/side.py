"""What the side benches (``*_bench.py`` modules that ``make bench`` runs after its rounds, and that
also run alone) share: the median of a figure over rounds, and the end of a run alone (a results
folder of its own, the load average around the measurement, ``<name>.md`` and ``summary.json``)."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench_paths import ROOT
from results import loadavg


def median(runs: list[dict[str, float]], key: str = "infer_per_s") -> float | None:
    """The median of ``key`` over the rounds that measured it (None: none did)."""
    vals = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def run_alone(
    name: str,
    output: Path | None,
    measure: Callable[[Path], Any],
    render: Callable[[Any, str, str], str],
) -> int:
    """``measure(folder)`` in ``output`` (default ``benchmarks/results/<name>-<UTC>``), then
    ``render(results, load at start, load at end)`` written to ``<name>.md`` and printed."""
    out = output or ROOT / "benchmarks" / "results" / time.strftime(f"{name}-%Y%m%d-%H%M%S", time.gmtime())
    out.mkdir(parents=True, exist_ok=True)
    load_start = loadavg()
    results = measure(out)
    text = render(results, load_start, loadavg())
    (out / f"{name}.md").write_text(text)
    (out / "summary.json").write_text(json.dumps(results, indent=1))
    print(text)
    print(f"results: {out}")
    return 0
