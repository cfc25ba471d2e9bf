"""Start and stop: readiness flags, exit-on-error, and draining in-flight requests on SIGTERM.

Each test starts servers of its own (the shared one must keep serving the other tests).
"""

from __future__ import annotations

import http.client
import json
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import REFERENCE_MODELS, InferdProcess

from waiting import wait_until

pytestmark = pytest.mark.timeout(90)

_PORTS = ("--http-port", "0", "--grpc-port", "0", "--metrics-port", "0")


def _slow_request(port: int, ms: int, started: Path, result: dict[str, Any]) -> None:
    body = json.dumps(
        {
            "parameters": {"started_file": str(started)},
            "inputs": [{"name": "SLEEP_MS", "shape": [1], "datatype": "INT32", "data": [ms]}],
        }
    )
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("POST", "/v2/models/parallel_sleep/infer", body=body)
        r = conn.getresponse()
        result["status"], result["body"] = r.status, r.read()
    except Exception as e:  # reported by the test
        result["error"] = e
    finally:
        conn.close()


def test_sigterm_drains_in_flight_requests(start_server: Any, tmp_path: Path) -> None:
    srv: InferdProcess = start_server()
    results: list[dict[str, Any]] = [{}, {}]
    started = [tmp_path / f"started-{i}" for i in range(2)]
    threads = [
        threading.Thread(target=_slow_request, args=(srv.port, 1000, started[i], results[i]))
        for i in range(2)
    ]
    for t in threads:
        t.start()
    # both executing (the model has two instances)
    wait_until(lambda: all(p.exists() for p in started), "both slow requests to start", 20, interval=0.01)
    assert srv.proc is not None
    t_term = time.monotonic()
    srv.proc.send_signal(signal.SIGTERM)
    for t in threads:
        t.join(30)
    for r in results:
        assert "error" not in r, r
        assert r["status"] == 200, r
        assert b"parallel_sleep_0_" in r["body"]
    assert srv.proc.wait(15) == 0, srv.log()[-3000:]
    assert time.monotonic() - t_term < 10
    assert "Waiting for in-flight requests to complete" in srv.log()


def test_sigint_exits_zero(start_server: Any) -> None:
    srv: InferdProcess = start_server()
    assert srv.proc is not None
    srv.proc.send_signal(signal.SIGINT)
    assert srv.proc.wait(15) == 0


def test_readiness(start_server: Any, tmp_path: Path) -> None:
    # the shared repository has a model that fails on purpose: not ready, unless readiness is lax
    lax: InferdProcess = start_server("--strict-readiness=false")
    assert lax.request("GET", "/v2/health/ready").status == 200
    assert lax.request("GET", "/v2/models/init_fails/ready").status == 400
    assert lax.stop() == 0
    # a repository where everything loads is ready
    repo = tmp_path / "reference_only"
    shutil.copytree(REFERENCE_MODELS, repo, ignore=shutil.ignore_patterns("__pycache__"))
    srv = InferdProcess(repo, tmp_path / "ref.log").start()
    try:
        r = srv.request("GET", "/v2/health/ready")
        assert (r.status, r.content_type, r.body) == (200, "text/plain", b"")
        index = srv.request("POST", "/v2/repository/index").json()
        assert all(e["state"] == "READY" for e in index) and len(index) == 6
    finally:
        assert srv.stop() == 0


def test_exit_on_error_refuses_to_start(model_repository: Path) -> None:
    """Without --exit-on-error=false a model that fails to load stops the server (non-zero exit)."""
    proc = subprocess.run(
        [sys.executable, "-m", "inferd", "serve", "--model-repository", str(model_repository), *_PORTS],
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode != 0
    err = proc.stderr.decode()
    assert "failed to load all models" in err
    assert "init exploded on purpose" in err
