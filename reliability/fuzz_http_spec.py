"""The inputs of the HTTP fuzz's request generation: inferd's OpenAPI description (its operations,
and JSON Schema turned into Hypothesis strategies), the models the fuzz aims at and their metadata
as the server describes them, and the JSON values drawn where anything goes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import strategies as st

from reliability.common import Server

SPEC = Path(__file__).resolve().parents[1] / "src" / "inferd" / "frontends" / "http" / "openapi.json"
#: models the fuzz aims its requests at: every one answers quickly whatever it is sent (the sleeping,
#: decoupled and parameter-driven models are left to the attacks)
FUZZ_MODELS = (
    "add_sub",
    "batched_sleep",
    "ensemble_add_sub",
    "identity_bytes",
    "identity_fp32",
    "mul_fp32",
    "identity_types",
    "classifier",
    "echo_request",
    "gen_echo",
    "gen_echo_b",
    "error_invalid_arg",
    "error_unavailable",
    "raise_error",
    "versions_all",
    "versions_specific",
)
NUMPY = {
    "BOOL": np.bool_,
    "UINT8": np.uint8,
    "UINT16": np.uint16,
    "UINT32": np.uint32,
    "UINT64": np.uint64,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "FP16": np.float16,
    "FP32": np.float32,
    "FP64": np.float64,
    "BF16": np.uint16,
}
#: short text of any valid UTF-8 (no surrogates), for names and values the fuzz makes up
SAFE_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | SAFE_TEXT,
    lambda c: st.lists(c, max_size=4) | st.dictionaries(SAFE_TEXT, c, max_size=4),
    max_leaves=12,
)


@dataclass
class TensorMeta:
    name: str
    datatype: str
    shape: list[int]


@dataclass
class ModelMeta:
    name: str
    inputs: list[TensorMeta]
    outputs: list[TensorMeta]
    max_batch: int


def model_metadata(server: Server, names: tuple[str, ...] = FUZZ_MODELS) -> dict[str, ModelMeta]:
    """The fuzzed models' inputs and outputs as the server describes them (the ready ones)."""
    out = {}
    for name in names:
        status, body = server.get(f"/v2/models/{name}")
        if status != 200:
            out[name] = ModelMeta(name, [TensorMeta("INPUT0", "FP32", [-1])], [], 0)  # e.g. init_fails
            continue
        meta = json.loads(body)
        _, cbody = server.get(f"/v2/models/{name}/config")
        max_batch = int(json.loads(cbody).get("max_batch_size", 0)) if cbody else 0
        out[name] = ModelMeta(
            name,
            [TensorMeta(t["name"], t["datatype"], t["shape"]) for t in meta["inputs"]],
            [TensorMeta(t["name"], t["datatype"], t["shape"]) for t in meta["outputs"]],
            max_batch,
        )
    return out


@dataclass
class Operation:
    method: str
    template: str
    body_schema: dict[str, Any] | None
    content_type: str


def operations(spec: dict[str, Any]) -> list[Operation]:
    ops = []
    for template, item in spec["paths"].items():
        for method, op in item.items():
            body = op.get("requestBody", {}).get("content", {})
            ctype = "application/json" if "application/json" in body else ""
            schema = body.get("application/json", {}).get("schema")
            ops.append(Operation(method.upper(), template, schema, ctype))
    return ops


class SchemaStrategies:
    """JSON Schema (the OpenAPI subset inferd's document uses) -> Hypothesis strategies, with real
    model, input and output names mixed into the strings where the schema names one."""

    def __init__(self, spec: dict[str, Any], names: list[str]) -> None:
        self.spec = spec
        self.names = names
        self._cache: dict[str, st.SearchStrategy[Any]] = {}

    def resolve(self, schema: dict[str, Any]) -> dict[str, Any]:
        while "$ref" in schema:
            node: Any = self.spec
            for part in schema["$ref"].removeprefix("#/").split("/"):
                node = node[part]
            schema = node
        return schema

    def of(self, schema: dict[str, Any] | None, key: str = "") -> st.SearchStrategy[Any]:
        if schema is None:
            return JSON
        if "$ref" in schema:
            ref = schema["$ref"]
            if ref not in self._cache:
                self._cache[ref] = st.deferred(lambda: self.of(self.resolve(schema), key))
            return self._cache[ref]
        if "enum" in schema:
            return st.sampled_from(schema["enum"])
        for combo in ("oneOf", "anyOf"):
            if combo in schema:
                return st.one_of([self.of(s, key) for s in schema[combo]])
        t = schema.get("type")
        if t == "object":
            props = schema.get("properties", {})
            required = set(schema.get("required", []))
            fixed = {k: self.of(v, k) for k, v in props.items() if k in required}
            optional = {k: self.of(v, k) for k, v in props.items() if k not in required}
            base = st.fixed_dictionaries(fixed, optional=optional)
            extra = schema.get("additionalProperties")
            if extra:
                values = self.of(extra if isinstance(extra, dict) else None)
                more = st.dictionaries(SAFE_TEXT | st.sampled_from(self.names), values, max_size=3)
                return st.builds(lambda a, b: {**b, **a}, base, more)
            return base
        if t == "array":
            items = schema.get("items")
            return st.lists(self.of(items if items else None), min_size=schema.get("minItems", 0), max_size=6)
        if t == "string":
            if schema.get("format") == "byte":
                return st.binary(max_size=32).map(lambda b: __import__("base64").b64encode(b).decode())
            if key in ("name", "key", "shared_memory_region"):
                return st.sampled_from(self.names) | SAFE_TEXT
            return SAFE_TEXT
        if t == "integer":
            lo = schema.get("minimum", -(2**64))
            return st.integers(min_value=lo, max_value=schema.get("maximum", 2**64))
        if t == "number":
            return st.floats(allow_nan=False, allow_infinity=False) | st.integers(-(2**31), 2**31)
        if t == "boolean":
            return st.booleans()
        return JSON
