"""The real Triton 2.51's answers to sequence requests, asked of inferd in the same order:
tests/fixtures/reference_observed_sequence.json (recorded with tests/fixtures/make_reference_sequence.py
against the reference serving tests/fixtures/sequence_models).

The steps run in order on one server: a sequence's requests follow each other, bad requests come
between them (the sequence goes on), and one step waits out a model's idle timeout (the recording
slept; here the wait is on the server's state, ``_wait_released``).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO_ROOT, InferdProcess

OBSERVED_FILE = REPO_ROOT / "tests" / "fixtures" / "reference_observed_sequence.json"
MODELS = REPO_ROOT / "tests" / "fixtures" / "sequence_models"
STEPS: list[dict[str, Any]] = json.loads(OBSERVED_FILE.read_text())

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InferdProcess]:
    repo = tmp_path_factory.mktemp("sequence_reference") / "models"
    shutil.copytree(MODELS, repo, ignore=shutil.ignore_patterns("__pycache__"))
    proc = InferdProcess(repo, Path(str(repo.parent)) / "inferd.log").start()
    try:
        yield proc
    finally:
        proc.stop()


def test_the_recording_covers_the_bad_input() -> None:
    errors = {s["response"]["error"] for s in STEPS if "response" in s and s["status"] != 200}
    assert any("non-zero or non-empty correlation ID" in e for e in errors)
    assert any("must specify the START flag" in e for e in errors)
    assert any("batch-size 1" in e for e in errors)


def _wait_released(server: InferdProcess, previous: dict[str, Any]) -> None:
    """Where the recording slept to wait out the idle timeout of the model its previous step asked
    (one slot), wait for the state instead: a sequence of one request (START and END, an ID the
    recording does not use) waits in the backlog until the idle timer releases the slot."""
    body = dict(
        previous["body"], parameters={"sequence_id": 9999, "sequence_start": True, "sequence_end": True}
    )
    r = server.infer(previous["model"], body)
    assert r.status == 200, r.body


def test_sequence_answers_match_the_reference(server: InferdProcess) -> None:
    for i, step in enumerate(STEPS):
        if "sleep" in step:
            _wait_released(server, STEPS[i - 1])
            continue
        r = server.infer(step["model"], step["body"])
        got = (r.status, r.content_type, r.json())
        assert got == (step["status"], step["content_type"], step["response"]), step["id"]
