"""Python-backend behaviours end to end, with the test-only models of tests/fixtures/models."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import InferdProcess

pytestmark = pytest.mark.timeout(60)

F32 = {"inputs": [{"name": "INPUT0", "shape": [2], "datatype": "FP32", "data": [1, 2]}]}


def _one_int(name: str = "INPUT0", value: int = 1) -> dict[str, Any]:
    return {"inputs": [{"name": name, "shape": [1], "datatype": "INT32", "data": [value]}]}


def test_execute_raises(server: InferdProcess, model_repository: Path) -> None:
    r = server.infer("raise_error", F32)
    assert (r.status, r.content_type) == (500, "text/plain")
    assert r.error == (
        "Failed to process the request(s) for model 'raise_error_0', message: ValueError: boom: bad input\n\n"
        "At:\n  raise_error/1/model.py(4): execute\n"  # from the repository's root: no server path
    )
    assert str(model_repository) not in r.error
    server.assert_serving()


@pytest.mark.parametrize(
    ("model", "status", "message"),
    [
        ("error_invalid_arg", 400, "invalid_arg: model says no"),
        ("error_unavailable", 503, "unavailable: model says no"),
    ],
)
def test_triton_error_response(server: InferdProcess, model: str, status: int, message: str) -> None:
    r = server.infer(model, F32)
    assert (r.status, r.content_type, r.body) == (
        status,
        "text/plain",
        b'{"error":"' + message.encode() + b'"}',
    )
    server.assert_serving()


def test_decoupled_model_refused_over_http(server: InferdProcess) -> None:
    r = server.infer("decoupled", _one_int(value=3))
    assert (r.status, r.content_type, r.error) == (
        501,
        "text/plain",
        "HTTP end point doesn't support models with decoupled transaction policy",
    )
    assert server.request("GET", "/v2/models/decoupled/ready").status == 200
    cfg = server.request("GET", "/v2/models/decoupled/config").json()
    assert cfg["model_transaction_policy"] == {"decoupled": True}


def test_request_as_the_model_sees_it(server: InferdProcess) -> None:
    doc = {
        "id": "abc-1",
        "parameters": {"foo": "bar", "n": 3, "f": 1.5, "b": True, "priority": 0, "binary_data_output": False},
        **_one_int(),
        "outputs": [{"name": "REQUEST_ID"}, {"name": "PARAMETERS"}, {"name": "OUTPUT_NAMES"}],
    }
    r = server.infer("echo_request", doc)
    assert r.status == 200, r.body
    out = {o["name"]: o["data"][0] for o in r.json()["outputs"]}
    assert r.json()["id"] == "abc-1"
    assert out["REQUEST_ID"] == "abc-1"
    # reserved keys (priority, binary_data_output) are the server's; the rest reach the model in order
    assert out["PARAMETERS"] == '{"foo":"bar","n":3,"f":1.5,"b":true}'
    assert out["OUTPUT_NAMES"] == "OUTPUT_NAMES,PARAMETERS,REQUEST_ID"
    # no outputs listed: the model is told every output is wanted
    r = server.infer("echo_request", _one_int())
    out = {o["name"]: o["data"][0] for o in r.json()["outputs"]}
    assert out["OUTPUT_NAMES"] == "ARGS,OUTPUT_NAMES,PARAMETERS,REQUEST_ID"
    assert out["REQUEST_ID"] == "" and out["PARAMETERS"] == "{}"


def test_initialize_args(server: InferdProcess, model_repository: Path) -> None:
    r = server.infer("echo_request", {**_one_int(), "outputs": [{"name": "ARGS"}]})
    args = json.loads(r.json()["outputs"][0]["data"][0])
    config = server.request("GET", "/v2/models/echo_request/config")
    assert args == {
        "model_config": config.body.decode(),  # the /config JSON, compact, as the reference passes it
        "model_instance_device_id": "0",
        "model_instance_kind": "CPU",
        "model_instance_name": "echo_request_0",
        "model_name": "echo_request",
        "model_repository": str(model_repository / "echo_request"),
        "model_version": "1",
    }
    assert json.loads(args["model_config"])["parameters"] == {"greeting": {"string_value": "hello"}}


def test_auto_complete_config(server: InferdProcess) -> None:
    cfg = server.request("GET", "/v2/models/autocomplete/config").json()
    assert cfg["max_batch_size"] == 4
    assert [(i["name"], i["data_type"], i["dims"]) for i in cfg["input"]] == [("INPUT0", "TYPE_INT32", [3])]
    assert [(o["name"], o["data_type"], o["dims"]) for o in cfg["output"]] == [("OUTPUT0", "TYPE_INT32", [3])]
    assert cfg["dynamic_batching"]["preferred_batch_size"] == [4]
    assert cfg["instance_group"][0]["name"] == "autocomplete"
    doc = {"inputs": [{"name": "INPUT0", "shape": [2, 3], "datatype": "INT32", "data": [1, 2, 3, 4, 5, 6]}]}
    r = server.infer("autocomplete", doc)
    assert r.json()["outputs"][0] == {
        "name": "OUTPUT0",
        "datatype": "INT32",
        "shape": [2, 3],
        "data": [2, 4, 6, 8, 10, 12],
    }


def test_model_without_config_or_auto_complete(server: InferdProcess) -> None:
    """The reference loads a Python model with neither: no inputs, no outputs, max_batch_size 0."""
    meta = server.request("GET", "/v2/models/no_config")
    assert (meta.status, meta.body) == (
        200,
        b'{"name":"no_config","versions":["1"],"platform":"python","inputs":[],"outputs":[]}',
    )
    r = server.infer("no_config", {"inputs": []})
    assert (r.status, r.body) == (200, b'{"model_name":"no_config","model_version":"1","outputs":[]}')


def test_failed_initialize_is_unavailable_with_its_reason(
    server: InferdProcess, model_repository: Path
) -> None:
    index = server.request("POST", "/v2/repository/index").json()
    (entry,) = [e for e in index if e["name"] == "init_fails"]
    assert entry == {
        "name": "init_fails",
        "version": "1",
        "state": "UNAVAILABLE",
        # the reference's traceback names the file from the repository's root: clients learn no path
        "reason": "Internal: RuntimeError: init exploded on purpose\n\nAt:\n  init_fails/1/model.py(4): initialize\n",
    }
    assert f"{model_repository}/init_fails/1/model.py(4)" in server.log()  # the operator's log has it
    r = server.infer("init_fails", F32)
    assert (r.status, r.error) == (404, "Request for unknown model: 'init_fails' has no available versions")
    assert server.request("GET", "/v2/models/init_fails/ready").status == 400
    # while the other models serve (no_config has a test of its own)
    ready = [e for e in index if e["state"] == "READY"]
    assert {e["name"] for e in index} - {e["name"] for e in ready} - {"no_config"} == {"init_fails"}
    assert server.request("POST", "/v2/repository/index", {"ready": True}).json() == ready


def test_versions(server: InferdProcess) -> None:
    meta = server.request("GET", "/v2/models/versions_all").json()
    assert meta["versions"] == ["1", "2"]
    for path, want in [("versions_all", 2), ("versions_all/versions/1", 1), ("versions_all/versions/2", 2)]:
        r = server.infer(path, _one_int())
        assert r.json()["outputs"][0]["data"] == [want]
        assert r.json()["model_version"] == str(want)
    assert server.request("GET", "/v2/models/versions_specific").json()["versions"] == ["1"]
    r = server.infer("versions_specific/versions/2", _one_int())
    assert (r.status, r.error) == (
        404,
        "Request for unknown model: 'versions_specific' version 2 is not found",
    )
    index = server.request("POST", "/v2/repository/index").json()
    assert [e for e in index if e["name"].startswith("versions_")] == [
        {"name": "versions_all", "version": "1", "state": "READY"},
        {"name": "versions_all", "version": "2", "state": "READY"},
        {"name": "versions_specific", "version": "1", "state": "READY"},
    ]


def test_ensemble(server: InferdProcess) -> None:
    a = list(range(16))
    doc = {
        "inputs": [
            {"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": a},
            {"name": "INPUT1", "shape": [1, 16], "datatype": "FP32", "data": [1] * 16},
        ]
    }
    r = server.infer("ensemble_add_sub", doc)
    assert r.status == 200, r.body
    out = {o["name"]: o["data"] for o in r.json()["outputs"]}
    assert out["OUTPUT0"] == [float((x + 1) * (x - 1)) for x in a]
    assert out["OUTPUT1"] == [float(x - 1) for x in a]
