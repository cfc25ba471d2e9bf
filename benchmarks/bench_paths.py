"""Where the benchmarks find the repository's files: the one place that says so (stdlib only).

The reference (real Triton 2.51) is installed, started and measured by the scripts of
scripts/reference/, on the models of tests/fixtures/reference_models: nothing outside the repository.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: the six models both servers must load unmodified
REFERENCE_MODELS = ROOT / "tests" / "fixtures" / "reference_models"
REFERENCE_SCRIPTS = ROOT / "scripts" / "reference"
TRITON_SH = REFERENCE_SCRIPTS / "triton.sh"
BENCH_SH = REFERENCE_SCRIPTS / "bench.sh"
MEASURE_SH = REFERENCE_SCRIPTS / "measure.sh"
SETUP_SH = REFERENCE_SCRIPTS / "setup.sh"
COMMON_SH = REFERENCE_SCRIPTS / "common.sh"
#: the hand-run component measurements, rendered verbatim at the end of BENCHMARKS.md (report.py)
MEASUREMENTS_MD = ROOT / "benchmarks" / "measurements.md"
