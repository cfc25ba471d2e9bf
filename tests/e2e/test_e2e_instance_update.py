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
