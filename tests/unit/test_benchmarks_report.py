"""BENCHMARKS.md keeps the hand-run component measurements (benchmarks/measurements.md) that
ARCHITECTURE.md's decisions rest on: `make bench` rewrites the whole file from a run's data, so the
measurements are a Section of benchmarks/report.py that renders their file verbatim, last."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from repo_paths import ROOT

BENCHMARKS = ROOT / "benchmarks"

# in a process of its own, as tests/unit/test_benchmarks_import.py: the folder's module names
# (results, servers, ...) must not meet the test run's
_PROBE = """
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import report, run
given, missing = Path(sys.argv[2]), Path(sys.argv[3])
last = run.default_sections()[-1]
print(json.dumps({
    "given": report.MeasurementsSection(given).render(None),
    "missing": report.MeasurementsSection(missing).render(None),
    "last": type(last).__name__,
    "last_path": str(getattr(last, "path", "")),
    "repo": report.render_report(None, [report.MeasurementsSection()]),
    "beside_a_missing_one": report.render_report(
        None, [report.MeasurementsSection(missing), report.MeasurementsSection(given)]
    ),
}))
"""


def _probe(given: Path, missing: Path) -> dict[str, str]:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, str(BENCHMARKS), str(given), str(missing)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result: dict[str, str] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def test_the_measurements_section_renders_its_file_and_comes_last(tmp_path: Path) -> None:
    text = (
        "## Component measurements (hand-run)\n\n### A topic\n\n"
        "- 1,234 infer/s against 987 (`benchmarks/x.py --flag`, 2026-12-05, issue 43)\n\n"
        "| a | b |\n|---|---|\n| 1 | 2 |\n"
    )
    given = tmp_path / "measurements.md"
    given.write_text(text, encoding="utf-8")
    got = _probe(given, tmp_path / "absent.md")
    assert got["given"] == text  # verbatim: nothing added, nothing reflowed
    assert got["missing"] == ""  # a missing file leaves the section out, not the report
    assert got["beside_a_missing_one"] == text.strip() + "\n"
    # make bench's report ends with it, reading the repository's file
    assert got["last"] == "MeasurementsSection"
    assert Path(got["last_path"]) == BENCHMARKS / "measurements.md"
    measurements = (BENCHMARKS / "measurements.md").read_text(encoding="utf-8")
    assert got["repo"] == measurements.strip() + "\n"


def test_benchmarks_md_ends_with_the_measurements_file() -> None:
    """The BENCHMARKS.md in the repository is what the docs site shows: an edit to measurements.md
    goes into it too (by hand, or by the next `make bench`)."""
    measurements = (BENCHMARKS / "measurements.md").read_text(encoding="utf-8").strip()
    assert measurements.startswith("## Component measurements (hand-run)\n")
    report = (ROOT / "BENCHMARKS.md").read_text(encoding="utf-8")
    assert report.endswith("\n\n" + measurements + "\n")
