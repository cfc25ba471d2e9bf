"""The real Triton 2.51's SageMaker and Vertex AI front ends, asked of inferd:
tests/fixtures/reference_observed_clouds.json (recorded by tests/fixtures/make_reference_clouds.py).

Each scenario starts inferd as the reference was started (the same flags, environment and models;
multi-model archives under a folder of the test's own, ``--sagemaker-models-root``) and sends every
recorded request, in order, to the same port: the status, the content type, the headers that matter
and the body must be the reference's. Where the reference crashed, and where inferd answers
otherwise on purpose, ``DIFFERENCES`` says what inferd answers instead, and why. Scenarios in which
the reference refused to start must make inferd refuse with the same reason.
"""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO_ROOT, InferdProcess

from ports import free_port
from repo_paths import FIXTURES, load_script

rec = load_script(FIXTURES / "make_reference_clouds.py", "make_reference_clouds")
OBSERVED = json.loads((REPO_ROOT / "tests" / "fixtures" / "reference_observed_clouds.json").read_text())
SCENARIOS = {sc["id"]: sc for sc in OBSERVED["scenarios"]}
RUNNING = [sc for sc in OBSERVED["scenarios"] if sc.get("cases") is not None]
REFUSED = [sc for sc in OBSERVED["scenarios"] if sc.get("cases") is None]

pytestmark = pytest.mark.timeout(300)


def _error(status: int, message: str, content_type: str = "text/plain") -> dict[str, Any]:
    return {
        "status": status,
        "content_type": content_type,
        "headers": {},
        "body": {"json": {"error": message}},
    }


#: "scenario/case" -> what inferd answers where the reference crashed or inferd differs on purpose
DIFFERENCES: dict[str, dict[str, Any]] = {
    # the reference aborts (it answers the parse error, then reads the fields it never filled):
    # inferd answers the parse error and serves on
    "sagemaker_multi_model_crashes/load_malformed_json": _error(
        400, "failed to parse the request JSON buffer: Missing a name for object member. at 1"
    ),
    "sagemaker_multi_model_crashes/load_url_not_string": _error(
        400, "'url': attempt to access JSON non-string as string"
    ),
    "sagemaker_multi_model_crashes/load_name_not_string": _error(
        400, "'model_name': attempt to access JSON non-string as string"
    ),
    # the reference aborts on the empty model name it then loads
    "sagemaker_multi_model_crashes/load_no_name": _error(
        400, "a multi-model load needs 'model_name' (the model's hash)"
    ),
    # the reference answers ``failed to register '', repository not found``: inferd reads no folder
    # outside --sagemaker-models-root, an empty url included
    "sagemaker_multi_model/load_no_url": _error(
        400,
        "failed to register '': a multi-model load reads only folders under '{models_root}' "
        "(<root>/<hash>/model[/<subfolder>])",
    ),
    "sagemaker_multi_model_crashes/load_json_array": _error(
        400, "a multi-model load needs 'model_name' (the model's hash)"
    ),
    # the reference aborts when the hash names no model (the target header named it at load):
    # inferd unloads the model the hash's load registered
    "sagemaker_multi_model/delete_target_without_header": {
        "status": 200,
        "content_type": "text/plain",
        "headers": {},
        "body": {"text": ""},
    },
}
#: "scenario/case" -> (recorded text, inferd's): a load failure's reason names the model, not its folder
#: (engine/repository_manager.py ``without_paths``: clients learn nothing of the server's file system)
HIDDEN_PATHS = {
    "sagemaker_multi_model/load_init_fails": ("{models_root}/h4initfails/model/init_fails", "h4initfails"),
    "sagemaker_multi_model/load_init_fails_again": (
        "{models_root}/h4initfails/model/init_fails",
        "h4initfails",
    ),
    "sagemaker_multi_model/load_oom_init": ("{models_root}/h5oominit/model/oom_init", "h5oominit"),
    "sagemaker_multi_model/invoke_oom_execute": ("{models_root}/h6oomexec/model/oom_execute", "h6oomexec"),
    "sagemaker_multi_model/invoke_raises": ("{models_root}/h7raises/model/raise_error", "h7raises"),
}
#: cases compared loosely, and why
LOOSE = {
    # the reference answers an unload before the model is gone (its index then says UNLOADING);
    # inferd, as its HTTP API does, once it is: UNAVAILABLE, "unloaded"
    "vertex/redirect_index_after_unload",
}


#: an ensemble's outputs come in the order the reference's steps happened to finish: compared by name
ANY_OUTPUT_ORDER = {"sagemaker_multi_model/invoke_ensemble"}


def _fill(value: Any, values: dict[str, str]) -> Any:
    return json.loads(rec.fill(json.dumps(value), values))


class _Scenario(InferdProcess):
    """inferd started as a scenario's reference was: live once its service's port answers."""

    def __init__(self, sc: dict[str, Any], tmp: Path) -> None:
        self.sc = sc
        self.repo = tmp / "models"
        rec.build_repository(self.repo, sc["models"])
        self.models_root = tmp / "opt-ml-models"
        self.models_root.mkdir()
        if sc["id"].startswith("sagemaker_multi_model"):
            rec.lay_out_archives(self.models_root)
        self.ports: dict[str, str] = {}
        super().__init__(self.repo, tmp / "inferd.log", command=self._command)

    def values(self) -> dict[str, str]:
        return {**self.ports, "repo": str(self.repo), "models_root": str(self.models_root)}

    def _command(self, http: int, grpc: int, metrics: int) -> list[str]:
        # the scenarios name their ports (in flags, a safe port range, the reference's texts): fixed
        # ones, as the recording had, not the port 0 given
        http, grpc, metrics = free_port(), free_port(), free_port()
        self.ports = {
            "http_port": str(http),
            "grpc_port": str(grpc),
            "metrics_port": str(metrics),
            "sagemaker_port": str(free_port()),
            "vertex_port": str(free_port()),
        }
        values = self.values()
        # (read by InferdProcess.start once the command is made)
        self.env = {k: rec.fill(v, values) for k, v in self.sc["env"].items()}
        cmd = ["serve", f"--http-port={http}", f"--grpc-port={grpc}", f"--metrics-port={metrics}"]
        if self.sc["repository"]:
            cmd.append(f"--model-repository={self.repo}")
        cmd += [rec.fill(f, values) for f in self.sc["flags"]]
        return [*cmd, f"--sagemaker-models-root={self.models_root}"]

    def _wait_live(self) -> bool:
        if self.sc["service"] is None:  # it must not start: wait for its exit
            return self.wait_starting(lambda: False)
        port = int(self.ports[f"{self.sc['service']}_port"])

        def listening() -> bool:
            self.read_ports()  # HTTP, gRPC and metrics (port 0), where they are served
            with socket.socket() as s:
                return s.connect_ex(("127.0.0.1", port)) == 0 and "ready in" in self.log()

        return self.wait_starting(listening)


@contextlib.contextmanager
def _serving(sc: dict[str, Any], tmp: Path) -> Iterator[_Scenario]:
    proc = _Scenario(sc, tmp)
    proc.start()
    try:
        yield proc
    finally:
        code = proc.stop()
        assert code == 0, f"inferd exited with {code}; log:\n{proc.log()[-4000:]}"


def _expected(sc_id: str, case: dict[str, Any], values: dict[str, str]) -> dict[str, Any]:
    key = f"{sc_id}/{case['id']}"
    want = DIFFERENCES.get(key, case["answer"])
    if key in HIDDEN_PATHS:
        recorded, inferd = HIDDEN_PATHS[key]
        want = json.loads(json.dumps(want).replace(recorded, inferd))
    # a model's file is named from the repository's root in what clients read (no server path)
    want = json.loads(json.dumps(want).replace("{repo}/", ""))
    return dict(_fill(want, values))


def _same_body(key: str, got: dict[str, Any], want: dict[str, Any]) -> None:
    if (
        "json" in want.get("body", {})
        and isinstance(want["body"]["json"], dict)
        and "models" in want["body"]["json"]
    ):
        # a multi-model list: the reference's order is its hash map's
        order: Callable[[Any], str] = json.dumps
        assert sorted(got["body"]["json"]["models"], key=order) == sorted(
            want["body"]["json"]["models"], key=order
        )
        return
    if key in ANY_OUTPUT_ORDER:
        for doc in (got["body"]["json"], want["body"]["json"]):
            doc["outputs"].sort(key=lambda o: o["name"])
    assert got["body"] == want["body"], key


@pytest.mark.parametrize("sc", RUNNING, ids=[sc["id"] for sc in RUNNING])
def test_clouds_reference(sc: dict[str, Any], tmp_path: Path) -> None:
    with _serving(sc, tmp_path) as proc:
        values = proc.values()
        for case in sc["cases"]:
            key = f"{sc['id']}/{case['id']}"
            want = _expected(sc["id"], case, values)
            got = rec.send(case, proc.ports, values)
            if want.get("refused"):
                assert got == {"refused": True}, key
                continue
            assert not got.get("crashed") and not got.get("refused"), (key, proc.log()[-3000:])
            assert (got["status"], got["content_type"]) == (want["status"], want["content_type"]), (key, got)
            assert got["headers"] == want["headers"], key
            if key in LOOSE or case["compare"] == "head":
                continue
            _same_body(key, got, want)


@pytest.mark.parametrize("sc", REFUSED, ids=[sc["id"] for sc in REFUSED])
def test_clouds_reference_refused_start(sc: dict[str, Any], tmp_path: Path) -> None:
    """inferd refuses to start where the reference did, saying the reference's reason."""
    proc = _Scenario(sc, tmp_path)
    with pytest.raises(RuntimeError, match="did not become live") as e:
        proc.start()
    reason = sc["start"]["errors"][-1]
    text = str(e.value)
    for key, value in proc.values().items():
        reason = reason.replace("{" + key + "}", value)
    assert reason in text, text[-3000:]
