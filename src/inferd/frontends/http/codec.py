"""KServe v2 HTTP codec: JSON and binary-tensor bodies <-> InferRequest / InferResponse.

Binary inputs become zero-copy ``memoryview`` slices of the received body; texts of parse errors
are the reference's (rapidjson's wording where a client could see it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

from inferd.core.model import Model
from inferd.core.request import SEQUENCE_END, SEQUENCE_START, InferRequest, RequestedOutput
from inferd.core.response import InferResponse
from inferd.core.tensor import Tensor
from inferd.core.types import BY_WIRE, BYTES, DataType
from inferd.core.validate import request_prefix
from inferd.errors import InternalError, InvalidArgumentError

#: Request parameters the server consumes; never passed on to the model.
RESERVED_PARAMETERS = frozenset(
    {"sequence_id", "sequence_start", "sequence_end", "priority", "timeout", "binary_data_output", "headers"}
)

_RAPIDJSON_TEXT = (
    ("zero-length", "The document is empty."),
    ("expected a JSON value", "Invalid value."),
    ("trailing characters", "The document root must not be followed by other values."),
    ("unexpected content after document", "The document root must not be followed by other values."),
    ("input data is empty", "The document is empty."),
    ("trailing comma", "Invalid value."),
    ("key must be a string", "Missing a name for object member."),
    ("expected a string key", "Missing a name for object member."),
    ("expected ':'", "Missing a colon after a name of object member."),
    ("expected ',' or '}'", "Missing a comma or '}' after an object member."),
    ("expected ',' or ']'", "Missing a comma or ']' after an array element."),
    ("EOF while parsing a string", "Missing a closing quotation mark in string."),
)


def _json_error(e: orjson.JSONDecodeError) -> InternalError:
    msg = e.msg
    for needle, text in _RAPIDJSON_TEXT:
        if needle in msg:
            msg = text
            break
    return InternalError(f"failed to parse the request JSON buffer: {msg} at {e.pos}")


def _member(obj: dict[str, Any], key: str) -> Any:
    try:
        return obj[key]
    except KeyError:
        raise InternalError(
            f"Unable to parse '{key}': attempt to access non-existing object member '{key}'"
        ) from None


def _string(obj: dict[str, Any], key: str) -> str:
    v = _member(obj, key)
    if not isinstance(v, str):
        raise InternalError(f"Unable to parse '{key}': attempt to access JSON non-string as string")
    return v


def _shape(obj: dict[str, Any]) -> tuple[int, ...]:
    v = _member(obj, "shape")
    if not isinstance(v, list):
        raise InternalError("Unable to parse 'shape': attempt to access JSON non-array as array")
    for d in v:
        if type(d) is not int or d < 0:
            raise InternalError(
                "Unable to parse 'shape': attempt to access JSON non-unsigned-integer as unsigned-integer"
            )
    return tuple(v)


def _params(obj: dict[str, Any]) -> dict[str, Any]:
    p = obj.get("parameters")
    if p is None:
        return {}
    if not isinstance(p, dict):
        raise InternalError("Unable to parse 'parameters': attempt to access JSON non-object as object")
    return p


@dataclass(slots=True)
class OutputEncoding:
    """How the response should be encoded: which outputs go binary."""

    default_binary: bool = False
    binary: dict[str, bool] = field(default_factory=dict)

    def is_binary(self, name: str) -> bool:
        return self.binary.get(name, self.default_binary)


_JSON_KIND_ERR = {
    "b": "attempt to access JSON non-boolean as boolean",
    "i": "attempt to access JSON non-integer as int",
    "u": "attempt to access JSON non-unsigned-integer as unsigned-integer",
    "f": "attempt to access JSON non-number as double",
}


def _flatten(data: Any, out: list[Any]) -> None:
    for v in data:
        if isinstance(v, list):
            _flatten(v, out)
        else:
            out.append(v)


def _json_tensor(name: str, dt: DataType, shape: tuple[int, ...], data: Any) -> Tensor:
    if not isinstance(data, list):
        data = [data]
    flat: list[Any] = []
    _flatten(data, flat)
    if dt is BYTES:
        for v in flat:
            if not isinstance(v, str):
                raise InternalError(
                    "Unable to parse JSON bytes array: attempt to access JSON non-string as string"
                )
        arr = np.empty(len(flat), dtype=np.object_)
        arr[:] = [v.encode() for v in flat]
        return Tensor(name, dt, shape, array=arr)
    kind = dt.numpy.kind
    for v in flat:
        t = type(v)
        if kind == "b":
            ok = t is bool
        elif kind in "iu":
            ok = t is int and (kind == "i" or v >= 0)
        else:
            ok = t is int or t is float
        if not ok:
            raise InternalError(f"Unable to parse 'data': {_JSON_KIND_ERR[kind]}")
    n = 1
    for d in shape:
        n *= d
    if len(flat) != n:
        raise InternalError("Unable to parse 'data': Shape does not match true shape of 'data' field")
    try:
        arr = np.array(flat, dtype=dt.numpy).reshape(shape)
    except OverflowError as e:
        raise InvalidArgumentError(f"Unable to parse 'data': {e}") from e
    return Tensor(name, dt, shape, array=arr)


def _apply_reserved(request: InferRequest, params: dict[str, Any], enc: OutputEncoding) -> None:
    custom: dict[str, Any] = {}
    for k, v in params.items():
        if k.startswith("triton_"):
            raise InvalidArgumentError(
                "parameter keys starting with 'triton_' are reserved for Triton usage and should not be specified."
            )
        if k not in RESERVED_PARAMETERS:
            custom[k] = v
        elif k == "binary_data_output":
            enc.default_binary = bool(v)
        elif k == "sequence_id":
            request.correlation_id = v
        elif k == "sequence_start":
            request.flags |= SEQUENCE_START if v else 0
        elif k == "sequence_end":
            request.flags |= SEQUENCE_END if v else 0
        elif k == "priority":
            request.priority = int(v)
        elif k == "timeout":
            request.timeout_us = int(v)
    request.parameters = custom


def decode_infer_request(
    model: Model, version: str, body: bytes, header_length: int | None
) -> tuple[InferRequest, OutputEncoding]:
    """Parse an /infer body (JSON, JSON + binary tail, or a raw single-tensor body)."""
    if header_length is None and not body:
        header_length = 0
    if header_length == 0:
        return _decode_raw(model, version, body)
    if header_length is not None:
        if header_length < 0 or header_length > len(body):
            raise InvalidArgumentError(
                f"inference header size should be in range (0, {len(body)}), got: {header_length}"
            )
        head = body[:header_length]
        tail = memoryview(body)[header_length:]
    else:
        head, tail = body, memoryview(b"")
    try:
        doc = orjson.loads(head)
    except orjson.JSONDecodeError as e:
        raise _json_error(e) from e
    if not isinstance(doc, dict):
        raise InternalError("failed to parse the request JSON buffer: Invalid value. at 0")
    request = InferRequest(model_name=model.name, inputs={}, model_version=version)
    rid = doc.get("id")
    if rid is not None:
        if not isinstance(rid, str):
            raise InternalError("Unable to parse 'id': attempt to access JSON non-string as string")
        request.id = rid
    enc = OutputEncoding()
    _apply_reserved(request, _params(doc), enc)
    inputs = _member(doc, "inputs")
    if not isinstance(inputs, list):
        raise InternalError("Unable to parse 'inputs': attempt to access JSON non-array as array")
    offset = 0
    tail_len = len(tail)
    for item in inputs:
        if not isinstance(item, dict):
            raise InternalError("Unable to parse 'inputs': attempt to access JSON non-object as object")
        name = _string(item, "name")
        shape = _shape(item)
        dtname = _string(item, "datatype")
        dt = BY_WIRE.get(dtname)
        if dt is None:
            raise InvalidArgumentError(f"invalid datatype for input {name}")
        iparams = _params(item)
        size = iparams.get("binary_data_size")
        has_data = "data" in item
        if name in request.inputs:
            raise InvalidArgumentError(f"{request_prefix(request)}input '{name}' already exists in request")
        if size is not None:
            if has_data:
                raise InvalidArgumentError(
                    "Input must set only one of the following fields: 'data', 'binary_data_size' in "
                    "'parameters', 'shared_memory_region' in 'parameters'. But found data and binary_data_size"
                )
            if type(size) is not int or size < 0:
                raise InternalError(
                    "Unable to parse 'binary_data_size': attempt to access JSON non-unsigned-integer as "
                    "unsigned-integer"
                )
            if offset + size > tail_len:
                raise InvalidArgumentError(
                    f"unexpected size for input '{name}', expecting {offset + size - tail_len} additional "
                    f"bytes for model '{model.name}'"
                )
            request.inputs[name] = Tensor(name, dt, shape, raw=tail[offset : offset + size])
            offset += size
        elif has_data:
            if not dt.json_ok:
                raise InvalidArgumentError(
                    f"receiving {dt.wire} data via JSON is not supported. Please use the binary data "
                    f"format for input {name}"
                )
            request.inputs[name] = _json_tensor(name, dt, shape, item["data"])
        else:
            raise InvalidArgumentError(
                "Input must set only one of the following fields: 'data', 'binary_data_size' in 'parameters', "
                "'shared_memory_region' in 'parameters'. But no field is set"
            )
    if offset != tail_len:
        raise InvalidArgumentError(
            f"unexpected additional input data for model '{model.name}': {tail_len - offset} bytes left over"
        )
    outputs = doc.get("outputs")
    if outputs is not None:
        if not isinstance(outputs, list):
            raise InternalError("Unable to parse 'outputs': attempt to access JSON non-array as array")
        request.outputs = []
        for item in outputs:
            if not isinstance(item, dict):
                raise InternalError("Unable to parse 'outputs': attempt to access JSON non-object as object")
            oname = _string(item, "name")
            oparams = _params(item)
            cls = oparams.get("classification", 0)
            if type(cls) is not int or cls < 0:
                raise InternalError(
                    "Unable to parse 'classification': attempt to access JSON non-unsigned-integer as "
                    "unsigned-integer"
                )
            if "binary_data" in oparams:
                enc.binary[oname] = bool(oparams["binary_data"])
            custom = {k: v for k, v in oparams.items() if k not in ("binary_data", "classification")}
            request.outputs.append(RequestedOutput(oname, cls, custom))
        request.output_names = frozenset(o.name for o in request.outputs)
    return request, enc


def _decode_raw(model: Model, version: str, body: bytes) -> tuple[InferRequest, OutputEncoding]:
    """A body that is one tensor, no JSON (Inference-Header-Content-Length: 0)."""
    request = InferRequest(model_name=model.name, inputs={}, model_version=version)
    specs = list(model.inputs.values())
    if len(specs) != 1:
        raise InvalidArgumentError(
            f"{request_prefix(request)}Raw request must only have 1 input (found 1) to be deduced but got "
            f"{len(specs)} inputs in '{model.name}' model configuration"
        )
    spec = specs[0]
    dims = list(spec.dims)
    if spec.datatype is BYTES:
        shape = [1]
    else:
        variable = [i for i, d in enumerate(dims) if d == -1]
        if len(variable) > 1:
            raise InvalidArgumentError(
                f"{request_prefix(request)}Raw request must only have 1 variable-size dimension to be deduced "
                f"but got {len(variable)} in input '{spec.name}' of '{model.name}' model configuration"
            )
        known = spec.datatype.itemsize
        for d in dims:
            if d != -1:
                known *= d
        if variable:
            if known == 0 or len(body) % known:
                raise InvalidArgumentError(
                    f"{request_prefix(request)}input byte size {len(body)} is not a multiple of the element "
                    f"byte size of input '{spec.name}' for model '{model.name}'"
                )
            dims[variable[0]] = len(body) // known
        shape = dims
    if model.max_batch_size > 0:
        shape = [1, *shape]
    request.inputs[spec.name] = Tensor(spec.name, spec.datatype, tuple(shape), raw=memoryview(body))
    return request, OutputEncoding(default_binary=True)


def _json_data(t: Tensor) -> Any:
    arr = t.array
    if t.datatype is BYTES:
        return [
            v.decode("utf-8", "replace") if isinstance(v, (bytes, bytearray)) else str(v)
            for v in arr.reshape(-1)
        ]
    flat = arr.reshape(-1)
    if not (flat.flags.c_contiguous and flat.dtype.isnative):  # orjson serialises only these
        flat = np.ascontiguousarray(flat, dtype=flat.dtype.newbyteorder("="))
    return flat


def encode_infer_response(
    resp: InferResponse, enc: OutputEncoding
) -> tuple[bytes, list[bytes | memoryview], int]:
    """(JSON header, binary parts, header length or -1 when the body is pure JSON)."""
    outputs = []
    parts: list[bytes | memoryview] = []
    for t in resp.outputs:
        o: dict[str, Any] = {"name": t.name, "datatype": t.datatype.wire, "shape": list(t.shape)}
        if enc.is_binary(t.name) or not t.datatype.json_ok:
            data = t.to_bytes()
            o["parameters"] = {"binary_data_size": len(data) if isinstance(data, bytes) else data.nbytes}
            parts.append(data)
        else:
            o["data"] = _json_data(t)
        outputs.append(o)
    doc: dict[str, Any] = {}
    if resp.id:
        doc["id"] = resp.id
    doc["model_name"] = resp.model_name
    doc["model_version"] = resp.model_version
    if resp.parameters:
        doc["parameters"] = resp.parameters
    doc["outputs"] = outputs
    head = orjson.dumps(doc, option=orjson.OPT_SERIALIZE_NUMPY)
    return head, parts, (len(head) if parts else -1)


@dataclass(slots=True)
class _Template:
    """What a binary-only request header decodes to, minus the tensor bytes."""

    model: Model
    version: str
    inputs: tuple[tuple[str, DataType, tuple[int, ...], int], ...]  # name, datatype, shape, byte size
    tail_len: int
    id: str
    parameters: dict[str, Any]
    correlation_id: int | str
    flags: int
    priority: int
    timeout_us: int
    outputs: list[RequestedOutput] | None
    output_names: frozenset[str] | None
    enc: OutputEncoding
    validated: bool = False
    batch_size: int = 1


class HeaderCache:
    """Remembers decoded JSON headers of binary requests (clients resend the same header each time).

    A hit skips JSON parsing and, once a request with that header passed validation, validation:
    names, datatypes, shapes and byte sizes all come from the header, and BYTES inputs (whose
    contents matter) are never cached.
    """

    def __init__(self, capacity: int = 256, max_header: int = 4096) -> None:
        self._capacity = capacity
        self._max_header = max_header
        self._cache: dict[bytes, _Template] = {}

    def decode(
        self, model: Model, version: str, body: bytes, header_length: int | None
    ) -> tuple[InferRequest, OutputEncoding, _Template | None]:
        """Like ``decode_infer_request``; also the template to mark validated after validation."""
        if header_length is None or header_length <= 0 or header_length > self._max_header:
            request, enc = decode_infer_request(model, version, body, header_length)
            return request, enc, None
        head = body[:header_length]
        tpl = self._cache.get(head)
        if tpl is not None and tpl.model is model and tpl.version == version:
            tail = memoryview(body)[header_length:]
            if len(tail) == tpl.tail_len:
                inputs = {}
                off = 0
                for name, dt, shape, size in tpl.inputs:
                    inputs[name] = Tensor(name, dt, shape, raw=tail[off : off + size])
                    off += size
                request = InferRequest(
                    model.name,
                    inputs,
                    version,
                    tpl.id,
                    dict(tpl.parameters) if tpl.parameters else {},
                    tpl.outputs,
                    tpl.correlation_id,
                    tpl.flags,
                    tpl.priority,
                    tpl.timeout_us,
                    tpl.output_names,
                    tpl.batch_size,
                )
                return request, tpl.enc, tpl
        request, enc = decode_infer_request(model, version, body, header_length)
        tpl = self._template(model, version, request, enc, len(body) - header_length)
        if tpl is not None:
            if len(self._cache) >= self._capacity:
                self._cache.pop(next(iter(self._cache)))
            self._cache[head] = tpl
        return request, enc, tpl

    @staticmethod
    def _template(
        model: Model, version: str, request: InferRequest, enc: OutputEncoding, tail_len: int
    ) -> _Template | None:
        specs = []
        for t in request.inputs.values():
            if t.raw is None or t.datatype is BYTES:
                return None
            specs.append((t.name, t.datatype, t.shape, t.raw_byte_size()))
        return _Template(
            model,
            version,
            tuple(specs),
            tail_len,
            request.id,
            request.parameters,
            request.correlation_id,
            request.flags,
            request.priority,
            request.timeout_us,
            request.outputs,
            request.output_names,
            enc,
        )
