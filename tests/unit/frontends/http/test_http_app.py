"""HttpApp over a fake core: routes, the one error mapping and its content types per phase, what
reaches the core (name, version, the decoupled policy, the validation key), cancellation."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import numpy as np
import pytest
from http_wire import Client, request
from tritonclient.http import InferenceServerClient, InferInput

from inferd.core.response import InferResponse
from inferd.errors import InvalidArgumentError
from inferd.frontends.access import AccessPolicy, Category, parse_restrictions
from inferd.frontends.http.app import HttpApp, _infer_target
from inferd.frontends.http.routes import MODEL_RE

JSON_BODY = json.dumps(
    {"id": "r1", "inputs": [{"name": "INPUT0", "shape": [2], "datatype": "FP32", "data": [1, 2]}]}
).encode()


def run_app(core: Any, *raw: bytes) -> list[tuple[int, str, bytes]]:
    async def main() -> list[tuple[int, str, bytes]]:
        client = Client(HttpApp(core))
        for r in raw:
            client.send(r)
        return [(a.status, a.headers.get("content-type", ""), a.body) for a in await client.answers()]

    return asyncio.run(main())


def test_health_and_metadata(core: Any) -> None:
    answers = run_app(core, request("GET", "/v2/health/live"), request("GET", "/v2"))
    assert answers[0][:2] == (200, "text/plain")
    assert answers[1][0] == 200 and json.loads(answers[1][2])["name"] == "fake"
    core.is_ready = False
    assert run_app(core, request("GET", "/v2/health/ready"))[0][0] == 400


def test_json_infer_reaches_the_core_once_and_is_encoded(core: Any) -> None:
    [(status, ctype, body)] = run_app(core, request("POST", "/v2/models/identity_fp32/infer", JSON_BODY))
    assert (status, ctype) == (200, "application/json")
    doc = json.loads(body)
    assert (
        doc["id"] == "r1" and doc["outputs"][0]["name"] == "OUTPUT0" and doc["outputs"][0]["data"] == [1, 2]
    )
    assert core.calls == [
        ("identity_fp32", "", "HTTP end point doesn't support models with decoupled transaction policy")
    ]


def test_version_in_the_path_reaches_the_core_parsed(core: Any) -> None:
    run_app(core, request("POST", "/v2/models/identity_fp32/versions/01/infer", JSON_BODY))
    assert core.calls[0][1] == "1"
    [(status, ctype, body)] = run_app(
        core, request("POST", "/v2/models/identity_fp32/versions/99999999999999999999/infer", JSON_BODY)
    )
    assert (status, ctype) == (400, "text/plain")
    assert b"failed to get model version from specified version string" in body


def test_errors_before_the_body_is_read_are_text(core: Any) -> None:
    [(status, ctype, body)] = run_app(core, request("POST", "/v2/models/nope/infer", b"not json"))
    assert (status, ctype) == (404, "text/plain")
    assert json.loads(body) == {"error": "Request for unknown model: 'nope' is not found"}
    [(status, ctype, body)] = run_app(core, request("POST", "/v2/models/repeat/infer", JSON_BODY))
    assert (status, ctype) == (501, "text/plain")
    assert b"decoupled transaction policy" in body


def test_errors_of_decoding_and_validation_are_json(core: Any) -> None:
    [(status, ctype, body)] = run_app(core, request("POST", "/v2/models/identity_fp32/infer", b"{"))
    assert (status, ctype) == (500, "application/json")
    assert json.loads(body)["error"].startswith("failed to parse the request JSON buffer")
    wrong = JSON_BODY.replace(b'"FP32"', b'"INT32"')
    [(status, ctype, body)] = run_app(core, request("POST", "/v2/models/identity_fp32/infer", wrong))
    assert (status, ctype) == (400, "application/json")
    assert b"data-type is 'INT32'" in body
    assert len(core.requests) == 0  # nothing was queued


def test_a_model_error_is_text_after_the_model_ran(core: Any) -> None:
    core.answer = lambda r: InferResponse(
        r.model_name, "1", r.id, error=InvalidArgumentError("model says no")
    )
    [(status, ctype, body)] = run_app(core, request("POST", "/v2/models/identity_fp32/infer", JSON_BODY))
    assert (status, ctype, json.loads(body)) == (400, "text/plain", {"error": "model says no"})


def test_binary_requests_carry_their_header_as_validation_key(core: Any) -> None:
    inp = InferInput("INPUT0", [2], "FP32")
    inp.set_data_from_numpy(np.array([1, 2], np.float32))
    body, hl = InferenceServerClient.generate_request_body([inp])
    head = {"Inference-Header-Content-Length": str(hl)}
    raw = request("POST", "/v2/models/identity_fp32/infer", body, head)
    answers = run_app(core, raw, raw)
    assert [a[0] for a in answers] == [200, 200]
    keys = [r.validation_key for r in core.requests]
    assert keys[0] == keys[1] == body[:hl]


def test_classification_output_request_reaches_the_core(core: Any) -> None:
    doc = {
        "inputs": [{"name": "INPUT0", "shape": [3], "datatype": "FP32", "data": [1, 3, 2]}],
        "outputs": [{"name": "OUTPUT0", "parameters": {"classification": 2}}],
    }
    run_app(core, request("POST", "/v2/models/scores/infer", json.dumps(doc).encode()))
    [req] = core.requests
    assert req.outputs is not None and req.outputs[0].classification == 2


def test_a_client_that_goes_away_cancels_its_request(core: Any) -> None:
    core.hold = True

    async def main() -> None:
        client = Client(HttpApp(core))
        client.send(request("POST", "/v2/models/identity_fp32/infer", JSON_BODY))
        await asyncio.sleep(0)
        [stream] = core.streams
        assert not stream.cancelled
        client.conn.connection_lost(None)
        assert stream.cancelled and stream.cancel_reason == "the client closed the connection"

    asyncio.run(main())


def test_pipelined_answers_keep_request_order(core: Any) -> None:
    core.hold = True

    async def main() -> None:
        client = Client(HttpApp(core))
        for rid in ("a", "b"):
            body = JSON_BODY.replace(b'"r1"', f'"{rid}"'.encode())
            client.send(request("POST", "/v2/models/identity_fp32/infer", body))
        await asyncio.sleep(0)
        first, second = core.streams
        second.send(InferResponse("identity_fp32", "1", "b"), True)
        assert await client.answers() == []  # b waits for a
        first.send(InferResponse("identity_fp32", "1", "a"), True)
        ids = [json.loads(a.body)["id"] for a in await client.answers()]
        assert ids == ["a", "b"]

    asyncio.run(main())


def test_generate_goes_through_the_same_core_call(core: Any) -> None:
    [(status, ctype, body)] = run_app(
        core, request("POST", "/v2/models/identity_fp32/generate", b'{"INPUT0": [1.5], "x": 1}')
    )
    assert (status, ctype) == (200, "application/json")
    assert json.loads(body)["OUTPUT0"] == 1.5
    assert core.calls == [("identity_fp32", "", None)]  # generate takes decoupled models
    assert core.requests[0].parameters == {"x": 1}
    [(status, _, body)] = run_app(core, request("POST", "/v2/models/nope/generate", b"{}"))
    assert status == 404 and json.loads(body)["error"].startswith("Request for unknown model")


def test_unknown_routes_and_methods(core: Any) -> None:
    answers = run_app(
        core,
        request("GET", "/v2/nothing"),
        request("GET", "/v2/models/identity_fp32/infer"),
        request("PUT", "/v2/health/live"),
    )
    assert [a[0] for a in answers] == [404, 405, 405]


# -- access control (tests/unit/frontends/test_access.py has the policy itself) ----------------------
def run_http(app: HttpApp, *raw: bytes) -> list[tuple[int, str, Any, dict[str, str]]]:
    async def main() -> list[tuple[int, str, Any, dict[str, str]]]:
        c = Client(app)
        for r in raw:
            c.send(r)
        return [
            (a.status, a.headers.get("content-type", ""), json.loads(a.body) if a.body else None, a.headers)
            for a in await c.answers()
        ]

    return asyncio.run(main())


def test_http_answers(core: Any) -> None:
    restricted = HttpApp(
        core, access=AccessPolicy(parse_restrictions(["metadata:X-Key=v"], "http-restricted-api"))
    )
    [(status, ctype, body, _)] = run_http(restricted, request("GET", "/v2"))
    assert (status, ctype, body) == (
        403,
        "text/plain",
        {"error": "This API is restricted, expecting header 'x-key'"},
    )
    assert run_http(restricted, request("GET", "/v2", headers={"X-Key": "v"}))[0][0] == 200
    keyed = HttpApp(
        core, access=AccessPolicy({}, {"k": frozenset({Category.METADATA})}, frozenset({Category.HEALTH}))
    )
    answers = run_http(
        keyed,
        request("GET", "/v2"),
        request("GET", "/v2", headers={"Authorization": "Bearer k"}),
        request("GET", "/v2/models/identity_fp32/config", headers={"Authorization": "Bearer k"}),
        request("GET", "/v2/health/ready"),
        request("GET", "/v2/nothing"),
    )
    assert [a[0] for a in answers] == [401, 200, 403, 200, 404]
    assert answers[0][3]["www-authenticate"].startswith("Bearer")
    assert answers[2][2] == {"error": "the API key does not grant the 'model-config' APIs"}


@pytest.mark.parametrize(
    "path",
    [
        "/v2/models/add_sub/infer",
        "/v2/models/a/versions/12/infer",
        "/v2/models/versions/infer",
        "/v2/models//infer",
        "/v2/models/infer",
        "/v2/models/a/versions//infer",
        "/v2/models/a/versions/1x/infer",
        "/v2/models/a/versions/\u0661/infer",  # a digit, not an ASCII one: [0-9] does not take it
        "/v2/models/a/b/infer",
        "/v2/models/a/versions/1/2/infer",
        "/v2/models/a/infer\n",
        "/v2/models/a/ready",
        "/v2/models/a/versions/1/infer/",
    ],
)
def test_the_plain_infer_route_reads_as_the_model_route_regex(path: str) -> None:
    """The /infer fast path takes a subset of what MODEL_RE takes as infer, with the same groups."""
    target = _infer_target(path)
    m = MODEL_RE.match(path)
    if target is not None:
        assert m is not None and m.group(3) == "infer"
        assert target == (m.group(1), m.group(2) or "")
    elif path in ("/v2/models/add_sub/infer", "/v2/models/a/versions/12/infer"):
        pytest.fail(f"{path} missed the fast path")
