"""Iterative sequences (``sequence_batching { iterative_sequence: true }``) and request rescheduling,
replayed on inferd as the real Triton 2.51 answered: tests/fixtures/reference_observed_iterative.json,
recorded with tests/fixtures/make_reference_iterative.py (whose ``run_step`` asks inferd here).

The steps run in order on one server (the models count their correlation IDs from 1), once with the
Python models in threads and once in worker processes (the release flag crosses the process). Where
the reference never answered (it logged "Failed to release request: <text>"), inferd answers the
client with that text.
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

RECORDER = FIXTURES / "make_reference_iterative.py"
OBSERVED: list[dict[str, Any]] = json.loads((FIXTURES / "reference_observed_iterative.json").read_text())

pytestmark = pytest.mark.timeout(240)


def _recorder() -> Any:
    return load_script(RECORDER, "make_reference_iterative")


@pytest.fixture(params=["thread", "process"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[InferdProcess]:
    repo = tmp_path / "models"
    shutil.copytree(FIXTURES / "iterative_models", repo, ignore=shutil.ignore_patterns("__pycache__"))
    mode = f"--backend-config=python,execution-mode={request.param}"
    proc = InferdProcess(repo, tmp_path / "inferd.log", (mode,)).start()
    try:
        yield proc
    finally:
        proc.stop()


def test_the_recording_covers_the_issue() -> None:
    by_id = {s["id"]: s for s in OBSERVED}
    first = by_id["no_id_three_executes"]["observed"]["body"]["outputs"]
    assert first[0]["data"] == [1, 1, 1] and first[1]["data"] == [1, 0, 0]  # ID 1; START, then 0, 0
    assert by_id["not_iterative_none"]["observed"] == "no answer"


def _expected(step: dict[str, Any], repo: Path) -> Any:
    """The reference's answer; where it gave none, the answer inferd gives: the text it logged."""
    # a model's file is named from the repository's root in what clients read (no server path)
    observed = json.loads(json.dumps(step["observed"]).replace("{REPO}/", "").replace("{REPO}", str(repo)))
    if observed == "no answer":
        (text,) = step["logged"]
        return {"status": 400, "body": {"error": text}}
    if isinstance(observed, list) and observed and observed[-1] == "no final response":
        (text,) = step["logged"]
        return [*observed[:-1], {"error": text}]
    return observed


def test_iterative_sequences_match_the_reference(server: InferdProcess) -> None:
    recorder = _recorder()
    ports = (server.port, server.grpc_port, server.metrics_port)
    for step in OBSERVED:
        got = recorder.run_step(step, *ports)
        assert got == _expected(step, Path(server.repository)), step["id"]
