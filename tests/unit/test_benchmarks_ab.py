"""benchmarks/ab.py's --scenarios matches whole scenario ids: `add_sub_http_c8` had also selected
`ensemble_add_sub_http_c8` (an unanchored search), so a comparison of one row measured two."""

from __future__ import annotations

import json
import subprocess
import sys

from repo_paths import ROOT

# in a process of its own: the benchmarks folder's module names (results, servers, ...) must not
# meet the test run's
_PROBE = """
import json, sys
sys.path.insert(0, sys.argv[1])
import ab
print(json.dumps({r: ab.select(r) for r in sys.argv[2:]}))
"""


def test_scenarios_match_whole_ids() -> None:
    regexes = ["add_sub_http_c8", "add_sub_(http|grpc)_c8", "add_sub_http_c.*", "ensemble_.*", "c8"]
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, str(ROOT / "benchmarks"), *regexes],
        capture_output=True,
        text=True,
        check=True,
    )
    got = json.loads(out.stdout)
    assert got["add_sub_http_c8"] == ["add_sub_http_c8"]
    assert got["add_sub_(http|grpc)_c8"] == ["add_sub_http_c8", "add_sub_grpc_c8"]
    assert "add_sub_http_c1" in got["add_sub_http_c.*"]
    assert all(s.startswith("add_sub_http_c") for s in got["add_sub_http_c.*"])
    assert got["ensemble_.*"] == ["ensemble_add_sub_http_c8"]
    assert got["c8"] == []
