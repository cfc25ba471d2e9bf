"""scripts/reference/verify_models.py's checks, run against inferd: HTTP (binary and JSON) and gRPC.

The server here serves the reference repository alone, as the reference does when it is checked,
so every check must pass (server readiness included).
"""

from __future__ import annotations

import importlib.util
import shutil
from collections.abc import Iterator
from types import ModuleType

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from conftest import REFERENCE_MODELS, InferdProcess

from repo_paths import REFERENCE_SCRIPTS

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(scope="module")
def reference_only_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InferdProcess]:
    root = tmp_path_factory.mktemp("verify")
    repo = root / "models"
    shutil.copytree(REFERENCE_MODELS, repo, ignore=shutil.ignore_patterns("__pycache__"))
    srv = InferdProcess(repo, root / "inferd.log").start()
    try:
        yield srv
    finally:
        assert srv.stop() == 0, srv.log()[-3000:]


@pytest.fixture
def verify_models() -> Iterator[ModuleType]:
    spec = importlib.util.spec_from_file_location(
        "reference_verify_models", REFERENCE_SCRIPTS / "verify_models.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_verify_models_http(
    reference_only_server: InferdProcess,
    verify_models: ModuleType,
    binary: bool,
    capsys: pytest.CaptureFixture[str],
) -> None:
    client = httpclient.InferenceServerClient(reference_only_server.url)
    try:
        verify_models.run("http", httpclient, client, binary=binary)
    finally:
        client.close()
    out = capsys.readouterr().out
    assert verify_models.failures == [], out
    assert out.count("  ok  ") == 20, out


def test_verify_models_dynamic_batching(
    reference_only_server: InferdProcess, verify_models: ModuleType
) -> None:
    verify_models.dynamic_batching_check(reference_only_server.url)
    assert verify_models.failures == []


def test_verify_models_grpc(
    reference_only_server: InferdProcess,
    verify_models: ModuleType,
    capsys: pytest.CaptureFixture[str],
) -> None:
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{reference_only_server.grpc_port}")
    try:
        verify_models.run("grpc", grpcclient, client)
    finally:
        client.close()
    out = capsys.readouterr().out
    assert verify_models.failures == [], out
    assert out.count("  ok  ") == 20, out
