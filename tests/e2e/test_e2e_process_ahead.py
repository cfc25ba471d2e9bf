"""A process instance's next request sent ahead while its current one runs (scheduling/ahead.py),
behind a real ``inferd serve`` with real worker processes: the worker runs it after the current one
and both answer; a worker that dies while it runs the first fails that one (UNAVAILABLE) and the
restarted worker runs the one ahead, which it never began; an unload while a request waits ahead answers both first; the statistics count
each request once, its queue and compute times included; an execute timeout turns it off."""

from __future__ import annotations

import json
import threading
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from conftest import InferdProcess

from waiting import wait_until

# INPUT0 < 0: the execute waits for the file GATE (the test opens it), then the worker exits when
# INPUT0 is -1, answers when -2; STARTED is written when such an execute begins
GATED = """
import os
import time

import triton_python_backend_utils as pb_utils

GATE = {gate!r}
STARTED = {started!r}


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
            if x[0] < 0:
                open(STARTED, "w").close()
                while not os.path.exists(GATE):
                    time.sleep(0.005)
                if x[0] == -1:
                    os._exit(3)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x)]))
        return out
"""
CONFIG = """
name: "gated"
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
parameters { key: "execution_mode" value: { string_value: "process" } }
"""
SENT_AHEAD = "sent ahead to a busy instance"


class _Gated:
    """The 'gated' model's repository, its gate, and requests sent from threads."""

    def __init__(self, tmp_path: Path, extra: str = "") -> None:
        self.gate = tmp_path / "gate"
        self.started = tmp_path / "started"
        self.repo = tmp_path / "models"
        (self.repo / "gated" / "1").mkdir(parents=True)
        (self.repo / "gated" / "config.pbtxt").write_text(CONFIG + extra)
        source = GATED.format(gate=str(self.gate), started=str(self.started))
        (self.repo / "gated" / "1" / "model.py").write_text(source)
        self.answers: dict[str, tuple[int, str]] = {}
        self.threads: list[threading.Thread] = []

    def send(self, server: InferdProcess, name: str, value: float) -> None:
        def one() -> None:
            r = server.infer(
                "gated",
                {
                    "id": name,
                    "inputs": [{"name": "INPUT0", "shape": [1], "datatype": "FP32", "data": [value]}],
                },
            )
            self.answers[name] = (r.status, r.body.decode())

        t = threading.Thread(target=one)
        t.start()
        self.threads.append(t)

    def wait_answers(self) -> None:
        for t in self.threads:
            t.join(60)


def _start(gated: _Gated, tmp_path: Path) -> InferdProcess:
    return InferdProcess(gated.repo, tmp_path / "inferd.log", ("--log-verbose=1",)).start()


def _stats(server: InferdProcess) -> dict[str, Any]:
    r = server.request("GET", "/v2/models/gated/stats")
    assert r.status == 200, r.body
    stats: dict[str, Any] = json.loads(r.body)["model_stats"][0]
    return stats


def _metrics(server: InferdProcess) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10) as r:
        text: str = r.read().decode()
    return text


def _first_waits_second_ahead(gated: _Gated, server: InferdProcess, first: float) -> None:
    gated.send(server, "a", first)
    wait_until(gated.started.exists, "the first execute to start", 30)
    gated.send(server, "b", 2.0)
    wait_until(lambda: SENT_AHEAD in server.log(), "the second request to be sent ahead", 30)


def test_both_answer_and_are_counted_once(tmp_path: Path) -> None:
    gated = _Gated(tmp_path)
    server = _start(gated, tmp_path)
    try:
        _first_waits_second_ahead(gated, server, -2.0)
        gated.gate.touch()
        gated.wait_answers()
        assert gated.answers["a"][0] == 200 and gated.answers["b"][0] == 200, gated.answers
        assert json.loads(gated.answers["b"][1])["outputs"][0]["data"] == [2.0]
        stats = _stats(server)
        inference = stats["inference_stats"]
        assert stats["inference_count"] == 2 and stats["execution_count"] == 2, stats
        for part in ("success", "queue", "compute_input", "compute_infer", "compute_output"):
            assert inference[part]["count"] == 2, (part, stats)
        assert inference["fail"]["count"] == 0
        # b waited behind a: its queue time, not its compute (the worker's own measure)
        assert inference["queue"]["ns"] > 0
    finally:
        code = server.stop()
    assert code == 0, server.log()[-3000:]


def test_a_worker_that_dies_fails_what_it_ran_and_runs_the_one_ahead_again(tmp_path: Path) -> None:
    gated = _Gated(tmp_path)
    server = _start(gated, tmp_path)
    try:
        _first_waits_second_ahead(gated, server, -1.0)
        gated.gate.touch()
        gated.wait_answers()
        status, body = gated.answers["a"]
        assert status == 503 and "exited unexpectedly (exit status 3)" in body, body
        # b was sent ahead to the worker that died, which never began it: the restarted worker ran it
        status, body = gated.answers["b"]
        assert status == 200 and json.loads(body)["outputs"][0]["data"] == [2.0], body
        stats = _stats(server)["inference_stats"]
        assert stats["fail"]["count"] == 1 and stats["success"]["count"] == 1, stats
        assert server.log().count("exited unexpectedly (exit status 3)") >= 1
    finally:
        code = server.stop()
    assert code == 0, server.log()[-3000:]


def test_an_unload_answers_the_request_sent_ahead_first(tmp_path: Path) -> None:
    gated = _Gated(tmp_path)
    server = InferdProcess(
        gated.repo,
        tmp_path / "inferd.log",
        ("--log-verbose=1", "--model-control-mode=explicit", "--load-model=*"),
    ).start()
    try:
        _first_waits_second_ahead(gated, server, -2.0)
        unloaded: list[int] = []
        unload = threading.Thread(
            target=lambda: unloaded.append(
                server.request("POST", "/v2/repository/models/gated/unload").status
            )
        )
        unload.start()
        gated.gate.touch()
        gated.wait_answers()
        unload.join(60)
        assert unloaded == [200]
        assert gated.answers["a"][0] == 200 and gated.answers["b"][0] == 200, gated.answers
    finally:
        code = server.stop()
    assert code == 0, server.log()[-3000:]


@pytest.mark.parametrize(
    "extra", ['parameters { key: "execute_timeout_secs" value: { string_value: "60" } }']
)
def test_nothing_is_sent_ahead_under_an_execute_timeout(tmp_path: Path, extra: str) -> None:
    gated = _Gated(tmp_path, extra)
    server = _start(gated, tmp_path)
    try:
        gated.send(server, "a", -2.0)
        wait_until(gated.started.exists, "the first execute to start", 30)
        gated.send(server, "b", 2.0)
        # b waits in the pool's queue (the pending count), not in the busy worker
        wait_until(
            lambda: 'nv_inference_pending_request_count{model="gated",version="1"} 1' in _metrics(server),
            "the second request to wait in the queue",
            30,
        )
        gated.gate.touch()
        gated.wait_answers()
        assert gated.answers["a"][0] == 200 and gated.answers["b"][0] == 200, gated.answers
    finally:
        code = server.stop()
    assert SENT_AHEAD not in server.log()
    assert code == 0, server.log()[-3000:]
