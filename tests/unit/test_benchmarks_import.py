"""Every benchmark script still imports against today's package: `make bench` runs them only there,
so a module moved in src/ broke one unseen (bare_onnxruntime.py's import of ``execution_providers``
failed every bare ONNX Runtime row of a `make bench` run before this test)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"

# imports each module (a script's work is behind its __main__ guard) in a process of its own: the
# folder's module names (results, servers, ...) must not meet the test run's
_PROBE = """
import importlib, json, sys, traceback
sys.path.insert(0, sys.argv[1])
failed = {}
for name in sys.argv[2:]:
    try:
        importlib.import_module(name)
    except Exception:
        failed[name] = traceback.format_exc(limit=3)
print(json.dumps(failed))
"""


def test_every_benchmark_module_imports() -> None:
    names = sorted(p.stem for p in BENCHMARKS.glob("*.py"))
    assert "bare_onnxruntime" in names and "ab" in names
    for name in names:
        text = (BENCHMARKS / f"{name}.py").read_text()
        if "argparse" in text:  # a script: importing it must not run it
            assert '__name__ == "__main__"' in text, f"benchmarks/{name}.py runs when imported"
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, str(BENCHMARKS), *names],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    failed = json.loads(out.stdout.strip().splitlines()[-1])
    assert not failed, "\n".join(f"benchmarks/{n}.py: {tb}" for n, tb in failed.items())
