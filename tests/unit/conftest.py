"""Shared fixtures of the unit tests: the reference server's recorded answers and models; a fake core."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from inferd.core.request import InferRequest
from inferd.core.response import InferResponse, ResponseStream
from inferd.engine.facade import Decoder
from inferd.engine.lifecycle import ModelLifecycle
from inferd.engine.model import Model
from inferd.engine.validate import validate_request
from inferd.errors import NotFoundError, UnavailableError, UnsupportedError
from inferd.repository import normalize_config, parse_config_text
from repo_paths import FIXTURES, PROTOCOL, REFERENCE_MODELS

# Deterministic (a fixed seed per test, no example database in the tree) and free of timing: the
# suite runs in parallel on busy machines, where Hypothesis' per-example deadline would flake.
settings.register_profile(
    "inferd-unit",
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.load_profile("inferd-unit")

PROBE_ANSWERS = FIXTURES / "reference_probe_answers.txt"
OBSERVED = FIXTURES / "reference_observed.json"


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
    return REFERENCE_MODELS


# -- a fake core for the front ends' unit tests ------------------------------------------------------
# It implements ``inferd.engine.facade.Core`` the way ``ServerCore`` does where a front end can see it
# (lookup errors with the reference's texts, the decoupled refusal, ``decode`` called with the model,
# validation through ``engine.validate``), records what reached it, and answers each request with
# ``answer(request)``: by default an echo (``INPUTn`` back as ``OUTPUTn``), or nothing at all
# (``hold=True``) so that a test sends the responses itself through ``streams``.


def config_model(text: str, version: int = 1) -> Model:
    """A READY Model from config.pbtxt text (no backend behind it)."""
    cfg = parse_config_text(text, "config.pbtxt")
    normalize_config(cfg, cfg.name)
    model = Model(cfg.name, version, cfg, Path("/nonexistent"))
    ModelLifecycle().ready(model)
    return model


def echo(request: InferRequest) -> InferResponse:
    """Each ``INPUTn`` back as ``OUTPUTn``."""
    outputs = [t.renamed(t.name.replace("INPUT", "OUTPUT")) for t in request.inputs.values()]
    return InferResponse(request.model_name, "1", request.id, outputs)


IDENTITY = """
name: "identity_fp32"
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
"""
DECOUPLED = """
name: "repeat"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
"""
CLASSES = """
name: "scores"
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 3 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 3 ] } ]
"""


class FakeCore:
    """``Core`` for front-end tests (see the module docstring)."""

    def __init__(self, *configs: str) -> None:
        self.models = {
            m.name: m for m in (config_model(c) for c in configs or (IDENTITY, DECOUPLED, CLASSES))
        }
        self.is_ready = True
        #: model name -> its own readiness check (a Python model's is_ready)
        self.ready_checks: dict[str, Callable[[], Awaitable[bool]]] = {}
        self.hold = False
        self.answer: Callable[[InferRequest], InferResponse] = echo
        #: (name, version, decoupled_error) of every submit, and the requests and streams it made
        self.calls: list[tuple[str, str, str | None]] = []
        self.requests: list[InferRequest] = []
        self.streams: list[ResponseStream] = []

    def live(self) -> bool:
        return True

    def ready(self) -> bool:
        return self.is_ready

    def metadata(self, extra_extensions: tuple[str, ...] = ()) -> dict[str, Any]:
        return {"name": "fake", "version": "2.51.0", "extensions": list(extra_extensions)}

    def get_model(self, name: str, version: str = "") -> Model:
        model = self.models.get(name)
        if model is None:
            raise NotFoundError(f"Request for unknown model: '{name}' is not found")
        if version and int(version) != model.version:
            raise NotFoundError(f"Request for unknown model: '{name}' version {int(version)} is not found")
        return model

    def model_ready(self, name: str, version: str = "") -> bool:
        return name in self.models

    def ready_check(self, name: str, version: str = "") -> Callable[[], Awaitable[bool]] | None:
        return self.ready_checks.get(name)

    def model_metadata(self, name: str, version: str = "") -> dict[str, Any]:
        m = self.get_model(name, version)
        inputs, outputs = m.io_metadata()
        return {"name": name, "versions": ["1"], "platform": m.platform, "inputs": inputs, "outputs": outputs}

    def model_config(self, name: str, version: str = "") -> dict[str, Any]:
        return self.get_model(name, version).config_json()

    def submit(
        self, name: str, version: str, decode: Decoder, *, decoupled_error: str | None = None
    ) -> ResponseStream:
        self.calls.append((name, version, decoupled_error))
        model = self.get_model(name, version)
        if decoupled_error is not None and model.decoupled:
            raise UnsupportedError(decoupled_error)
        request = decode(model)
        validate_request(request, model)
        self.requests.append(request)
        stream = ResponseStream(asyncio.get_running_loop())
        request.stream = stream
        self.streams.append(stream)
        if not self.hold:
            stream.send(self.answer(request), True)
        return stream

    def statistics(self, name: str = "", version: str = "") -> dict[str, Any]:
        return {"model_stats": []}

    async def gather_statistics(self, name: str = "", version: str = "") -> dict[str, Any]:
        return self.statistics(name, version)

    def repository_index(self, ready_only: bool = False) -> list[dict[str, Any]]:
        return [{"name": n, "version": "1", "state": "READY"} for n in sorted(self.models)]

    def status(self) -> dict[str, Any] | None:
        return None  # the status page is the real core's (tests/e2e)

    async def load_model(
        self, name: str, config: str | None = None, files: dict[str, bytes] | None = None
    ) -> None:
        raise UnavailableError("explicit model load / unload is not allowed if polling is enabled")

    async def unload_model(self, name: str, unload_dependents: bool = False) -> None:
        raise UnavailableError("explicit model load / unload is not allowed if polling is enabled")

    async def register_repository(self, path: str, mapping: dict[str, str], label: str = "") -> None:
        raise UnsupportedError("repository registration is not allowed if model control mode is not EXPLICIT")

    async def unregister_repository(self, path: str) -> None:
        raise UnsupportedError(
            "repository unregistration is not allowed if model control mode is not EXPLICIT"
        )

    def registrations(self) -> list[tuple[str, str, dict[str, str]]]:
        return []


@pytest.fixture
def core() -> FakeCore:
    return FakeCore()


@pytest.fixture
def make_core() -> Callable[..., FakeCore]:
    """FakeCore over the given config texts."""
    return FakeCore
