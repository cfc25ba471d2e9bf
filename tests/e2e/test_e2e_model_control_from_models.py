"""A Python model loading and unloading other models (pb_utils.load_model / unload_model, Triton's
model loading API), in explicit mode, in a thread and in a worker process, with tritonclient.

What each action answers was recorded from Triton 2.51 on the same models (its repository API
underneath, its messages wrapped as its Python backend wraps them): ``initialize`` loads add_sub;
loading the ensemble brings its steps; unload_dependents takes the steps its load brought in;
a config override and file overrides load; files that are not bytes raise the binding's TypeError;
a missing model's error names it. Two differences, on purpose: inferd's load errors end with the
reason, and an invalid JSON config is an error here where it aborted the reference's process.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from conftest import InferdProcess

from repo_paths import FIXTURE_MODELS, REFERENCE_MODELS

LOADER = FIXTURE_MODELS.parent / "model_control_models" / "loader"
SENT_MODEL = "import numpy\nclass TritonPythonModel:\n    def execute(self, requests):\n        return []\n"
PROCESS = '\nparameters { key: "execution_mode" value: { string_value: "process" } }\n'


@pytest.fixture(scope="module", params=["thread", "process"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[InferdProcess]:
    root = tmp_path_factory.mktemp(f"model-control-{request.param}")
    repo = root / "models"
    for name in ("add_sub", "mul_fp32", "ensemble_add_sub"):
        shutil.copytree(REFERENCE_MODELS / name, repo / name)
    shutil.copytree(LOADER, repo / "loader")
    if request.param == "process":
        config = repo / "loader" / "config.pbtxt"
        config.write_text(config.read_text() + PROCESS)
    proc = InferdProcess(repo, root / "inferd.log", ("--model-control-mode=explicit",)).start()
    try:
        yield proc
    finally:
        assert proc.stop() == 0, proc.log()[-3000:]


def _act(client: httpclient.InferenceServerClient, action: str) -> str:
    data = httpclient.InferInput("ACTION", [1], "BYTES")
    data.set_data_from_numpy(np.array([action.encode()], dtype=object))
    return client.infer("loader", [data]).as_numpy("RESULT")[0].decode()


def _states(client: httpclient.InferenceServerClient) -> dict[str, str]:
    return {m["name"]: m.get("state", "") for m in client.get_model_repository_index()}


def test_a_model_loads_and_unloads_models(server: InferdProcess) -> None:
    client = httpclient.InferenceServerClient(server.url)
    try:
        client.load_model("loader")  # after start, as the reference's documentation asks
        assert client.is_model_ready("add_sub")  # loaded by the loader's initialize
        assert _act(client, "ready:add_sub") == "True"
        assert _act(client, "load:ensemble_add_sub") == "ok"
        assert client.is_model_ready("ensemble_add_sub") and client.is_model_ready("mul_fp32")
        assert _act(client, "unload_dependents:ensemble_add_sub") == "ok"
        states = _states(client)
        assert (states["ensemble_add_sub"], states["mul_fp32"], states["add_sub"]) == (
            "UNAVAILABLE",
            "UNAVAILABLE",
            "READY",  # loaded by name (from initialize): not the ensemble's to take along
        )
        missing = _act(client, "load:no_such_model")
        assert missing.startswith(
            "TritonModelException: Failed to load model: Failed to process the request for model 'loader_0', "
            "message: failed to load 'no_such_model', failed to poll from model repository"
        )
        bad = _act(client, "load_config:add_sub:{not json")  # the reference's process aborted here
        assert (
            bad.startswith("TritonModelException: Failed to load model:") and "Invalid config override" in bad
        )
        assert _act(client, 'load_config:add_sub:{"max_batch_size": 4}') == "ok"
        assert client.get_model_config("add_sub")["max_batch_size"] == 4
        assert _act(client, f"load_files:sent:{SENT_MODEL}") == "ok"
        assert client.is_model_ready("sent")
        assert (
            _act(client, "load_text_files:sent2")
            == "TypeError: Object of type 'str' is not an instance of 'bytes'"
        )
        assert _act(client, "unload:sent") == "ok" and not client.is_model_ready("sent")
        for _ in range(20):  # many quick executes: the pool must not take the loader onto the loop
            assert _act(client, "ready:sent") == "False"
        assert _act(client, "unload:add_sub") == "ok" and not client.is_model_ready("add_sub")
        assert _act(client, "load:add_sub") == "ok" and client.is_model_ready("add_sub")
        client.unload_model("loader")
    finally:
        client.close()


def test_polling_mode_refuses_as_the_reference(tmp_path: Path) -> None:
    repo = tmp_path / "models"
    shutil.copytree(REFERENCE_MODELS / "add_sub", repo / "add_sub")
    shutil.copytree(LOADER, repo / "loader")
    config = repo / "loader" / "config.pbtxt"
    config.write_text(
        config.read_text() + '\nparameters { key: "load_in_initialize" value: { string_value: "false" } }\n'
    )
    proc = InferdProcess(repo, tmp_path / "inferd.log").start()
    client = httpclient.InferenceServerClient(proc.url)
    try:
        assert _act(client, "unload:add_sub") == (
            "TritonModelException: Failed to unload model: Failed to process the request for model 'loader_0', "
            "message: explicit model load / unload is not allowed if polling is enabled"
        )
    finally:
        client.close()
        assert proc.stop() == 0
