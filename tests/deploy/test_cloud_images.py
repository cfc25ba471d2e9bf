"""The SageMaker and Vertex AI images (deploy/sagemaker/Dockerfile, deploy/vertex-ai/Dockerfile), read by
BuildKit's parser and linted by hadolint: SageMaker's ``serve`` command is inferd's console script with
no entrypoint before it, the image says it serves several models and takes SAGEMAKER_BIND_TO_PORT, and
its health check asks /ping; Vertex AI's command parses with inferd's CLI as AIP_* set it (the
repository from AIP_STORAGE_URI, the Vertex AI API on AIP_HTTP_PORT, HTTP and gRPC off). The images
are not built here (no registry, no docker)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from test_dockerfile import hadolint

from deploy_files import (
    SAGEMAKER_DOCKERFILE,
    VERTEX_DOCKERFILE,
    console_scripts,
    dockerfile,
    final_stage,
    instruction,
)


@pytest.mark.parametrize("path", [SAGEMAKER_DOCKERFILE, VERTEX_DOCKERFILE], ids=["sagemaker", "vertex-ai"])
def test_hadolint_finds_nothing(path: Path) -> None:
    result = subprocess.run([hadolint(), "--no-color", str(path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_sagemaker_runs_serve_as_sagemaker_gives_it() -> None:
    stage = final_stage(dockerfile(SAGEMAKER_DOCKERFILE))
    entrypoint, cmd = instruction(stage, "ENTRYPOINT"), instruction(stage, "CMD")
    assert entrypoint.json and entrypoint.value == (), "docker run <image> serve: nothing before serve"
    assert cmd.json and list(cmd.value) == ["serve"]
    assert console_scripts()["serve"] == "inferd.sagemaker_serve:main"


def test_sagemaker_labels_port_and_health_check() -> None:
    stage = final_stage(dockerfile(SAGEMAKER_DOCKERFILE))
    pairs = instruction(stage, "LABEL").value  # key, value, key, value...
    labels = dict(zip(pairs[::2], pairs[1::2], strict=True))
    assert labels["com.amazonaws.sagemaker.capabilities.multi-models"] == "true"
    assert labels["com.amazonaws.sagemaker.capabilities.accept-bind-to-port"] == "true"
    assert [p.split("/")[0] for p in instruction(stage, "EXPOSE").value] == ["8080"]
    check = " ".join(instruction(stage, "HEALTHCHECK").value)
    assert "/ping" in check and "SAGEMAKER_BIND_TO_PORT" in check


def test_vertex_command_parses_as_vertex_ai_sets_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from inferd.cli import build_parser

    for name, value in {
        "AIP_MODE": "PREDICTION",
        "AIP_HTTP_PORT": "8080",
        "AIP_STORAGE_URI": "gs://bucket/models",
        "AIP_HEALTH_ROUTE": "/health",
        "AIP_PREDICT_ROUTE": "/predict",
    }.items():
        monkeypatch.setenv(name, value)
    stage = final_stage(dockerfile(VERTEX_DOCKERFILE))
    argv = [*instruction(stage, "ENTRYPOINT").value, *instruction(stage, "CMD").value]
    assert console_scripts()[argv[0]] == "inferd.cli:main"
    args = build_parser().parse_args(argv[1:])
    assert (args.allow_vertex_ai, args.vertex_ai_port, args.allow_http, args.allow_grpc) == (
        True,
        8080,
        False,
        False,
    )
    assert args.model_repository == []  # cli.main reads AIP_STORAGE_URI then
    assert [p.split("/")[0] for p in instruction(stage, "EXPOSE").value] == ["8080"]
    check = " ".join(instruction(stage, "HEALTHCHECK").value)
    assert "AIP_HEALTH_ROUTE" in check and "AIP_HTTP_PORT" in check
