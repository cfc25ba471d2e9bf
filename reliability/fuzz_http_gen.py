"""The HTTP fuzz's requests, drawn by Hypothesis (``RequestGen``) from the OpenAPI description and
the models' metadata (``fuzz_http_spec``).

Each request is one of these kinds: ``schema`` (a body valid for the operation's schema), ``model``
(an inference request shaped for a real model: its inputs, datatypes and shapes, with data of the
right or a wrong kind), ``binary`` (the binary tensor extension, with honest and dishonest
Inference-Header-Content-Length), ``mutated`` (a valid body with one value replaced by random JSON),
``json`` (any JSON), ``bytes`` (random bytes), ``encoding`` (gzip/deflate bodies, honest or not, and
unknown encodings and content types), ``method`` (any method on a route), ``path`` (odd path
parameters), ``headers`` (odd header fields) and ``garbage`` (bytes that are hardly HTTP, on a fresh
connection). All but ``garbage`` and dishonest ``headers`` are whole requests, so an answer is due.
"""

from __future__ import annotations

import gzip
import json
import random
import urllib.parse
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import strategies as st

from reliability.common import http_request
from reliability.fuzz_http_spec import (
    JSON,
    NUMPY,
    SAFE_TEXT,
    ModelMeta,
    Operation,
    SchemaStrategies,
    operations,
)

KINDS = {
    "schema": 18,
    "model": 20,
    "binary": 10,
    "mutated": 14,
    "json": 8,
    "bytes": 5,
    "encoding": 8,
    "method": 5,
    "path": 6,
    "headers": 4,
    "garbage": 2,
}
DATATYPES = ["BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "FP16", "FP32", "FP64", "BYTES", "BF16"]  # fmt: skip
METHODS = ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "TRACE", "FOO"]


@dataclass
class FuzzRequest:
    kind: str
    label: str  # the operation (method and template) or what was sent
    raw: bytes
    answer_due: bool = True


class RequestGen:
    """Draws one FuzzRequest from Hypothesis' ``data``."""

    def __init__(self, spec: dict[str, Any], models: dict[str, ModelMeta]) -> None:
        self.models = models
        self.ops = operations(spec)
        names = sorted(models) + sorted({t.name for m in models.values() for t in m.inputs + m.outputs})
        self.schemas = SchemaStrategies(spec, names)
        self.model_names = sorted(models)
        self.body_strategies = {
            (op.method, op.template): self.schemas.of(op.body_schema) for op in self.ops if op.body_schema
        }

    # -- pieces --------------------------------------------------------------------------------
    def path_value(self, data: st.DataObject, param: str, odd: bool) -> str:
        if param == "model":
            choices = st.sampled_from(self.model_names)
        elif param == "version":
            choices = st.sampled_from(["1", "2", "3", "0"])
        elif param == "region":
            choices = st.sampled_from(["r0", "region", "output0"])
        else:
            choices = st.sampled_from(["repo", "models"])
        if odd:
            choices = (
                st.text(max_size=40)
                | st.sampled_from(
                    ["..", ".", "%2e%2e", "%00", "a%2Fb", "x" * 3000, "99999999999999999999999"]
                )
                | st.from_regex(r"[0-9]{1,40}", fullmatch=True)
            )
        value: str = data.draw(choices)
        if odd and data.draw(st.booleans()):
            return value  # unquoted: the server must cope with what arrives
        return urllib.parse.quote(value, safe="")

    def path(self, data: st.DataObject, template: str, odd: bool = False) -> str:
        parts = []
        for seg in template.split("/"):
            if seg.startswith("{") and seg.endswith("}"):
                parts.append(self.path_value(data, seg[1:-1], odd))
            else:
                parts.append(seg)
        return "/".join(parts)

    def model_infer_doc(self, data: st.DataObject, model: ModelMeta) -> tuple[dict[str, Any], list[bytes]]:
        """An inference request for ``model``: its inputs, mostly the right datatypes and shapes;
        with ``binary`` chunks when some inputs went binary."""
        inputs = []
        chunks: list[bytes] = []
        metas = list(model.inputs)
        if data.draw(st.integers(0, 9)) == 0:
            metas = data.draw(st.lists(st.sampled_from(model.inputs), max_size=3)) if model.inputs else []
        use_binary = data.draw(st.integers(0, 3)) == 0
        for t in metas:
            shape = [d if d >= 0 else data.draw(st.integers(0, 4)) for d in t.shape]
            if model.max_batch > 0:
                shape = [data.draw(st.integers(0, model.max_batch + 1)), *shape]
            if data.draw(st.integers(0, 7)) == 0:
                shape = data.draw(st.lists(st.integers(0, 6), max_size=4))
            datatype = t.datatype if data.draw(st.integers(0, 7)) else data.draw(st.sampled_from(DATATYPES))
            count = int(np.prod(shape)) if shape else 1
            if data.draw(st.integers(0, 9)) == 0:
                count += data.draw(st.integers(-2, 2))
            count = max(0, min(count, 4096))
            name = t.name if data.draw(st.integers(0, 15)) else data.draw(SAFE_TEXT)
            item: dict[str, Any] = {"name": name, "shape": shape, "datatype": datatype}
            if use_binary:
                raw = self.binary_data(data, datatype, count)
                chunks.append(raw)
                item["parameters"] = {"binary_data_size": len(raw)}
            else:
                item["data"] = self.json_data(data, datatype, count)
            inputs.append(item)
        doc: dict[str, Any] = {"inputs": inputs}
        if data.draw(st.booleans()):
            doc["id"] = data.draw(SAFE_TEXT)
        if data.draw(st.integers(0, 3)) == 0 and model.outputs:
            outs = data.draw(st.lists(st.sampled_from(model.outputs), max_size=3))
            doc["outputs"] = [
                {
                    "name": o.name,
                    "parameters": data.draw(
                        st.fixed_dictionaries(
                            {}, optional={"binary_data": st.booleans(), "classification": st.integers(0, 5)}
                        )
                    ),
                }
                for o in outs
            ]
        if data.draw(st.integers(0, 4)) == 0:
            doc["parameters"] = data.draw(
                st.fixed_dictionaries(
                    {},
                    optional={
                        "binary_data_output": st.booleans(),
                        "priority": st.integers(0, 10),
                        "timeout": st.integers(0, 10**9),
                        "sequence_id": st.integers(0, 5),
                        "sequence_start": st.booleans(),
                        "sequence_end": st.booleans(),
                        "custom": SAFE_TEXT | st.integers(),
                    },
                )
            )
        return doc, chunks

    def json_data(self, data: st.DataObject, datatype: str, count: int) -> Any:
        kind = data.draw(st.integers(0, 11))
        if kind == 0:
            return data.draw(JSON)
        if datatype == "BYTES":
            return [data.draw(SAFE_TEXT) for _ in range(min(count, 16))] + ["x"] * max(0, count - 16)
        if datatype == "BOOL":
            values: list[Any] = [bool(i % 2) for i in range(count)]
        elif datatype.startswith(("FP", "BF")):
            values = [float(i) / 3 for i in range(count)]
        else:
            values = list(range(count))
        if kind == 1 and values:  # one value out of range or of another JSON type
            values[data.draw(st.integers(0, len(values) - 1))] = data.draw(
                st.sampled_from([2**64, -(2**63) - 1, 1e308, "x", None, True, [1], {"a": 1}])
            )
        if kind == 2 and values:  # nested as rows
            return [values[i : i + 2] for i in range(0, len(values), 2)]
        return values

    def binary_data(self, data: st.DataObject, datatype: str, count: int) -> bytes:
        if datatype == "BYTES":
            items = [data.draw(st.binary(max_size=8)) for _ in range(min(count, 8))]
            raw = b"".join(len(i).to_bytes(4, "little") + i for i in items)
            if data.draw(st.integers(0, 5)) == 0:
                raw += data.draw(st.binary(max_size=8))  # a dishonest length prefix or a tail
            return raw
        size = count * np.dtype(NUMPY.get(datatype, np.uint8)).itemsize
        if data.draw(st.integers(0, 7)) == 0:
            size = max(0, size + data.draw(st.integers(-3, 3)))
        return random.Random(data.draw(st.integers(0, 2**16))).randbytes(size)

    # -- one request ---------------------------------------------------------------------------
    def draw(self, data: st.DataObject) -> FuzzRequest:
        kind = data.draw(st.sampled_from([k for k, w in KINDS.items() for _ in range(w)]))
        return getattr(self, f"_{kind}")(data, kind)

    def _op(self, data: st.DataObject, with_body: bool = False) -> Operation:
        ops = [o for o in self.ops if o.body_schema] if with_body else self.ops
        return data.draw(st.sampled_from(ops))

    def _schema(self, data: st.DataObject, kind: str) -> FuzzRequest:
        op = self._op(data)
        path = self.path(data, op.template)
        body = b""
        headers = []
        if op.body_schema:
            doc = data.draw(self.body_strategies[(op.method, op.template)])
            body = json.dumps(doc).encode()
            headers.append(("Content-Type", "application/json"))
        return FuzzRequest(kind, f"{op.method} {op.template}", http_request(op.method, path, body, headers))

    def _infer_path(self, data: st.DataObject, model: ModelMeta) -> str:
        if data.draw(st.integers(0, 5)) == 0:
            return f"/v2/models/{model.name}/versions/{data.draw(st.sampled_from(['1', '2', '7']))}/infer"
        return f"/v2/models/{model.name}/infer"

    def _model(self, data: st.DataObject, kind: str) -> FuzzRequest:
        model = self.models[data.draw(st.sampled_from(self.model_names))]
        doc, chunks = self.model_infer_doc(data, model)
        if chunks:  # drawn binary: send it as JSON with the binary ones dropped to data
            for item in doc["inputs"]:
                item.pop("parameters", None)
                item["data"] = self.json_data(data, item["datatype"], 1)
        path = self._infer_path(data, model)
        if data.draw(st.integers(0, 5)) == 0:  # generate: the inputs as flat members
            path = path.replace("/infer", data.draw(st.sampled_from(["/generate", "/generate_stream"])))
            flat = {i["name"]: i.get("data") for i in doc["inputs"]}
            flat.update(doc.get("parameters", {}))
            body = json.dumps(flat).encode()
        else:
            body = json.dumps(doc).encode()
        headers = [("Content-Type", "application/json")]
        if data.draw(st.integers(0, 5)) == 0:
            headers.append(("Accept-Encoding", data.draw(st.sampled_from(["gzip", "deflate", "br", "*"]))))
        return FuzzRequest(
            kind, f"POST {path.split('/')[-1]} {model.name}", http_request("POST", path, body, headers)
        )

    def _binary(self, data: st.DataObject, kind: str) -> FuzzRequest:
        model = self.models[data.draw(st.sampled_from(self.model_names))]
        doc, chunks = self.model_infer_doc(data, model)
        for item in doc["inputs"]:
            if "data" in item:
                raw = self.binary_data(data, item["datatype"], int(np.prod(item["shape"] or [1])))
                item.pop("data")
                item["parameters"] = {"binary_data_size": len(raw)}
                chunks.append(raw)
        if data.draw(st.booleans()):
            doc.setdefault("parameters", {})["binary_data_output"] = True
        header = json.dumps(doc).encode()
        body = header + b"".join(chunks)
        how = data.draw(st.integers(0, 9))
        if how <= 5:
            hlen = str(len(header))
        elif how == 6:
            hlen = str(len(header) + data.draw(st.integers(-20, 20)))
        elif how == 7:
            hlen = data.draw(
                st.sampled_from(["-1", "0", " 12", "+5", "1e3", "", "abc", "9" * 30, "9" * 100_000])
            )
        elif how == 8:
            hlen = str(len(body) + data.draw(st.integers(0, 2**40)))
        else:
            hlen = str(data.draw(st.integers(0, len(body))))
        headers = [("Inference-Header-Content-Length", hlen), ("Content-Type", "application/octet-stream")]
        path = self._infer_path(data, model)
        return FuzzRequest(
            kind, f"POST infer (binary) {model.name}", http_request("POST", path, body, headers)
        )

    def _mutated(self, data: st.DataObject, kind: str) -> FuzzRequest:
        if data.draw(st.booleans()):
            model = self.models[data.draw(st.sampled_from(self.model_names))]
            doc: Any = self.model_infer_doc(data, model)[0]
            path, label = self._infer_path(data, model), f"POST infer (mutated) {model.name}"
        else:
            op = self._op(data, with_body=True)
            doc = data.draw(self.body_strategies[(op.method, op.template)])
            path, label = self.path(data, op.template), f"{op.method} {op.template}"
        doc = self.mutate(data, doc)
        body = json.dumps(doc).encode()
        return FuzzRequest(
            kind, label, http_request("POST", path, body, [("Content-Type", "application/json")])
        )

    def mutate(self, data: st.DataObject, doc: Any, depth: int = 0) -> Any:
        """``doc`` with one value (or key) somewhere in it replaced by random JSON."""
        if depth > 6 or not isinstance(doc, (dict, list)) or not doc or data.draw(st.integers(0, 3)) == 0:
            return data.draw(
                JSON
                | st.sampled_from(
                    [[[[[[[[[[1]]]]]]]]], -1, 2**64, -(2**63) - 1, 1.5e300, "", "\x00", [], {}, None]
                )
            )
        if isinstance(doc, dict):
            key = data.draw(st.sampled_from(sorted(doc)))
            if data.draw(st.integers(0, 7)) == 0:
                doc = dict(doc)
                doc.pop(key)
                return doc
            return {**doc, key: self.mutate(data, doc[key], depth + 1)}
        i = data.draw(st.integers(0, len(doc) - 1))
        return [*doc[:i], self.mutate(data, doc[i], depth + 1), *doc[i + 1 :]]

    def _json(self, data: st.DataObject, kind: str) -> FuzzRequest:
        op = self._op(data, with_body=True)
        body = json.dumps(data.draw(JSON)).encode()
        if data.draw(st.integers(0, 4)) == 0:  # deep nesting, as a client could send
            depth = data.draw(st.integers(50, 5000))
            body = (
                b'{"inputs":[{"name":"INPUT0","shape":[1],"datatype":"FP32","data":'
                + b"[" * depth
                + b"1"
                + b"]" * depth
                + b"}]}"
            )
        path = self.path(data, op.template)
        return FuzzRequest(
            kind,
            f"{op.method} {op.template}",
            http_request(op.method, path, body, [("Content-Type", "application/json")]),
        )

    def _bytes(self, data: st.DataObject, kind: str) -> FuzzRequest:
        op = self._op(data, with_body=True)
        body = data.draw(st.binary(max_size=512))
        if data.draw(st.integers(0, 3)) == 0:  # JSON-looking bytes, cut or with invalid UTF-8
            body = data.draw(
                st.sampled_from(
                    [
                        b'{"inputs":[',
                        b'{"a":"\xff\xfe"}',
                        b"[1,2",
                        b'"\\ud800"',
                        b"NaN",
                        b'{"inputs":[{"data":[Infinity]}]}',
                        b"\x00{}",
                    ]
                )
            )
        path = self.path(data, op.template)
        ctype = data.draw(st.sampled_from(["application/json", "application/octet-stream", "text/plain", ""]))
        headers = [("Content-Type", ctype)] if ctype else []
        return FuzzRequest(kind, f"{op.method} {op.template}", http_request(op.method, path, body, headers))

    def _encoding(self, data: st.DataObject, kind: str) -> FuzzRequest:
        op = self._op(data, with_body=True)
        if op.template.endswith("/infer") and data.draw(st.booleans()):
            model = self.models[data.draw(st.sampled_from(self.model_names))]
            body = json.dumps(self.model_infer_doc(data, model)[0]).encode()
            path = self._infer_path(data, model)
        else:
            body = json.dumps(data.draw(self.body_strategies[(op.method, op.template)])).encode()
            path = self.path(data, op.template)
        enc = data.draw(
            st.sampled_from(
                ["gzip", "deflate", "gzip", "br", "identity", "x-gzip", "GZIP", "gzip, deflate", ""]
            )
        )
        how = data.draw(st.integers(0, 4))
        if enc.strip().lower() == "gzip" and how < 3:
            body = gzip.compress(body)
        elif enc == "deflate" and how < 3:
            body = zlib.compress(body)
        if how == 3 and body:  # compressed, then cut short
            body = gzip.compress(body)[: data.draw(st.integers(0, 30))]
        headers = [("Content-Encoding", enc)]
        if data.draw(st.booleans()):
            headers.append(
                (
                    "Content-Type",
                    data.draw(
                        st.sampled_from(
                            [
                                "application/json",
                                "application/x-www-form-urlencoded",
                                "multipart/form-data; boundary=x",
                                "text/plain; charset=latin-1",
                            ]
                        )
                    ),
                )
            )
        return FuzzRequest(
            kind,
            f"{op.method} {op.template} ({enc or 'empty'} encoding)",
            http_request(op.method, path, body, headers),
        )

    def _method(self, data: st.DataObject, kind: str) -> FuzzRequest:
        op = self._op(data)
        method = data.draw(st.sampled_from(METHODS))
        body = b"{}" if data.draw(st.booleans()) else b""
        path = self.path(data, op.template)
        # a HEAD answer has no body by definition: read the head only... the server sends a body with
        # Content-Length; the client would then misread the connection, so HEAD goes last on it
        raw = http_request(method, path, body, [("Connection", "close")] if method == "HEAD" else [])
        return FuzzRequest(kind, f"{method} {op.template}", raw, answer_due=method != "HEAD")

    def _path(self, data: st.DataObject, kind: str) -> FuzzRequest:
        op = self._op(data)
        path = self.path(data, op.template, odd=True)
        if data.draw(st.integers(0, 5)) == 0:
            path += data.draw(st.sampled_from(["?", "?a=b&c", "#frag", "/", "//", "?" + "q" * 500]))
        body = b"{}" if op.body_schema else b""
        path = path.replace(" ", "%20").replace("\r", "%0D").replace("\n", "%0A")
        return FuzzRequest(kind, f"{op.method} {op.template} (odd path)", http_request(op.method, path, body))

    def _headers(self, data: st.DataObject, kind: str) -> FuzzRequest:
        op = self._op(data)
        path = self.path(data, op.template)
        body = b"{}" if op.body_schema else b""
        token = st.text(
            st.characters(min_codepoint=33, max_codepoint=126, exclude_characters=":"),
            min_size=1,
            max_size=20,
        )
        value = st.text(st.characters(min_codepoint=32, max_codepoint=255), max_size=60)
        headers = data.draw(st.lists(st.tuples(token, value), max_size=8))
        dishonest = data.draw(st.integers(0, 3)) == 0
        if dishonest:
            headers.append(data.draw(st.sampled_from([
                ("Content-Length", "5"), ("Content-Length", "-1"), ("Content-Length", "abc"),
                ("Transfer-Encoding", "chunked"), ("Transfer-Encoding", "gzip, chunked"), ("Expect", "100-continue"),
                ("Content-Length", "99999999999999999999999"), ("Connection", "upgrade"),
            ])))  # fmt: skip
        raw = http_request(op.method, path, body, headers)
        return FuzzRequest(kind, f"{op.method} {op.template} (odd headers)", raw, answer_due=not dishonest)

    def _garbage(self, data: st.DataObject, kind: str) -> FuzzRequest:
        raw = data.draw(
            st.binary(min_size=1, max_size=300)
            | st.sampled_from(
                [
                    b"GET / HTTP/1.1\r\n\r\n",
                    b"GET /v2 HTTP/9.9\r\n\r\n",
                    b"\r\n\r\n",
                    b"GET\r\n\r\n",
                    b"POST /v2/models/identity_fp32/infer HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
                    b"GET /v2 HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
                    b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
                    b"GET /v2 HTTP/1.1\nX: y\n\n",
                    b"GET /v2 HTTP/1.1\r\n X: folded\r\n\r\n",
                ]
            )
        )
        return FuzzRequest(kind, "raw bytes", raw, answer_due=False)
