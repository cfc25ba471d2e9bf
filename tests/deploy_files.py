"""The deployment files read by real tools, for tests/deploy and the chart's e2e test.

The Helm chart (deploy/helm/inferd) is rendered by Helm's own Go engine: helm-python-sdk on PyPI
bundles Helm v4's SDK (libhelm_c, loaded with ctypes), so no ``helm`` binary and no cluster are
needed. The Dockerfile is read by ``dockerfile`` (BuildKit's parser, compiled). KServe's manifests
(deploy/kserve) are checked against KServe's API types as its Python SDK (``kserve``) carries them,
generated from the same Go types as its CRDs, and the Kubernetes types they hold (containers) as the
``kubernetes`` client has them. All come with ``inferd[deploy]`` (``make install``); without them
the tests that need them skip and say why.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from repo_paths import ROOT

CHART = ROOT / "deploy" / "helm" / "inferd"
KSERVE = ROOT / "deploy" / "kserve"
ADAPTER_VALUES = ROOT / "deploy" / "helm" / "prometheus-adapter-values.yaml"
DOCKERFILE = ROOT / "deploy" / "docker" / "Dockerfile"
#: the SageMaker and Vertex AI images, built on inferd's
SAGEMAKER_DOCKERFILE = ROOT / "deploy" / "sagemaker" / "Dockerfile"
VERTEX_DOCKERFILE = ROOT / "deploy" / "vertex-ai" / "Dockerfile"
DOCKERIGNORE = ROOT / "deploy" / "docker" / "Dockerfile.dockerignore"
PYPROJECT = ROOT / "pyproject.toml"
MISSING = "not installed: pip install -e '.[deploy]' (make install)"


def helm() -> Any:
    """helm_python (Helm's Go SDK), or skip."""
    return pytest.importorskip("helm_python", reason=f"helm-python-sdk {MISSING}")


def render(values: dict[str, Any], name: str = "inferd", namespace: str = "ml") -> list[dict[str, Any]]:
    """Every object the chart renders for ``values``, after Helm checked them against its schema."""
    h = helm()
    with h.Chart.load(CHART) as chart:
        chart.validate_schema(chart.merge_values(values))
        rendered: dict[str, str] = chart.render(values, name=name, namespace=namespace)
    docs: list[dict[str, Any]] = []
    for path in sorted(rendered):
        if path.endswith(".yaml"):
            docs.extend(d for d in yaml.safe_load_all(rendered[path]) if d)
    return docs


def notes(values: dict[str, Any]) -> str:
    """The chart's NOTES.txt as Helm prints it after an install."""
    h = helm()
    with h.Chart.load(CHART) as chart:
        rendered: dict[str, str] = chart.render(values, name="inferd", namespace="ml")
    return next(text for path, text in rendered.items() if path.endswith("NOTES.txt"))


def the(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    """The one object of this kind."""
    found = [d for d in docs if d["kind"] == kind]
    assert len(found) == 1, f"{len(found)} {kind} objects"
    return found[0]


def container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """The Deployment's inferd container."""
    containers = the(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    return next(c for c in containers if c["name"] == "inferd")


def container_port(c: dict[str, Any], name: str) -> int:
    return int(next(p["containerPort"] for p in c["ports"] if p["name"] == name))


def dockerfile(path: Path = DOCKERFILE) -> tuple[Any, ...]:
    """A Dockerfile's instructions (inferd's image by default), as BuildKit's parser reads them."""
    parser = pytest.importorskip("dockerfile", reason=f"dockerfile {MISSING}")
    return tuple(parser.parse_file(str(path)))


def final_stage(commands: tuple[Any, ...]) -> list[Any]:
    """The instructions of the last stage (the image that runs)."""
    starts = [i for i, c in enumerate(commands) if c.cmd.upper() == "FROM"]
    return list(commands[starts[-1] :])


def instruction(commands: list[Any], name: str) -> Any:
    """The last instruction called ``name`` (the one that counts)."""
    return [c for c in commands if c.cmd.upper() == name][-1]


def image_command(c: dict[str, Any]) -> list[str]:
    """The command line the container runs: its command (else the image's ENTRYPOINT) and its args."""
    stage = final_stage(dockerfile())
    entrypoint = instruction(stage, "ENTRYPOINT")
    assert entrypoint.json, "ENTRYPOINT in exec form, so that the chart's args follow it"
    return [*(c.get("command") or entrypoint.value), *c.get("args", [])]


def console_scripts() -> dict[str, str]:
    """pyproject.toml's [project.scripts]: command -> module:function."""
    return dict(tomllib.loads(PYPROJECT.read_text())["project"]["scripts"])


def extras() -> set[str]:
    return set(tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"])


def read_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def kserve_errors(docs: list[dict[str, Any]]) -> list[str | None]:
    """Each of ``docs`` (ServingRuntime, ClusterServingRuntime, InferenceService) checked against
    KServe's API types by tests/kserve_schema.py: None when valid, else the error with the field's
    path. In a process of its own: importing ``kserve`` registers protobuf messages under the names
    tritonclient's use, which would break the gRPC tests sharing this process."""
    if importlib.util.find_spec("kserve") is None:
        pytest.skip(f"kserve {MISSING}")
    script = Path(__file__).with_name("kserve_schema.py")
    r = subprocess.run(
        [sys.executable, str(script)], input=json.dumps(docs), capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    verdicts: list[str | None] = json.loads(r.stdout)
    return verdicts
