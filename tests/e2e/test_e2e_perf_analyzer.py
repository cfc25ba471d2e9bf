"""NVIDIA perf_analyzer (2.41.1, HTTP) against inferd: it must run to the end, measure throughput,
and read from inferd's statistics extension the counts its own client counted. A check that it
works, not a benchmark (make bench measures): nothing here depends on the machine's speed.

The wrapper comes from $PERF_ANALYZER, else .tools/perf_analyzer, which scripts/get_perf_analyzer.sh
installs when it is missing (PyPI and apt needed the first time).
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import REPO_ROOT, InferdProcess, timeout_paused

pytestmark = pytest.mark.timeout(300)

# windows of at least 200 requests; stable when the 3 windows' figures are within 100,000 % of each
# other (max / min under 1,001: always, however busy the machine), so that perf_analyzer never gives
# up on an unstable measurement and its time does not depend on the machine's speed
COMMON: tuple[str, ...] = ("--concurrency-range", "2", "--measurement-mode", "count_windows")
COMMON += ("--measurement-request-count", "200", "-s", "100000", "-r", "3")
#: a run takes a few seconds (three windows of about a second); the bound is for a hang
RUN_TIMEOUT_S = 100


@pytest.fixture(scope="session")
def perf_analyzer() -> Path:
    env = os.environ.get("PERF_ANALYZER")
    path = Path(env) if env else REPO_ROOT / ".tools" / "perf_analyzer"
    if not path.exists():  # installed once (a clean clone): bounded here, not by the first test's timeout
        script = REPO_ROOT / "scripts" / "get_perf_analyzer.sh"
        with timeout_paused():
            out = subprocess.run(
                ["bash", str(script), str(path.parent)],
                capture_output=True,
                text=True,
                timeout=600,
                check=False,
            )
        assert out.returncode == 0, out.stderr
        path = Path(out.stdout.strip().splitlines()[-1])
    assert os.access(path, os.X_OK), path
    return path


def run_perf_analyzer(perf_analyzer: Path, url: str, protocol: str, *args: str) -> str:
    """One perf_analyzer run (``COMMON`` and ``args``) against ``url``; its report. It must end well,
    with a throughput, and the server side of its report (read from inferd's statistics extension
    before and after each window) must count what its client counted, but for the requests in
    flight at a window's edges (concurrency 2: a few of at least 200)."""
    cmd = [str(perf_analyzer), "-u", url, "-i", protocol, *COMMON, *args]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False)
    text = out.stdout + out.stderr
    assert out.returncode == 0, text
    m = re.search(r"Concurrency: 2, throughput: ([0-9.]+) infer/sec", text)
    assert m is not None and float(m.group(1)) > 0, text
    client = re.search(r"Client: \n\s+Request count: (\d+)", text)
    served = re.search(r"Server: \n\s+Inference count: (\d+)", text)
    assert client is not None and served is not None, text
    assert int(client.group(1)) >= 200, text
    assert abs(int(served.group(1)) - int(client.group(1))) <= 0.1 * int(client.group(1)), text
    return text


def test_perf_analyzer_add_sub(perf_analyzer: Path, server: InferdProcess) -> None:
    run_perf_analyzer(perf_analyzer, server.url, "http", "-m", "add_sub")


def test_perf_analyzer_identity_fp32(perf_analyzer: Path, server: InferdProcess) -> None:
    run_perf_analyzer(perf_analyzer, server.url, "http", "-m", "identity_fp32", "--shape", "INPUT0:1024")


def test_perf_analyzer_system_shared_memory_over_workers(
    perf_analyzer: Path, start_server: Callable[..., InferdProcess]
) -> None:
    """perf_analyzer registers its regions on one connection and infers on others: with
    ``--workers 2`` the regions must reach both processes, and the server-side counts it reads from
    the statistics extension are the whole server's (about its own request count)."""
    server = start_server("--workers", "2")
    assert server.wait_starting(lambda: "all 2 workers serving" in server.log()), server.log()[-3000:]
    run_perf_analyzer(perf_analyzer, server.url, "http", "-m", "add_sub", "--shared-memory", "system")
