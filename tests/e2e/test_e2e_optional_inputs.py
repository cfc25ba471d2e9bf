"""Optional inputs, against the real Triton 2.51's recorded answers
(reference_observed_optional_inputs.json, tests/fixtures/make_reference_optional_inputs.py, whose
``observe`` runs here too): an ensemble leaves out what an optional input not given would have
produced, and the dynamic batcher sends a batch at once when a request with other inputs follows it
(Triton's qa L0_optional_input)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from conftest import InferdProcess

from repo_paths import FIXTURES, load_script

RECORDER = FIXTURES / "make_reference_optional_inputs.py"
OBSERVED = json.loads((FIXTURES / "reference_observed_optional_inputs.json").read_text())


def test_the_recording_covers_the_issue() -> None:
    # the second step got no INPUT1 (the first did not produce it): OUTPUT1 is left out, no error
    assert OBSERVED["ensemble"][2] == {"requested": ["OUTPUT0", "OUTPUT1"], "outputs": [["OUTPUT0", [[7.0]]]]}
    # two batches of two: INPUT1's first request sent INPUT0's pair at once, though 4 is preferred
    assert OBSERVED["batches"] == {"2": 2}


def test_optional_inputs_match_the_reference(tmp_path: Path) -> None:
    repo = tmp_path / "models"
    shutil.copytree(FIXTURES / "optional_input_models", repo, ignore=shutil.ignore_patterns("__pycache__"))
    server = InferdProcess(repo, tmp_path / "inferd.log").start()
    try:
        observe = load_script(RECORDER, "make_reference_optional_inputs").observe
        assert observe(server.url, f"127.0.0.1:{server.grpc_port}") == OBSERVED
    finally:
        server.stop()
