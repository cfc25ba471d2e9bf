"""Repository agents (engine/agents.py): the checksum agent's texts as the reference agent's, an
agent that moves a model to a folder it acquired, and what an unknown agent says."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from google.protobuf import json_format

from inferd.engine.agents import AgentAction, AgentModel, ChecksumAgent, get_agent, load_agents
from inferd.errors import InvalidArgumentError, UnsupportedError
from inferd.repository.config.schema import ModelConfig


def _model(tmp_path: Path, **parameters: str) -> AgentModel:
    (tmp_path / "1").mkdir(parents=True, exist_ok=True)
    (tmp_path / "1" / "model.py").write_bytes(b"print('hello')\n")
    return AgentModel("m", tmp_path, ModelConfig(), parameters)


def test_checksum_accepts_the_files_whose_digest_matches(tmp_path: Path) -> None:
    digest = hashlib.md5(b"print('hello')\n").hexdigest()
    ChecksumAgent().model_action(AgentAction.LOAD, _model(tmp_path, **{"MD5:1/model.py": digest}))
    ChecksumAgent().model_action(AgentAction.LOAD, _model(tmp_path, **{"md5:1/model.py": digest}))


@pytest.mark.parametrize(
    ("key", "value", "error", "text"),
    [
        (
            "MD5:1/model.py",
            "0" * 32,
            InvalidArgumentError,
            "Mismatched MD5 hash for file 1/model.py, expect: 0000",
        ),
        ("1/model.py", "x", InvalidArgumentError, "failed to parse key: 1/model.py"),
        ("SHA1:1/model.py", "x", UnsupportedError, "Unsupported checksum algorithm: SHA1"),
        (
            "MD5:1/missing.py",
            "x",
            InvalidArgumentError,
            "failed to open text file for read 1/missing.py: No such file",
        ),
        ("MD5:../../etc/passwd", "x", InvalidArgumentError, "outside the model"),
    ],
)
def test_checksum_refuses_as_the_reference_agent(
    tmp_path: Path, key: str, value: str, error: type[Exception], text: str
) -> None:
    with pytest.raises(error, match=text):
        ChecksumAgent().model_action(AgentAction.LOAD, _model(tmp_path / "model", **{key: value}))


def test_checksum_acts_at_load_only(tmp_path: Path) -> None:
    model = _model(tmp_path, **{"MD5:1/model.py": "wrong"})
    for action in AgentAction:
        if action is not AgentAction.LOAD:
            ChecksumAgent().model_action(action, model)


def test_an_unknown_agent_fails_the_load_naming_it() -> None:
    with pytest.raises(InvalidArgumentError, match="unable to find repository agent 'nope'"):
        get_agent("nope")


def _config(*agents: dict[str, object]) -> ModelConfig:
    return json_format.ParseDict(
        {"name": "m", "model_repository_agents": {"agents": list(agents)}}, ModelConfig()
    )


def test_a_config_without_agents_has_no_chain(tmp_path: Path) -> None:
    assert load_agents(ModelConfig(name="m"), "m", tmp_path) is None


def test_the_chain_runs_the_config_s_agents_and_a_refusal_removes_what_they_made(tmp_path: Path) -> None:
    _model(tmp_path)
    digest = hashlib.md5(b"print('hello')\n").hexdigest()
    chain = load_agents(
        _config({"name": "checksum", "parameters": {"MD5:1/model.py": digest}}), "m", tmp_path
    )
    assert chain is not None and chain.location == tmp_path
    with pytest.raises(InvalidArgumentError, match="Mismatched MD5"):
        load_agents(_config({"name": "checksum", "parameters": {"MD5:1/model.py": "bad"}}), "m", tmp_path)


def test_an_agent_moves_a_model_only_to_a_folder_it_acquired(tmp_path: Path) -> None:
    model = _model(tmp_path)
    folder = model.acquire_location()
    try:
        model.set_location(folder)
        assert model.location == folder
        with pytest.raises(InvalidArgumentError, match="only move it to a folder it acquired"):
            model.set_location(tmp_path / "elsewhere")
    finally:
        model.release()
    assert not folder.exists()
