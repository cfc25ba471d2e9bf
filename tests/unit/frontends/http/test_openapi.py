"""/v2/openapi.json: a valid OpenAPI 3 document that describes every route HttpApp answers.

The app is driven in memory (``http_wire``) over the fake core; a route counts as answered when its
answer is anything but the router's own ``{"error":"Not Found"}``.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest
from http_wire import Answer, Client, request
from hypothesis import given
from hypothesis import strategies as st

from inferd.frontends.http.app import HttpApp

SPEC_PATH = Path(__file__).resolve().parents[4] / "src" / "inferd" / "frontends" / "http" / "openapi.json"
METHODS = ("get", "post", "put", "delete", "patch", "head", "options")
ROUTER_NOT_FOUND = b'{"error":"Not Found"}'


def spec() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(SPEC_PATH.read_text())
    return doc


def templates() -> list[tuple[re.Pattern[str], str, set[str]]]:
    """(regex, template, methods) of every path of the document."""
    out = []
    for template, item in spec()["paths"].items():
        rx = re.compile("^" + re.sub(r"\\\{[a-z_]+\\\}", "[^/]+", re.escape(template)) + "$")
        out.append((rx, template, {m for m in item if m in METHODS}))
    return out


def described(method: str, path: str) -> str | None:
    """The template that describes ``method path``, or None."""
    for rx, template, methods in templates():
        if rx.match(path) and method.lower() in methods:
            return template
    return None


def path_described(path: str) -> bool:
    return any(rx.match(path) for rx, _, _ in templates())


def answers(core: Any, *raw: bytes) -> list[Answer]:
    async def main() -> list[Answer]:
        client = Client(HttpApp(core))
        for r in raw:
            client.send(r)
        return await client.answers(10)

    return asyncio.run(main())


def resolve(doc: dict[str, Any], ref: str) -> Any:
    node: Any = doc
    for part in ref.removeprefix("#/").split("/"):
        node = node[part]
    return node


def refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return found + [r for v in node.values() for r in refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in refs(v)]
    return []


# -- the document ---------------------------------------------------------------------------------
def test_the_document_is_openapi_3_and_hangs_together() -> None:
    doc = spec()
    assert doc["openapi"].startswith("3.") and doc["info"]["title"]
    for ref in refs(doc):
        assert ref.startswith("#/"), ref
        resolve(doc, ref)  # raises KeyError when dangling
    for template, item in doc["paths"].items():
        names = set(re.findall(r"\{([a-z_]+)\}", template))
        for method, op in item.items():
            assert method in METHODS, (template, method)
            assert op["operationId"] and op["responses"], (template, method)
            params = [resolve(doc, p["$ref"]) if "$ref" in p else p for p in op.get("parameters", [])]
            assert {p["name"] for p in params if p["in"] == "path"} == names, (template, method)
            for status, r in op["responses"].items():
                r = resolve(doc, r["$ref"]) if "$ref" in r else r
                assert status.isdigit() and r["description"], (template, method, status)
    error = doc["components"]["schemas"]["Error"]
    assert error["required"] == ["error"] and error["properties"]["error"]["type"] == "string"
    ids = [op["operationId"] for item in doc["paths"].values() for op in item.values()]
    assert len(ids) == len(set(ids))


def test_the_document_validates_as_openapi() -> None:
    validator = pytest.importorskip("openapi_spec_validator")
    validator.validate(spec())


def test_served_at_v2_openapi_json(core: Any) -> None:
    [a, b] = answers(core, request("GET", "/v2/openapi.json"), request("POST", "/v2/openapi.json"))
    assert a.status == 200 and a.headers["content-type"] == "application/json"
    assert json.loads(a.body) == spec()
    assert b.status == 405


# -- every route the app answers is described -----------------------------------------------------
#: one concrete request per operation of the document, by template
EXAMPLES = {
    "/v2": ["GET"],
    "/v2/openapi.json": ["GET"],
    "/v2/health/live": ["GET"],
    "/v2/health/ready": ["GET"],
    "/v2/logging": ["GET", "POST"],
    "/v2/models/stats": ["GET"],
    "/v2/models/{model}": ["GET"],
    "/v2/models/{model}/versions/{version}": ["GET"],
    "/v2/models/{model}/ready": ["GET"],
    "/v2/models/{model}/versions/{version}/ready": ["GET"],
    "/v2/models/{model}/config": ["GET"],
    "/v2/models/{model}/versions/{version}/config": ["GET"],
    "/v2/models/{model}/stats": ["GET"],
    "/v2/models/{model}/versions/{version}/stats": ["GET"],
    "/v2/models/{model}/infer": ["POST"],
    "/v2/models/{model}/versions/{version}/infer": ["POST"],
    "/v2/models/{model}/generate": ["POST"],
    "/v2/models/{model}/versions/{version}/generate": ["POST"],
    "/v2/models/{model}/generate_stream": ["POST"],
    "/v2/models/{model}/versions/{version}/generate_stream": ["POST"],
    "/v2/repository/index": ["POST"],
    "/v2/repository/models/{model}/load": ["POST"],
    "/v2/repository/models/{model}/unload": ["POST"],
    "/v2/repository/{repository}/index": ["POST"],
    "/v2/repository/{repository}/models/{model}/load": ["POST"],
    "/v2/repository/{repository}/models/{model}/unload": ["POST"],
    **{
        f"/v2/{kind}sharedmemory/{rest}": [method]
        for kind in ("system", "cuda")
        for rest, method in (
            ("status", "GET"),
            ("unregister", "POST"),
            ("region/{region}/status", "GET"),
            ("region/{region}/register", "POST"),
            ("region/{region}/unregister", "POST"),
        )
    },
}
VALUES = {"model": "identity_fp32", "version": "1", "region": "r0", "repository": "repo"}
BODIES = {
    "infer": b'{"inputs":[{"name":"INPUT0","shape":[1],"datatype":"FP32","data":[1]}]}',
    "generate": b'{"INPUT0":[1]}',
    "generate_stream": b'{"INPUT0":[1]}',
    "register": b'{"key":"/nonexistent","byte_size":4}',
}


def concrete(template: str) -> str:
    return re.sub(r"\{([a-z_]+)\}", lambda m: VALUES[m.group(1)], template)


def test_every_operation_has_an_example_and_every_example_is_answered(core: Any) -> None:
    doc = spec()
    operations = {(t, m.upper()) for t, item in doc["paths"].items() for m in item}
    assert operations == {(t, m) for t, methods in EXAMPLES.items() for m in methods}
    for template, methods in EXAMPLES.items():
        path = concrete(template)
        body = BODIES.get(path.rsplit("/", 1)[-1], b"")
        for method in methods:
            [a] = answers(core, request(method, path, body))
            assert a.body != ROUTER_NOT_FOUND and a.status != 405, (method, path, a)
            assert str(a.status) in doc["paths"][template][method.lower()]["responses"], (method, path, a)


SEGMENTS = st.sampled_from(
    [
        "v2",
        "models",
        "identity_fp32",
        "nope",
        "versions",
        "1",
        "x",
        "infer",
        "generate",
        "generate_stream",
        "ready",
        "live",
        "health",
        "config",
        "stats",
        "trace",
        "setting",
        "repository",
        "index",
        "load",
        "unload",
        "systemsharedmemory",
        "cudasharedmemory",
        "region",
        "status",
        "register",
        "unregister",
        "logging",
        "openapi.json",
        "",
    ]
)


@given(
    segments=st.lists(SEGMENTS, min_size=1, max_size=7),
    method=st.sampled_from(["GET", "POST", "PUT", "DELETE"]),
    v2_first=st.booleans(),
)
def test_any_path_the_app_answers_is_described(
    core: Any, segments: list[str], method: str, v2_first: bool
) -> None:
    path = "/" + "/".join((["v2"] if v2_first else []) + segments)
    [a] = answers(core, request(method, path, b"{}"))
    if a.body == ROUTER_NOT_FOUND:
        return  # no such route
    assert path_described(path), (method, path, a.status, a.body)
    if a.status != 405:
        assert described(method, path), (method, path, a.status, a.body)
