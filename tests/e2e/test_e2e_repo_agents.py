"""Repository agents on a real server (issue 44: ``model_repository_agents`` was read and ignored, a
checksum the user asked for never checked): the checksum agent accepting and refusing a model at
start and through the repository API (HTTP and gRPC) while the other models serve, and a Python
agent, installed through the ``inferd.repoagents`` entry point, that decrypts a model into a folder
of its own before it loads, told of each action of the model's life."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from conftest import InferdProcess
from tritonclient.utils import InferenceServerException

IDENTITY = b"""
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN")
                .as_numpy())]) for r in requests]
"""
IO = 'max_batch_size: 0\ninput [{name: "IN" data_type: TYPE_FP32 dims: [1]}]\noutput [{name: "OUT" data_type: TYPE_FP32 dims: [1]}]\n'
KEY = 0x5A
#: a repository agent of the test's own: model.py.enc is model.py with every byte XOR 0x5A; the agent
#: writes the plain model to a folder it acquired and loads it from there; it logs every action
AGENT = f"""
from inferd.engine.agents import AgentAction
from inferd.errors import InvalidArgumentError


class XorAgent:
    def model_action(self, action, model):
        with open(model.parameters["log"], "a") as f:
            f.write(action.value + "\\n")
        if action is not AgentAction.LOAD:
            return
        folder = model.acquire_location()
        for enc in model.location.rglob("*.enc"):
            plain = folder / enc.relative_to(model.location).with_suffix("")
            plain.parent.mkdir(parents=True, exist_ok=True)
            plain.write_bytes(bytes(b ^ {KEY} for b in enc.read_bytes()))
        if not any(folder.rglob("model.py")):
            raise InvalidArgumentError("nothing to decrypt")
        model.set_location(folder)
"""


def _model(repo: Path, name: str, agents: str = "", source: bytes = IDENTITY) -> Path:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(f'backend: "python"\n{IO}{agents}')
    (repo / name / "1" / "model.py").write_bytes(source)
    return repo / name


def _checksum(digest: str) -> str:
    return f'model_repository_agents {{ agents [{{ name: "checksum" parameters {{ key: "MD5:1/model.py" value: "{digest}" }} }}] }}\n'


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[InferdProcess, Path]]:
    base = tmp_path_factory.mktemp("agents")
    repo = base / "repository"
    good = hashlib.md5(IDENTITY).hexdigest()
    _model(repo, "checked", _checksum(good))
    _model(repo, "tampered", _checksum("0" * 32))
    _model(repo, "plain")
    # the Python agent, installed as a distribution with its entry point (what pip would write)
    site = base / "site"
    (site / "xor_agent-1.0.dist-info").mkdir(parents=True)
    (site / "xor_agent-1.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: xor-agent\nVersion: 1.0\n"
    )
    (site / "xor_agent-1.0.dist-info" / "entry_points.txt").write_text(
        "[inferd.repoagents]\nxor = xor_agent:XorAgent\n"
    )
    (site / "xor_agent.py").write_text(AGENT)
    log = base / "actions.log"
    secret = _model(
        repo,
        "secret",
        f'model_repository_agents {{ agents [{{ name: "xor" parameters {{ key: "log" value: "{log}" }} }}] }}\n',
    )
    (secret / "1" / "model.py").unlink()
    (secret / "1" / "model.py.enc").write_bytes(bytes(b ^ KEY for b in IDENTITY))
    proc = InferdProcess(
        repo,
        base / "server.log",
        (
            "--model-control-mode=explicit",
            "--load-model=checked",
            "--load-model=tampered",
            "--load-model=plain",
        ),
        env={"PYTHONPATH": f"{site}:{Path(__file__).resolve().parents[2] / 'src'}"},
    )
    proc.start()
    try:
        yield proc, base
    finally:
        proc.stop()


def _infer(proc: InferdProcess, model: str) -> list[float]:
    client = httpclient.InferenceServerClient(proc.url)
    try:
        x = httpclient.InferInput("IN", [1], "FP32")
        x.set_data_from_numpy(np.array([7.0], dtype=np.float32))
        out: list[float] = client.infer(model, [x]).as_numpy("OUT").tolist()
        return out
    finally:
        client.close()


def test_the_checksum_agent_accepts_and_refuses_at_start(server: tuple[InferdProcess, Path]) -> None:
    proc, _ = server
    index = {e["name"]: e for e in proc.request("POST", "/v2/repository/index", {}).json()}
    assert index["checked"]["state"] == "READY"
    assert "tampered" not in {n for n, e in index.items() if e.get("state") == "READY"}
    assert "Mismatched MD5 hash for file 1/model.py, expect: 00000000000000000000000000000000, got: " in (
        index["tampered"].get("reason", "")
    )
    assert _infer(proc, "checked") == [7.0] and _infer(proc, "plain") == [7.0]


def test_a_checksum_refusal_through_the_api_leaves_the_others_serving(
    server: tuple[InferdProcess, Path],
) -> None:
    proc, _ = server
    config = json.dumps(
        {
            "backend": "python",
            "max_batch_size": 0,
            "input": [{"name": "IN", "data_type": "TYPE_FP32", "dims": [1]}],
            "output": [{"name": "OUT", "data_type": "TYPE_FP32", "dims": [1]}],
            "model_repository_agents": {
                "agents": [{"name": "checksum", "parameters": {"MD5:1/model.py": "f" * 32}}]
            },
        }
    )
    http = httpclient.InferenceServerClient(proc.url)
    grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{proc.grpc_port}")
    try:
        with pytest.raises(
            InferenceServerException, match=r"failed to poll from model repository: Mismatched MD5"
        ):
            http.load_model("plain", config=config)
        with pytest.raises(InferenceServerException, match=r"Mismatched MD5 hash for file 1/model.py"):
            grpc.load_model("plain", config=config)
        assert http.is_model_ready("plain")  # the loaded version serves on
    finally:
        http.close()
        grpc.close()
    assert _infer(proc, "plain") == [7.0]


def test_a_python_agent_decrypts_a_model_and_hears_of_its_life(server: tuple[InferdProcess, Path]) -> None:
    proc, base = server
    log = base / "actions.log"
    assert proc.request("POST", "/v2/repository/models/secret/load", {}).status == 200
    assert _infer(proc, "secret") == [7.0]
    assert log.read_text().split() == ["LOAD", "LOAD_COMPLETE"]
    assert proc.request("POST", "/v2/repository/models/secret/unload", {}).status == 200
    assert log.read_text().split() == ["LOAD", "LOAD_COMPLETE", "UNLOAD", "UNLOAD_COMPLETE"]
    assert not list(Path("/tmp").glob("inferd-agent-secret-*"))  # the folder it acquired is gone
