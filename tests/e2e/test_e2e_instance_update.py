"""Loads that change a model's ``instance_group``, replayed on inferd as the real Triton 2.51 answered
them: tests/fixtures/reference_observed_instance_update.json, recorded with
tests/fixtures/make_reference_instance_update.py (whose ``run_step`` runs each step here too).

Each step's record holds the instances initialized (by name) and finalized (how many: which ones the
reference removes depends on the order its instances were created in, in parallel), whether the load
answered before the requests in flight did, and the answers. The reference finalizes a replaced
model's instances after its load answered (the recording waited for them); inferd answers once they
are done, so the events are complete when the load returns (a sequence's removed instance finalizes
when its sequences end: the step waits for that line). The Python models run in threads, then in
worker processes (new instances are workers too).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import InferdProcess

from repo_paths import FIXTURES, load_script

RECORDER = FIXTURES / "make_reference_instance_update.py"
OBSERVED: list[dict[str, Any]] = json.loads(
    (FIXTURES / "reference_observed_instance_update.json").read_text()
)

pytestmark = pytest.mark.timeout(240)


def _recorder() -> Any:
    return load_script(RECORDER, "make_reference_instance_update")


@pytest.fixture(params=["thread", "process"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[InferdProcess]:
    repo = tmp_path / "models"
    shutil.copytree(FIXTURES / "instance_update_models", repo, ignore=shutil.ignore_patterns("__pycache__"))
    mode = f"--backend-config=python,execution-mode={request.param}"
    proc = InferdProcess(repo, tmp_path / "inferd.log", ("--model-control-mode=explicit", mode)).start()
    try:
        yield proc
    finally:
        proc.stop()


def test_the_recording_covers_the_issue() -> None:
    by_id = {s["id"]: s["observed"] for s in OBSERVED}
    assert by_id["three_to_four"]["initialized"] == ["counted_0_3"]  # 3 -> 4: one initialize, not four
    assert by_id["unchanged"] == {"load": "ok", "initialized": [], "finalized": 0}
    assert by_id["add_while_one_is_busy"]["load_waited"] is False


def test_instance_updates_match_the_reference(server: InferdProcess) -> None:
    recorder = _recorder()
    state: dict[str, Any] = {}
    url = f"127.0.0.1:{server.port}"
    for step in OBSERVED:
        plan = {k: v for k, v in step.items() if k != "observed"}
        got = recorder.run_step(plan, url, Path(server.repository), state, settle=lambda: None)
        assert got == step["observed"], step["id"]


# -- under the rate limiter: reference_observed_instance_update_rate_limit.json -------------------
# (the same recorder, RATE_LIMITED: loads that also change what the instances ask the limiter for,
# and the resource counts each step logged at --log-verbose 1)
RATE_LIMITED: list[dict[str, Any]] = json.loads(
    (FIXTURES / "reference_observed_instance_update_rate_limit.json").read_text()
)


def test_the_rate_limited_recording_covers_the_issue() -> None:
    steps = {s["id"]: s["observed"] for run in RATE_LIMITED for s in run["steps"]}
    assert steps["three_to_four"]["initialized"] == ["counted_0_3"]  # in place under the limiter too
    # Triton's qa test_instance_resource_decrease looks for this line: the count drops from 4 to 3
    assert any("Resource: R1\\t Count: 3" in m for m in steps["asks_for_r1_3"]["resource_maps"])
    assert steps["explicit_above_the_count"]["load"].startswith("load failed for model 'counted'")
    assert steps["explicit_served_on"]["answers"] == [["ok", None]]


@pytest.mark.parametrize("mode", ["thread", "process"])
@pytest.mark.parametrize("run", RATE_LIMITED, ids=lambda run: " ".join(run["flags"]))
def test_instance_updates_under_the_rate_limiter_match_the_reference(
    run: dict[str, Any], mode: str, tmp_path: Path
) -> None:
    repo = tmp_path / "models"
    shutil.copytree(FIXTURES / "instance_update_models", repo, ignore=shutil.ignore_patterns("__pycache__"))
    log = tmp_path / "inferd.log"
    args = (
        "--model-control-mode=explicit",
        *run["flags"],
        "--log-verbose=1",
        f"--backend-config=python,execution-mode={mode}",
    )
    server = InferdProcess(repo, log, args).start()
    try:
        recorder = _recorder()
        state: dict[str, Any] = {}
        for step in run["steps"]:
            plan = {k: v for k, v in step.items() if k != "observed"}
            got = recorder.run_step(
                plan, f"127.0.0.1:{server.port}", repo, state, settle=lambda: None, log=log
            )
            assert got == step["observed"], step["id"]
    finally:
        server.stop()
