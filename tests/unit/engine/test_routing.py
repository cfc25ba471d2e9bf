"""Traffic split between versions: version_weights parsed, shares exact, moved by a config override."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from inferd import Server
from inferd.engine.routing import VersionRouter, parse_weights
from inferd.repository.config.schema import ModelConfig
from repo_paths import REFERENCE_MODELS


def _cfg(weights: str) -> ModelConfig:
    cfg = ModelConfig(name="m")
    cfg.parameters["version_weights"].string_value = weights
    return cfg


def test_parse_weights() -> None:
    assert parse_weights(ModelConfig(name="m")) == {}
    assert parse_weights(_cfg("1:90, 2:10")) == {1: 90, 2: 10}
    assert parse_weights(_cfg("3:1,1:0")) == {3: 1, 1: 0}


@pytest.mark.parametrize("text", ["1", "1:x", "0:5", "1:-1", "1:1,1:2", "1:0,2:0", ""])
def test_bad_weights_are_refused(text: str) -> None:
    with pytest.raises(Exception, match="version_weights"):
        parse_weights(_cfg(text))


def test_smooth_round_robin_gives_exact_shares() -> None:
    a, b, c = object(), object(), object()
    router = VersionRouter([(a, 5), (b, 1), (c, 1)])  # type: ignore[list-item]
    picks: list[object] = [router.pick() for _ in range(70)]
    assert (picks.count(a), picks.count(b), picks.count(c)) == (50, 10, 10)
    assert picks[:7].count(a) == 5  # spread within each window, not 5 in a row then the rest


def _two_versions(root: Path, weights: str) -> Path:
    repo = root / "models"
    model = repo / "identity_fp32"
    shutil.copytree(REFERENCE_MODELS / "identity_fp32", model)
    shutil.copytree(model / "1", model / "2")
    config = model / "config.pbtxt"
    config.write_text(
        config.read_text()
        + '\nversion_policy { all {} }\nparameters { key: "version_weights" value: { string_value: "'
        + weights
        + '" } }\n'
    )
    return repo


def _counts(server: Server) -> dict[str, int]:
    stats = server.statistics("identity_fp32")["model_stats"]
    return {s["version"]: s["inference_stats"]["success"]["count"] for s in stats}


def test_requests_without_a_version_follow_the_weights(tmp_path: Path) -> None:
    with Server(
        _two_versions(tmp_path, "1:3,2:1"), model_control_mode="explicit", load_model=["*"]
    ) as server:
        x = {"INPUT0": np.ones(2, np.float32)}
        for _ in range(8):
            server.infer("identity_fp32", x)
        assert _counts(server) == {"1": 6, "2": 2}
        server.infer("identity_fp32", x, model_version="1")  # a named version is that version
        assert _counts(server) == {"1": 7, "2": 2}
        assert server.model_metadata("identity_fp32")["versions"] == ["1", "2"]
        # the traffic moves with a load that overrides the config: all of it to version 2
        config = server.model_config("identity_fp32")
        config["parameters"] = {"version_weights": {"string_value": "2:1"}}
        server.load_model("identity_fp32", config=json.dumps(config))
        for _ in range(4):
            server.infer("identity_fp32", x)
        assert _counts(server) == {"1": 0, "2": 4}  # statistics restart with the reload


def test_bad_weights_fail_the_load(tmp_path: Path) -> None:
    with Server(_two_versions(tmp_path, "1:a"), exit_on_error=False) as server:
        entries = [m for m in server.repository_index() if m["name"] == "identity_fp32"]
        assert all(e["state"] == "UNAVAILABLE" and "version_weights" in e["reason"] for e in entries)
