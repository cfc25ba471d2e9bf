"""Shared fixtures of the unit tests: the reference server's recorded answers and models."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

# Deterministic (a fixed seed per test, no example database in the tree) and free of timing: the
# suite runs in parallel on busy machines, where Hypothesis' per-example deadline would flake.
settings.register_profile(
    "inferd-unit",
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("inferd-unit")

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT.parent / "shared" / "reference"
PROTOCOL = REFERENCE / "triton-2.51.0-protocol.txt"
PROBE_ANSWERS = ROOT / "tests" / "fixtures" / "reference_probe_answers.txt"
OBSERVED = ROOT / "tests" / "fixtures" / "reference_observed.json"


def reference_observed() -> list[dict[str, Any]]:
    """Requests and the reference's answers to them (see tests/fixtures/make_reference_observed.py)."""
    entries: list[dict[str, Any]] = json.loads(OBSERVED.read_text())
    return entries


def observed_error(entry: dict[str, Any]) -> str | None:
    """The ``error`` text of an observed answer, None when it has none."""
    text = entry["response"].get("text", "")
    if not text.startswith('{"error"'):
        return None
    error: str = json.loads(text)["error"]
    return error


def _reference_errors() -> dict[str, int | None]:
    """Every error text the reference answered with -> its HTTP status (None: seen over gRPC only)."""
    texts: dict[str, int | None] = {}
    lines = PROTOCOL.read_text().splitlines()
    for prev, line in itertools.pairwise(lines):
        body = line.strip()
        if prev.startswith("HTTP ") and body.startswith('{"error"'):
            status = int(prev.split(" -> ", 1)[1].split()[0])
            texts[json.loads(body)["error"]] = status
        elif prev.startswith("gRPC ") and not prev.endswith(": OK"):
            texts.setdefault(body, None)
    for line in PROBE_ANSWERS.read_text().splitlines():
        if line.startswith('{"error"'):
            body, answer = line.rsplit(" -> ", 1)
            texts[json.loads(body)["error"]] = int(answer.split()[0])
    for entry in reference_observed():
        error = observed_error(entry)
        if error is not None:
            texts[error] = entry["status"]
    return texts


@pytest.fixture(scope="session")
def reference_errors() -> dict[str, int | None]:
    """The reference's error texts (HTTP and gRPC) with their HTTP status."""
    return _reference_errors()


@pytest.fixture(scope="session")
def reference_answers() -> dict[str, str]:
    """The reference's answer bodies by probe name (``infer_ok_json`` -> the body line)."""
    answers: dict[str, str] = {}
    lines = PROTOCOL.read_text().splitlines()
    for prev, line in itertools.pairwise(lines):
        if prev.startswith("HTTP "):
            answers[prev.split()[1].rstrip(":")] = line.strip()
    return answers


@pytest.fixture(scope="session")
def reference_models() -> Path:
    """The reference model repository both servers must load unmodified."""
    return REFERENCE / "models"
