"""The rate limiter and preserve_ordering served, against the real Triton 2.51's recorded answers
(reference_observed_rate_limit.json, tests/fixtures/make_reference_rate_limit.py).

Witnesses: rl_a and rl_b ask for one resource R between them; each answers its execute's wall-clock
start and end, and writes a ``started_file`` when it begins, so a test sends the second request while
the first one executes (no sleeping for correctness). rl_ordered (preserve_ordering) and rl_unordered
have two instances: a short request sent while a long one executes finishes first.
"""

from __future__ import annotations

import contextlib
import json
import queue
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from conftest import InferdProcess

from repo_paths import FIXTURES, ROOT
from waiting import wait_for_file

DOC = json.loads((FIXTURES / "reference_observed_rate_limit.json").read_text())
SERVED = ("rl_a", "rl_b", "rl_ordered", "rl_unordered")
WAIT_S = 30


@pytest.fixture(scope="module")
def model_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This module's servers (``start_server``) serve tests/fixtures/rate_limit_models."""
    dest = tmp_path_factory.mktemp("rate_limit") / "models"
    shutil.copytree(FIXTURES / "rate_limit_models", dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def _explicit(*models: str) -> list[str]:
    return ["--model-control-mode=explicit", *(f"--load-model={m}" for m in models)]


def _infer(
    protocol: str, url: str, model: str, ms: int, shape: list[int], params: dict[str, Any]
) -> list[float]:
    """One request on a client of its own (tritonclient.http's must stay in the thread that made it):
    the execute's wall-clock start and end."""
    if protocol == "http":
        h = httpclient.InferenceServerClient(url)
        hi = httpclient.InferInput("SLEEP_MS", shape, "INT32")
        hi.set_data_from_numpy(np.full(shape, ms, dtype=np.int32))
        out = h.infer(model, [hi], parameters=params).as_numpy("START_END")
    else:
        g = grpcclient.InferenceServerClient(url)
        gi = grpcclient.InferInput("SLEEP_MS", shape, "INT32")
        gi.set_data_from_numpy(np.full(shape, ms, dtype=np.int32))
        out = g.infer(model, [gi], parameters=params).as_numpy("START_END")
    assert out is not None
    return [float(x) for x in out.flatten()]


def _urls(server: Any) -> dict[str, str]:
    return {"http": server.url, "grpc": f"127.0.0.1:{server.grpc_port}"}


def _first_then_second(
    protocol: str, server: Any, first: str, second: str, shape: list[int], tmp: Path
) -> tuple[list[float], list[float], float]:
    """``first`` (1500 ms) in a thread; once it executes, ``second`` (20 ms). Their execute spans
    (wall clock, from the model) and when the second answer reached its client (same clock)."""
    url = _urls(server)[protocol]
    started = tmp / f"{first}-{protocol}.started"
    spans: dict[str, list[float]] = {}

    def call(name: str, model: str, ms: int, params: dict[str, Any]) -> Callable[[], None]:
        def run() -> None:
            spans[name] = _infer(protocol, url, model, ms, shape, params)

        return run

    t = threading.Thread(target=call("first", first, 1500, {"started_file": str(started)}))
    t.start()
    wait_for_file(started, WAIT_S, interval=0.01)
    call("second", second, 20, {})()
    second_arrived = time.time()
    t.join(WAIT_S)
    assert set(spans) == {"first", "second"}, "a request failed"
    return spans["first"], spans["second"], second_arrived


def _overlap(a: list[float], b: list[float]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


# -- the rate limiter -------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_two_models_sharing_one_resource_never_execute_together(
    mode: str, start_server: Any, tmp_path: Path
) -> None:
    server = start_server(
        "--rate-limit=execution_count",
        f"--backend-config=python,execution-mode={mode}",
        *_explicit("rl_a", "rl_b"),
    )
    assert DOC["observed"]["rl_a_rl_b_overlap_execution_count"] is False
    for protocol in ("http", "grpc"):
        a, b, _ = _first_then_second(protocol, server, "rl_a", "rl_b", [1], tmp_path)
        assert not _overlap(a, b), (protocol, a, b)
        assert b[0] >= a[1]  # rl_b waited for R


def test_with_the_rate_limiter_off_they_overlap(start_server: Any, tmp_path: Path) -> None:
    server = start_server("--rate-limit=off", *_explicit("rl_a", "rl_b"))
    assert DOC["observed"]["rl_a_rl_b_overlap_off"] is True
    for protocol in ("http", "grpc"):
        a, b, b_arrived = _first_then_second(protocol, server, "rl_a", "rl_b", [1], tmp_path)
        assert _overlap(a, b) and b_arrived < a[1], (protocol, a, b)


@pytest.mark.parametrize("case", range(len(DOC["loads"])), ids=lambda i: " ".join(DOC["loads"][i]["flags"]))
def test_loads_answer_as_the_reference(case: int, start_server: Any) -> None:
    """Each model loaded in turn through the repository API: refusals with the reference's status and
    text; then the repository index's states and reasons."""
    scenario = DOC["loads"][case]
    server = start_server(*scenario["flags"], "--model-control-mode=explicit")
    for step in scenario["answers"]:
        r = server.request("POST", f"/v2/repository/models/{step['model']}/load")
        assert (r.status, r.body.decode()) == (step["status"], step["body"]), step["model"]
    index = server.request("POST", "/v2/repository/index").json()
    assert index == scenario["index"]


@pytest.mark.parametrize("flag", sorted(DOC["refused_flags"]))
def test_refused_flags_stop_the_start_with_the_reference_text(flag: str, tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "inferd", "serve", "--model-repository", str(tmp_path), flag]
    p = None
    with contextlib.suppress(subprocess.TimeoutExpired):
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert p is not None and p.returncode != 0
    assert DOC["refused_flags"][flag] in p.stderr


# -- preserve_ordering ------------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_preserve_ordering_answers_in_request_order_across_instances(
    protocol: str, start_server: Any, tmp_path: Path
) -> None:
    server = start_server(*_explicit("rl_ordered", "rl_unordered"))
    observed = DOC["observed"]
    assert observed[f"rl_ordered_order_{protocol}_off"] == [0, 1]
    assert observed[f"rl_unordered_order_{protocol}_off"] == [1, 0]
    first, second, arrived = _first_then_second(
        protocol, server, "rl_ordered", "rl_ordered", [1, 1], tmp_path
    )
    assert second[1] < first[1]  # the second request finished executing first...
    assert arrived >= first[1]  # ...and still answered after the first one
    first, second, arrived = _first_then_second(
        protocol, server, "rl_unordered", "rl_unordered", [1, 1], tmp_path
    )
    assert second[1] < first[1] and arrived < first[1]  # without the option: at once


def test_preserve_ordering_with_the_rate_limiter(start_server: Any, tmp_path: Path) -> None:
    """Both at once, concurrent unary gRPC calls whose executes differ, each sent once the one before
    it executes (so the server's arrival order is known): no answer reaches its client before every
    earlier request finished executing. Answers that come together may reach the client's callbacks
    in any order, so the witness is the clock, not the callbacks' order."""
    server = start_server("--rate-limit=execution_count", *_explicit(*SERVED))
    arrived: queue.Queue[tuple[int, float, list[float]]] = queue.Queue()
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")

    def done(result: Any, error: Any) -> None:
        assert error is None, error
        span = [float(x) for x in result.as_numpy("START_END").flatten()]
        arrived.put((int(result.get_response().id), time.time(), span))

    ms = [600, 5, 150, 5, 5, 100, 5, 30]
    for n, sleep in enumerate(ms):
        x = grpcclient.InferInput("SLEEP_MS", [1, 1], "INT32")
        x.set_data_from_numpy(np.full([1, 1], sleep, dtype=np.int32))
        started = tmp_path / f"{n}.started"
        client.async_infer(
            "rl_ordered", [x], callback=done, request_id=str(n), parameters={"started_file": str(started)}
        )
        wait_for_file(started, WAIT_S, interval=0.01)
    got = sorted(arrived.get(timeout=WAIT_S) for _ in ms)
    assert [n for n, _, _ in got] == list(range(len(ms)))
    ends = [span[1] for _, _, span in got]
    assert max(ends[1:]) < ends[0]  # the others finished on the second instance while the first ran
    for n, at, _ in got:
        assert at >= max(ends[: n + 1]), (n, at, ends)


def test_warmup_waits_for_the_resources(tmp_path: Path) -> None:
    """As the reference, a model's initialize and warmup go through the rate limiter: a model that
    warms up with resource R loads only once the execute holding R (rl_a's, 1.5 s) ended."""
    repo = tmp_path / "models"
    src = FIXTURES / "rate_limit_models"
    for name in ("rl_a", "rl_b"):
        shutil.copytree(src / name, repo / name, symlinks=False, ignore=shutil.ignore_patterns("__pycache__"))
    warm = repo / "rl_b" / "config.pbtxt"
    warm.write_text(
        warm.read_text() + 'model_warmup [ { name: "w" batch_size: 1 inputs { key: "SLEEP_MS" value: '
        "{ data_type: TYPE_INT32 dims: [ 1 ] zero_data: true } } } ]\n"
    )
    server = InferdProcess(
        repo, tmp_path / "inferd.log", ("--rate-limit=execution_count", *_explicit("rl_a"))
    ).start()
    try:
        started = tmp_path / "a.started"
        spans: list[list[float]] = []
        t = threading.Thread(
            target=lambda: spans.append(
                _infer("http", server.url, "rl_a", 1500, [1], {"started_file": str(started)})
            )
        )
        t.start()
        wait_for_file(started, WAIT_S, interval=0.01)
        r = server.request("POST", "/v2/repository/models/rl_b/load")
        loaded = time.time()
        t.join(WAIT_S)
        assert r.status == 200, r.body
        assert spans and loaded >= spans[0][1]  # rl_b's warmup waited for rl_a's execute to end
    finally:
        server.kill()
