"""Every answer of the reference files, asked of inferd: status, content type and body.

- tests/fixtures/triton-2.51.0-protocol.txt: the real Triton 2.51's answers (the requests are
  rebuilt here from the case names; each was checked against the reference server);
- tests/fixtures/reference_probe.sh + reference_probe_answers.txt: more answers, taken with that
  curl script; it is run here case by case against inferd, with curl.
"""

from __future__ import annotations

import ast
import json
import re
import shlex
import subprocess
from dataclasses import dataclass
from typing import Any

import pytest
from conftest import REFERENCE_MODEL_NAMES, InferdProcess

from repo_paths import FIXTURES
from repo_paths import PROTOCOL as PROTOCOL_FILE

PROBE_SCRIPT = FIXTURES / "reference_probe.sh"
PROBE_ANSWERS = FIXTURES / "reference_probe_answers.txt"

pytestmark = pytest.mark.timeout(60)


# -- triton-2.51.0-protocol.txt ----------------------------------------------------------------
@dataclass(frozen=True)
class ProtocolCase:
    name: str
    method: str
    path: str
    status: int
    content_type: str
    body: str


def protocol_cases() -> dict[str, ProtocolCase]:
    text = PROTOCOL_FILE.read_text()
    pattern = re.compile(r"^HTTP (\S+): (\S+) (\S+) -> (\d+) (\S+)\n    (.*)$", re.MULTILINE)
    return {
        m.group(1): ProtocolCase(m.group(1), m.group(2), m.group(3), int(m.group(4)), m.group(5), m.group(6))
        for m in pattern.finditer(text)
    }


PROTOCOL = protocol_cases()

_ROW = list(range(16))
_ADD_SUB_OK = {
    "inputs": [
        {"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": _ROW},
        {"name": "INPUT1", "shape": [1, 16], "datatype": "FP32", "data": [1] * 16},
    ]
}


def _add_sub(input0: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    inputs = [
        dict({"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": _ROW}, **(input0 or {})),
        {"name": "INPUT1", "shape": [1, 16], "datatype": "FP32", "data": [1] * 16},
    ]
    return {"inputs": inputs, **extra}


_BINARY_HEAD = (
    b'{"inputs":[{"name":"INPUT0","shape":[2],"datatype":"FP32","parameters":{"binary_data_size":8}}]}'
)

#: the request behind each error case of the protocol file: (body, headers)
PROTOCOL_ERROR_REQUESTS: dict[str, tuple[bytes | dict[str, Any] | None, dict[str, str]]] = {
    "err_load_in_mode_none": (None, {}),
    "err_unknown_model": (_ADD_SUB_OK, {}),
    "err_unknown_version": (_ADD_SUB_OK, {}),
    "err_wrong_input_name": (_add_sub({"name": "INPUTX"}), {}),
    "err_missing_input": ({"inputs": [_ADD_SUB_OK["inputs"][0]]}, {}),
    "err_wrong_shape": (_add_sub({"shape": [1, 15], "data": _ROW[:15]}), {}),
    "err_shape_data_mismatch": (_add_sub({"data": _ROW[:15]}), {}),
    "err_wrong_datatype": (_add_sub({"datatype": "INT32"}), {}),
    "err_unknown_datatype": (_add_sub({"datatype": "FP33"}), {}),
    "err_batch_too_large": (
        {
            "inputs": [
                {"name": n, "shape": [65, 16], "datatype": "FP32", "data": [0.0] * (65 * 16)}
                for n in ("INPUT0", "INPUT1")
            ]
        },
        {},
    ),
    "err_unknown_output": (_add_sub(outputs=[{"name": "OUTPUTX"}]), {}),
    "err_malformed_json": (b'{"inputs": [}', {}),
    "err_empty_body": (b"", {}),
    "err_inputs_not_array": ({"inputs": {}}, {}),
    "err_rank_nobatch_model": (
        {"inputs": [{"name": "INPUT0", "shape": [2, 3], "datatype": "FP32", "data": [1, 2, 3, 4, 5, 6]}]},
        {},
    ),
    "err_binary_size_mismatch": (
        _BINARY_HEAD + b"\x00\x00\x80?",
        {"Inference-Header-Content-Length": str(len(_BINARY_HEAD))},
    ),
    "err_bad_header_length": (b'{"inputs": []}', {"Inference-Header-Content-Length": "999"}),
    "err_model_metadata_unknown": (None, {}),
    "err_model_ready_unknown": (None, {}),
    "err_model_config_unknown": (None, {}),
    "err_unknown_path": (None, {}),
    "err_get_on_infer": (None, {}),
}


def test_every_protocol_error_has_a_request() -> None:
    errors = {name for name, c in PROTOCOL.items() if c.status >= 400}
    assert errors, "no error cases parsed from the protocol file"
    assert errors == set(PROTOCOL_ERROR_REQUESTS)


@pytest.mark.parametrize("name", sorted(PROTOCOL_ERROR_REQUESTS))
def test_protocol_error(server: InferdProcess, name: str) -> None:
    case = PROTOCOL[name]
    body, headers = PROTOCOL_ERROR_REQUESTS[name]
    if case.method == "GET":
        body = None
    elif body is None:
        body = b""
    r = server.request(case.method, case.path, body, headers)
    assert (r.status, r.content_type, r.body.decode()) == (case.status, case.content_type, case.body)
    server.assert_serving()


def _json_line(name: str) -> Any:
    return json.loads(PROTOCOL[name].body)


def test_protocol_server_metadata(server: InferdProcess) -> None:
    ref = _json_line("server_metadata")
    r = server.request("GET", "/v2")
    assert (r.status, r.content_type) == (200, "application/json")
    doc = r.json()
    assert list(doc) == ["name", "version", "extensions"]
    assert (doc["name"], doc["version"]) == (ref["name"], ref["version"])
    # inferd implements every extension the reference lists, and lists them as it does
    assert doc["extensions"] == ref["extensions"]


@pytest.mark.parametrize("name", ["health_live", "model_ready"])
def test_protocol_health(server: InferdProcess, name: str) -> None:
    case = PROTOCOL[name]
    r = server.request(case.method, case.path)
    assert (r.status, r.content_type, r.body) == (case.status, case.content_type, b"")


@pytest.mark.parametrize("name", ["model_metadata", "model_metadata_ensemble"])
def test_protocol_model_metadata(server: InferdProcess, name: str) -> None:
    case = PROTOCOL[name]
    r = server.request(case.method, case.path)
    assert (r.status, r.content_type, r.body.decode()) == (case.status, case.content_type, case.body)


@pytest.mark.parametrize("model", REFERENCE_MODEL_NAMES)
def test_protocol_model_config(server: InferdProcess, model: str) -> None:
    case = PROTOCOL[f"model_config_{model}"]
    r = server.request("GET", f"/v2/models/{model}/config")
    assert (r.status, r.content_type) == (200, "application/json")
    assert r.json() == json.loads(case.body)
    # key order too (protobuf maps such as input_map print in no defined order)
    assert _key_order(r.json()) == _key_order(json.loads(case.body))


_PROTO_MAPS = {
    "input_map",
    "output_map",
    "parameters",
    "metric_tags",
    "cc_model_filenames",
    "priority_queue_policy",
}


def _key_order(doc: Any) -> Any:
    if isinstance(doc, dict):
        return [(k, None if k in _PROTO_MAPS else _key_order(v)) for k, v in doc.items()]
    if isinstance(doc, list):
        return [_key_order(v) for v in doc]
    return None


@pytest.mark.parametrize(
    "name",
    [
        "infer_ok_json",
        "infer_ok_json_one_output",
        "infer_ok_bytes_json",
        "infer_ok_version_path",
        "infer_ok_binary_in_out",
        "infer_ok_binary_output_default",
        "infer_ok_empty_id_outputs_reversed",
    ],
)
def test_protocol_infer_ok(server: InferdProcess, name: str) -> None:
    case = PROTOCOL[name]
    a = list(range(16))
    ones = [1.0] * 16
    inputs = [
        {"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": a},
        {"name": "INPUT1", "shape": [1, 16], "datatype": "FP32", "data": [0.0] * 16},
    ]
    headers: dict[str, str] = {}
    body: bytes | dict[str, Any]
    if name == "infer_ok_json":
        body = {"id": "req-42", "inputs": [inputs[0], dict(inputs[1], data=ones)]}
        expected_body = case.body
    elif name == "infer_ok_json_one_output":
        body = {"inputs": [inputs[0], dict(inputs[1], data=ones)], "outputs": [{"name": "OUTPUT1"}]}
        expected_body = case.body
    elif name == "infer_ok_bytes_json":
        body = {"inputs": [{"name": "INPUT0", "shape": [2], "datatype": "BYTES", "data": ["ab", "c"]}]}
        expected_body = case.body
    elif name == "infer_ok_version_path":
        body = {"inputs": [inputs[0], dict(inputs[1], data=ones)]}
        expected_body = case.body
    elif name == "infer_ok_empty_id_outputs_reversed":
        body = {
            "id": "",
            "inputs": [inputs[0], dict(inputs[1], data=ones)],
            "outputs": [{"name": "OUTPUT1"}, {"name": "OUTPUT0"}],
        }
        expected_body = case.body
    elif name == "infer_ok_binary_in_out":
        head = (
            b'{"inputs":[{"name":"INPUT0","shape":[2],"datatype":"FP32","parameters":{"binary_data_size":8}}],'
            b'"outputs":[{"name":"OUTPUT0","parameters":{"binary_data":true}}]}'
        )
        body = head + b"\x00\x00\xc0?\x00\x00\x00\xc0"
        headers = {"Inference-Header-Content-Length": str(len(head))}
        expected_body = case.body
    else:  # infer_ok_binary_output_default
        body = {"parameters": {"binary_data_output": True}, "inputs": [inputs[0], dict(inputs[1], data=ones)]}
        expected_body = case.body
    r = server.request(case.method, case.path, body, headers)
    assert (r.status, r.content_type) == (case.status, case.content_type)
    if expected_body.startswith("b'"):
        want = ast.literal_eval(expected_body)  # the file prints binary bodies as bytes literals
        assert r.body == want
        head_len = int(r.headers["inference-header-content-length"])
        sizes = [o["parameters"]["binary_data_size"] for o in json.loads(want[:head_len])["outputs"]]
        assert len(want) - head_len == sum(sizes)
    else:
        assert r.body.decode() == expected_body


def test_protocol_model_stats_shape(server: InferdProcess) -> None:
    """Same keys, in the same order, as the reference's statistics JSON (numbers differ)."""
    ref = _json_line("model_stats")
    server.infer("add_sub", _ADD_SUB_OK)
    r = server.request("GET", "/v2/models/add_sub/stats")
    assert (r.status, r.content_type) == (200, "application/json")
    doc = r.json()

    def keys(d: Any) -> Any:
        if isinstance(d, dict):
            return [(k, keys(v)) for k, v in d.items() if k not in ("batch_stats",)]
        if isinstance(d, list):
            return [keys(v) for v in d[:1]]
        return type(d).__name__

    assert keys(doc) == keys(ref)
    entry = doc["model_stats"][0]
    assert list(entry["batch_stats"][0]) == list(ref["model_stats"][0]["batch_stats"][0])


def test_protocol_repository_index_reference_models(server: InferdProcess) -> None:
    ref = _json_line("repository_index")
    r = server.request("POST", "/v2/repository/index")
    assert (r.status, r.content_type) == (200, "application/json")
    entries = {e["name"]: e for e in r.json()}
    for e in ref:
        assert entries[e["name"]] == e


# -- reference_probe.sh / reference_probe_answers.txt ----------------------------------------
def probe_cases() -> list[tuple[str, list[str]]]:
    cases = []
    for line in PROBE_SCRIPT.read_text().splitlines():
        if line.startswith("req "):
            words = shlex.split(line)
            cases.append((words[1], words[2:]))
    return cases


def probe_answers() -> dict[str, str]:
    text = PROBE_ANSWERS.read_text()
    out: dict[str, str] = {}
    for block in text.split("== ")[1:]:
        name, _, rest = block.partition("\n")
        out[name.strip()] = rest.rstrip("\n")
    return out


PROBE_CASES = probe_cases()
PROBE_ANSWERS_BY_NAME = probe_answers()


def test_every_probe_has_an_answer() -> None:
    assert [n for n, _ in PROBE_CASES] == list(PROBE_ANSWERS_BY_NAME)


@pytest.mark.parametrize(("name", "args"), PROBE_CASES, ids=[n for n, _ in PROBE_CASES])
def test_probe_answer(server: InferdProcess, name: str, args: list[str]) -> None:
    args = [a.replace("localhost:$P", f"127.0.0.1:{server.port}") for a in args]
    cmd = ["curl", "-s", "-w", " -> %{http_code} %{content_type}\n", *args]
    out = subprocess.run(cmd, capture_output=True, timeout=30, check=True).stdout.decode()
    expected = PROBE_ANSWERS_BY_NAME[name]
    if name == "head_live":
        # curl -I prints the headers: only the status and content type are compared
        assert out.rstrip("\n").splitlines()[-1] == expected.splitlines()[-1]
        assert out.startswith("HTTP/1.1 405 ")
    else:
        assert out.rstrip("\n") == expected
    server.assert_serving()
