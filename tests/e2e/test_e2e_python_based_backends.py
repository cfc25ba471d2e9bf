"""Python-based backends (issue 44) behind a real ``inferd serve``: ``backend: "linear"`` served by
``<backend directory>/linear/model.py`` (written here), one file for two models that each read their own
``model.json`` from their version folder (the layout of Triton's vLLM backend), one model in the
server's threads and one in a worker process, called with tritonclient over HTTP and gRPC; and the
ways such a backend is missing or broken, each failing its own model's load with the reference's text
(recorded from Triton 2.51 with the same repository, ``scripts/reference/triton.sh`` with
``--backend-directory``), the other models serving."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from conftest import InferdProcess, grpc_client, http_client

import python_based
from repo_paths import FIXTURES

pytestmark = pytest.mark.timeout(300)

#: what Triton 2.51 answered for the same files (tests/fixtures/make_reference_python_based.py)
DOC = json.loads((FIXTURES / "reference_observed_python_based.json").read_text())
#: reasons inferd words on purpose differently: the reference's words, then where inferd looked; a
#: backend name with a path finds nothing (the reference finds nothing for 'linear/x' either, but for
#: '../outside' looks outside its backend directory, then fails on the shared-memory key the name makes)
OWN_WORDS = {
    "nosuch": DOC["unavailable"]["nosuch"] + " inferd's backends are",
    "empty_be": DOC["unavailable"]["empty_be"] + " inferd's backends are",
    "slash": DOC["unavailable"]["slash"] + " inferd's backends are",
    "escape": DOC["unavailable"]["slash"].replace("linear/x", "../outside") + " inferd's backends are",
}


def _reason(name: str, root: Path) -> str:
    """The reference's reason with this run's folders; the model's own path left out, as inferd's
    reasons name a model's files (README: no server paths to clients)."""
    text: str = DOC["unavailable"][name]
    return text.replace("<models>/", "").replace("<backends>", str(root / "backends"))


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("python_based")
    python_based.write_layout(root)
    return root


@pytest.fixture(scope="module")
def server(root: Path) -> Iterator[InferdProcess]:
    proc = InferdProcess(
        root / "models",
        root / "inferd.log",
        ("--backend-directory", str(root / "backends"), "--strict-readiness=false"),
    ).start()
    try:
        yield proc
    finally:
        code = proc.stop()
        assert code == 0, f"inferd exited with {code}; log:\n{proc.log()[-4000:]}"


def _index(server: InferdProcess) -> dict[str, dict[str, Any]]:
    r = server.request("POST", "/v2/repository/index", {})
    assert r.status == 200, r.body
    return {m["name"]: m for m in r.json()}


def test_two_models_load_through_one_backend_file_and_the_broken_ones_say_why(
    server: InferdProcess, root: Path
) -> None:
    index = _index(server)
    assert {n for n, m in index.items() if m["state"] == "READY"} == set(DOC["ready"]), index
    assert set(index) == {*DOC["ready"], *DOC["unavailable"]}
    for name in DOC["unavailable"]:
        assert index[name]["state"] == "UNAVAILABLE", index[name]
        if name in OWN_WORDS:
            assert index[name]["reason"].startswith(OWN_WORDS[name]), index[name]
        else:
            assert index[name]["reason"] == _reason(name, root), (name, index[name]["reason"])


def test_a_backend_name_with_a_path_never_reaches_outside_the_backend_directory(root: Path) -> None:
    assert (root / "outside" / "model.py").is_file()
    assert not (root / "outside" / "imported").exists()  # its import would have left this


def test_the_config_is_the_references(server: InferdProcess) -> None:
    # runtime "model.py" as the reference sets it, the tensors the backend's auto_complete_config added
    with http_client(server) as client:
        config = client.get_model_config("lin_a")
        metadata = client.get_model_metadata("lin_a")
    assert config == DOC["lin_a_config"]
    assert list(config) == list(DOC["lin_a_config"])
    assert metadata["platform"] == "linear"  # the reference's: the backend's name where platform is empty


def _http(server: InferdProcess, model: str, x: np.ndarray[Any, Any]) -> tuple[Any, Any, dict[str, Any]]:
    with http_client(server) as client:
        i = httpclient.InferInput("X", list(x.shape), "FP32").set_data_from_numpy(x)
        r = client.infer(model, [i])
    return r.as_numpy("Y"), int(r.as_numpy("PID").flat[0]), json.loads(r.as_numpy("INFO").flat[0])


def _grpc(server: InferdProcess, model: str, x: np.ndarray[Any, Any]) -> tuple[Any, Any, dict[str, Any]]:
    with grpc_client(server) as client:
        i = grpcclient.InferInput("X", list(x.shape), "FP32")
        i.set_data_from_numpy(x)
        r = client.infer(model, [i])
    return r.as_numpy("Y"), int(r.as_numpy("PID").flat[0]), json.loads(r.as_numpy("INFO").flat[0])


@pytest.mark.parametrize("call", [_http, _grpc], ids=["http", "grpc"])
def test_each_model_reads_its_own_files_in_a_thread_or_a_process(server: InferdProcess, call: Any) -> None:
    assert server.proc is not None
    x = np.array([1.0, 2.0], dtype=np.float32)
    y, pid, info = call(server, "lin_a", x)
    np.testing.assert_array_equal(y, x * 2 + 1)
    assert pid == server.proc.pid  # execution_mode thread: the server's own process
    assert info == {
        "model_name": "lin_a",
        "model_version": "1",
        "model_folder": "lin_a",
        "helper": "linear_helper of the backend folder",
        "file": "linear/model.py",
    }
    xb = np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32)
    y, pid, info = call(server, "lin_b", xb)
    np.testing.assert_array_equal(y, xb * -1 + 0.5)
    assert pid != server.proc.pid  # execution_mode process: a worker process
    assert (info["model_name"], info["model_folder"], info["file"]) == ("lin_b", "lin_b", "linear/model.py")
    assert info["helper"] == "linear_helper of the backend folder"
