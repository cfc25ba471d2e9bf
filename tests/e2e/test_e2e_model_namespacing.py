"""``--model-namespacing``: two repositories holding models of one name, served as the reference
serves them (Triton's L0_model_namespacing layouts, tests/namespacing.py).

Each case runs against inferd exactly as tests/fixtures/make_reference_namespacing.py ran it
against Triton 2.51, and what inferd answers must equal what the reference answered
(reference_observed_namespacing.json): the index, every name's inference over HTTP and gRPC
(tritonclient), the ambiguous name's error on the model endpoints, statistics and metrics labels
(the namespace label), explicit mode's loads and unloads of an ambiguous name, and an ensemble
following its step's model when that model leaves its repository and comes back.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import InferdProcess

import namespacing
from waiting import wait_until

REFERENCE = json.loads(
    (Path(__file__).resolve().parent.parent / "fixtures" / "reference_observed_namespacing.json").read_text()
)


def _json(observed: dict[str, Any]) -> Any:
    """As the recording holds it (tuples are lists in JSON)."""
    return json.loads(json.dumps(observed))


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Any]:
    started: list[InferdProcess] = []

    def start(case: str, mode: str) -> tuple[tuple[int, int, int], Path]:
        root = tmp_path / "repos"
        addsub, subadd = namespacing.write_case(root, case)
        args = (
            f"--model-repository={subadd}",
            "--model-namespacing=true",
            f"--model-control-mode={mode}",
            "--repository-poll-secs=1",
        )
        proc = InferdProcess(addsub, tmp_path / "inferd.log", args).start()
        started.append(proc)
        wait_until(lambda: proc.request("GET", "/v2/health/ready").status == 200, "the server ready")
        return (proc.port, proc.grpc_port, proc.metrics_port), root

    yield start
    for proc in started:
        assert proc.stop() == 0, proc.log()[-3000:]


@pytest.mark.parametrize("mode", ["poll", "explicit"])
@pytest.mark.parametrize("case", namespacing.CASES)
def test_a_case_answers_as_the_reference(serve: Any, case: str, mode: str) -> None:
    ports, root = serve(case, mode)
    assert _json(namespacing.scenario(ports, root, case, mode)) == REFERENCE[f"{case}/{mode}"]


@pytest.mark.parametrize("mode", ["poll", "explicit"])
def test_an_ensemble_follows_its_step_out_of_its_repository_and_back(serve: Any, mode: str) -> None:
    ports, root = serve("duplication", mode)
    assert _json(namespacing.dynamic(ports, root, mode)) == REFERENCE[f"dynamic/{mode}"]
