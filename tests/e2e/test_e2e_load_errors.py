"""What a failed load tells a client (issue 45): the reference's words where it has them, and never
the server's file paths (the log has them): a model without a version folder, a version without
its model file (Python and ONNX), at start (the index) and through the repository API."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import tritonclient.grpc as grpcclient
from conftest import InferdProcess
from tritonclient.utils import InferenceServerException

IO = 'max_batch_size: 0\ninput [{name: "IN" data_type: TYPE_FP32 dims: [1]}]\noutput [{name: "OUT" data_type: TYPE_FP32 dims: [1]}]\n'


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[InferdProcess, Path]]:
    repo = tmp_path_factory.mktemp("load-errors") / "repository"
    for name, backend, version in (
        ("nover", "python", False),
        ("nofile", "python", True),
        ("noonnx", "onnxruntime", True),
    ):
        (repo / name).mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(f'backend: "{backend}"\n{IO}')
        if version:
            (repo / name / "1").mkdir()
    proc = InferdProcess(repo, repo.parent / "server.log", ("--model-control-mode=explicit",)).start()
    try:
        yield proc, repo
    finally:
        proc.stop()


def test_a_model_without_a_version_answers_as_the_reference(server: tuple[InferdProcess, Path]) -> None:
    proc, _ = server
    r = proc.request("POST", "/v2/repository/models/nover/load", {})
    # recorded on Triton 2.51
    assert (r.status, r.error) == (
        400,
        "load failed for model 'nover': at least one version must be available under the version policy "
        "of model 'nover'\n",
    )


@pytest.mark.parametrize(
    ("model", "file"), [("nofile", "nofile/1/model.py"), ("noonnx", "noonnx/1/model.onnx")]
)
def test_a_missing_model_file_is_named_without_the_servers_paths(
    server: tuple[InferdProcess, Path], model: str, file: str
) -> None:
    proc, repo = server
    r = proc.request("POST", f"/v2/repository/models/{model}/load", {})
    assert r.status == 400 and r.error.startswith(
        f"load failed for model '{model}': version 1 is at UNAVAILABLE"
    )
    assert f"'{file}'" in r.error and str(repo) not in r.error
    index = proc.request("POST", "/v2/repository/index", {}).json()
    [entry] = [e for e in index if e["name"] == model]
    assert f"'{file}'" in entry["reason"] and str(repo) not in entry["reason"]
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{proc.grpc_port}")
    try:
        with pytest.raises(InferenceServerException) as e:
            client.load_model(model)
        assert str(repo) not in str(e.value) and f"'{file}'" in str(e.value)
    finally:
        client.close()
    assert str(repo / file) in proc.log()  # the operator's log has the whole path


def test_a_failed_load_is_logged_as_the_reference_logs_it(server: tuple[InferdProcess, Path]) -> None:
    proc, _ = server
    proc.request("POST", "/v2/repository/models/nover/load", {})
    # the reference's error line (Triton 2.51): model_repository_manager.cc "failed to load model ..."
    assert (
        "failed to load model 'nover': at least one version must be available under the version policy "
        "of model 'nover'" in proc.log()
    )


def test_models_that_fail_at_start_are_logged(tmp_path: Path) -> None:
    """A start that loads everything: each model that cannot load has an error line saying why (the
    model table alone said it before), worded as the reference's."""
    repo = tmp_path / "repository"
    (repo / "nover").mkdir(parents=True)
    (repo / "nover" / "config.pbtxt").write_text(f'backend: "python"\n{IO}')
    (repo / "badcfg" / "1").mkdir(parents=True)
    (repo / "badcfg" / "config.pbtxt").write_text('backend: "python" max_batch_size: nonsense\n')
    proc = InferdProcess(repo, tmp_path / "server.log", ("--exit-on-error=false",)).start()
    try:
        log = proc.log()
        assert (
            "failed to load model 'nover': at least one version must be available under the version "
            "policy of model 'nover'" in log
        )
        assert "Poll failed for model directory 'badcfg': failed to parse model configuration" in log
        index = {e["name"]: e for e in proc.request("POST", "/v2/repository/index", {}).json()}
        assert index["nover"]["state"] == index["badcfg"]["state"] == "UNAVAILABLE"
    finally:
        proc.stop()
