"""KServe v2 HTTP codec: JSON and binary-tensor bodies <-> InferRequest / InferResponse.

Binary inputs become zero-copy ``memoryview`` slices of the received body; texts of parse errors
are the reference's (rapidjson's wording where a client could see it).
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from inferd.core.model import Model
from inferd.core.request import SEQUENCE_END, SEQUENCE_START, InferRequest, RequestedOutput
from inferd.core.response import InferResponse
from inferd.core.tensor import Tensor
from inferd.core.types import BY_WIRE, BYTES, DataType
from inferd.core.validate import request_prefix
from inferd.errors import InternalError, InvalidArgumentError, NotFoundError

if TYPE_CHECKING:
    from inferd.shm.system import SharedMemoryManager

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


def parse_json(buf: bytes) -> Any:
    """A JSON body as Triton's rapidjson reads it: up to the first NUL byte, NaN and Infinity
    accepted, and rapidjson's error message and offset (500) when it is no JSON."""
    nul = buf.find(b"\0")
    if nul >= 0:
        buf = buf[:nul]
    try:
        return orjson.loads(buf)
    except orjson.JSONDecodeError as e:
        found = _rapidjson_error(buf)
        if found is None:
            try:
                return json.loads(buf)  # what orjson refuses and rapidjson takes: NaN, Infinity
            except (ValueError, RecursionError):
                raise _json_error(e) from e
        raise InternalError(f"failed to parse the request JSON buffer: {found[0]} at {found[1]}") from e


class _RapidJsonError(Exception):
    def __init__(self, message: str, offset: int) -> None:
        super().__init__(message)
        self.message = message
        self.offset = offset


_WS = b" \t\n\r"
_ESCAPES = b'"\\/bfnrtu'


def _rapidjson_error(buf: bytes) -> tuple[str, int] | None:
    """(message, offset) of the first error rapidjson reports for ``buf``; None when it parses."""
    n = len(buf)

    def ws(i: int) -> int:
        while i < n and buf[i] in _WS:
            i += 1
        return i

    def literal(i: int, word: bytes) -> int:
        for k in range(1, len(word)):
            if i + k >= n or buf[i + k] != word[k]:
                raise _RapidJsonError("Invalid value.", i + k)
        return i + len(word)

    def string(i: int) -> int:
        i += 1
        while True:
            if i >= n:
                raise _RapidJsonError("Missing a closing quotation mark in string.", i)
            c = buf[i]
            if c == 0x22:
                return i + 1
            if c == 0x5C:
                if i + 1 >= n or buf[i + 1] not in _ESCAPES:
                    raise _RapidJsonError("Invalid escape character in string.", i)
                if buf[i + 1] == 0x75:  # a \u escape: four hex digits follow
                    hexa = buf[i + 2 : i + 6]
                    if len(hexa) < 4 or any(h not in b"0123456789abcdefABCDEF" for h in hexa):
                        raise _RapidJsonError("Incorrect hex digit after \\u escape in string.", i)
                    i += 6
                else:
                    i += 2
            elif c < 0x20:
                raise _RapidJsonError("Invalid escape character in string.", i)  # 2.51 says so
            else:
                i += 1

    def digits(i: int) -> int:
        while i < n and 0x30 <= buf[i] <= 0x39:
            i += 1
        return i

    def number(i: int) -> int:
        start = i
        if buf[i] == 0x2D:  # -
            i += 1
        if buf[i : i + 3] == b"NaN":
            return i + 3
        if buf[i : i + 8] == b"Infinity":
            return i + 8
        if i < n and buf[i] == 0x30:
            i += 1
        elif i < n and 0x31 <= buf[i] <= 0x39:
            i = digits(i)
        else:
            raise _RapidJsonError("Invalid value.", i)
        if i < n and buf[i] == 0x2E:  # .
            if i + 1 >= n or not 0x30 <= buf[i + 1] <= 0x39:
                raise _RapidJsonError("Miss fraction part in number.", i + 1)
            i = digits(i + 1)
        if i < n and buf[i] in b"eE":
            i += 1
            if i < n and buf[i] in b"+-":
                i += 1
            if i >= n or not 0x30 <= buf[i] <= 0x39:
                raise _RapidJsonError("Miss exponent in number.", i)
            i = digits(i)
        if float(buf[start:i]) in (float("inf"), float("-inf")):
            raise _RapidJsonError("Number too big to be stored in double.", start)
        return i

    def value(i: int) -> int:
        i = ws(i)
        if i >= n:
            raise _RapidJsonError("Invalid value.", i)
        c = buf[i]
        if c == 0x7B:  # {
            i = ws(i + 1)
            if i < n and buf[i] == 0x7D:
                return i + 1
            while True:
                if i >= n or buf[i] != 0x22:
                    raise _RapidJsonError("Missing a name for object member.", i)
                i = ws(string(i))
                if i >= n or buf[i] != 0x3A:
                    raise _RapidJsonError("Missing a colon after a name of object member.", i)
                i = ws(value(i + 1))
                if i < n and buf[i] == 0x2C:
                    i = ws(i + 1)
                elif i < n and buf[i] == 0x7D:
                    return i + 1
                else:
                    raise _RapidJsonError("Missing a comma or '}' after an object member.", i)
        if c == 0x5B:  # [
            i = ws(i + 1)
            if i < n and buf[i] == 0x5D:
                return i + 1
            while True:
                i = ws(value(i))
                if i < n and buf[i] == 0x2C:
                    i = ws(i + 1)
                elif i < n and buf[i] == 0x5D:
                    return i + 1
                else:
                    raise _RapidJsonError("Missing a comma or ']' after an array element.", i)
        if c == 0x22:
            return string(i)
        if c == 0x74:
            return literal(i, b"true")
        if c == 0x66:
            return literal(i, b"false")
        if c == 0x6E:
            return literal(i, b"null")
        if c == 0x2D or 0x30 <= c <= 0x39 or c in b"NI":
            return number(i)
        raise _RapidJsonError("Invalid value.", i)

    i = ws(0)
    try:
        if i >= n:
            raise _RapidJsonError("The document is empty.", i)
        i = ws(value(i))
        if i < n:
            raise _RapidJsonError("The document root must not be followed by other values.", i)
    except _RapidJsonError as e:
        return e.message, e.offset
    except RecursionError:
        return None
    return None


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


@dataclass(slots=True)
class OutputEncoding:
    """How the response should be encoded: which outputs go binary."""

    default_binary: bool = False
    binary: dict[str, bool] = field(default_factory=dict)
    #: tensors travel through shared memory (such requests are never cached by header)
    shm: bool = False

    def is_binary(self, name: str) -> bool:
        return self.binary.get(name, self.default_binary)


_JSON_KIND_ERR = {
    "b": "attempt to access JSON non-boolean as boolean",
    "i": "attempt to access JSON non-signed-integer as signed-integer",
    "u": "attempt to access JSON non-unsigned-integer as unsigned-integer",
    "f": "attempt to access JSON non-number as double",
}


def _flatten(data: Any, out: list[Any]) -> None:
    for v in data:
        if isinstance(v, list):
            _flatten(v, out)
        else:
            out.append(v)


def _json_tensor(name: str, dt: DataType, shape: tuple[int, ...], data: list[Any]) -> Tensor:
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


def _bool_param(key: str, v: Any) -> bool:
    if type(v) is not bool:
        raise InternalError(f"Unable to parse '{key}': attempt to access JSON non-boolean as boolean")
    return v


def _uint_param(key: str, v: Any) -> int:
    if type(v) is not int or v < 0:
        raise InternalError(
            f"Unable to parse '{key}': attempt to access JSON non-unsigned-integer as unsigned-integer"
        )
    return v


def _apply_reserved(request: InferRequest, params: dict[str, Any], enc: OutputEncoding) -> None:
    custom: dict[str, Any] = {}
    for k, v in params.items():
        if k not in RESERVED_PARAMETERS or k == "headers":  # 2.51's HTTP takes "headers" as any other key
            if k.startswith("triton_"):
                raise InvalidArgumentError(
                    "parameter keys starting with 'triton_' are reserved for Triton usage and should not be "
                    "specified."
                )
            if not isinstance(v, (str, int, float)):  # bool is an int
                raise InvalidArgumentError(
                    f"parameter '{k}' has invalid type. It should be either 'int', 'bool', or 'string'."
                )
            if type(v) is int and not -(2**63) <= v < 2**63:
                v = float(v)  # as rapidjson reads it: not an int64, so a double
            custom[k] = v
        elif k == "binary_data_output":
            enc.default_binary = _bool_param(k, v)
        elif k == "sequence_id":
            if not (isinstance(v, str) or (type(v) is int and v >= 0)):
                raise InternalError(
                    "Unable to parse 'sequence_id': attempt to access JSON non-string as string"
                )
            request.correlation_id = v
        elif k == "sequence_start":
            request.flags |= SEQUENCE_START if _bool_param(k, v) else 0
        elif k == "sequence_end":
            request.flags |= SEQUENCE_END if _bool_param(k, v) else 0
        elif k == "priority":
            request.priority = _uint_param(k, v)
        elif k == "timeout":
            request.timeout_us = _uint_param(k, v)
    request.parameters = custom


def _shm_window(params: dict[str, Any], shm: SharedMemoryManager | None) -> memoryview:
    """The shared-memory window an input or output names, bounds checked before any byte moves."""
    region = params["shared_memory_region"]
    if not isinstance(region, str):
        raise InternalError(
            "Unable to parse 'shared_memory_region': attempt to access JSON non-string as string"
        )
    size = params.get("shared_memory_byte_size")
    if size is not None:
        size = _uint_param("shared_memory_byte_size", size)
    offset = _uint_param("shared_memory_offset", params.get("shared_memory_offset", 0))
    if shm is None:
        raise NotFoundError(f"Unable to find shared memory region: '{region}'")
    return shm.resolve(region, offset, size)


_OUTPUT_CODEC_PARAMS = frozenset(
    {
        "binary_data",
        "classification",
        "shared_memory_region",
        "shared_memory_byte_size",
        "shared_memory_offset",
    }
)

_INPUT_FIELDS = (
    "Input must set only one of the following fields: 'data', 'binary_data_size' in 'parameters', "
    "'shared_memory_region' in 'parameters'. But"
)


def decode_infer_request(
    model: Model,
    version: str,
    body: bytes,
    header_length: int | None,
    shm: SharedMemoryManager | None = None,
) -> tuple[InferRequest, OutputEncoding]:
    """Parse an /infer body (JSON, JSON + binary tail, or a raw single-tensor body).

    Members are read in the reference's order, so a request with several faults gets its answer.
    """
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
    doc = parse_json(head)
    if not isinstance(doc, dict):
        doc = {}  # rapidjson parses any root; only the member lookups fail
    request = InferRequest(model_name=model.name, inputs={}, model_version=version)
    if "id" in doc:
        rid = doc["id"]
        if not isinstance(rid, str):
            raise InternalError("Unable to parse 'id': attempt to access JSON non-string as string")
        request.id = rid
    enc = OutputEncoding()
    if "parameters" in doc:
        params = doc["parameters"]
        if not isinstance(params, dict):
            raise InternalError("failed to get request params.: attempt to get members for non-object")
        _apply_reserved(request, params, enc)
    inputs = _member(doc, "inputs")
    if not isinstance(inputs, list):
        raise InternalError("Unable to parse 'inputs': attempt to access JSON non-array as array")
    offset = 0
    tail_len = len(tail)
    for item in inputs:
        if not isinstance(item, dict):
            item = {}
        iparams = item.get("parameters")
        if not isinstance(iparams, dict):
            iparams = {}  # parameters that are no object hold no binary_data_size
        has_data = "data" in item
        has_size = "binary_data_size" in iparams
        has_shm = "shared_memory_region" in iparams
        if has_data + has_size + has_shm != 1:
            if has_data or has_size or has_shm:
                found = "".join(
                    f" '{f}'"
                    for f, on in (
                        ("data", has_data),
                        ("binary_data_size", has_size),
                        ("shared_memory_region", has_shm),
                    )
                    if on
                )
                raise InvalidArgumentError(f"{_INPUT_FIELDS} set{found}")
            raise InvalidArgumentError(f"{_INPUT_FIELDS} no field is set")
        name = _string(item, "name")
        dtname = _string(item, "datatype")
        shape = _shape(item)
        if name in request.inputs:
            raise InvalidArgumentError(f"{request_prefix(request)}input '{name}' already exists in request")
        dt = BY_WIRE.get(dtname)
        if has_size:
            size = iparams["binary_data_size"]
            if type(size) is not int or size < 0:
                raise InternalError(
                    "Unable to parse 'binary_data_size': attempt to access JSON non-unsigned-integer as "
                    "unsigned-integer"
                )
            if dt is None:
                raise InvalidArgumentError(f"invalid datatype for input {name}")
            if offset + size > tail_len:
                raise InvalidArgumentError(
                    f"unexpected size for input '{name}', expecting {offset + size - tail_len} additional "
                    f"bytes for model '{model.name}'"
                )
            request.inputs[name] = Tensor(name, dt, shape, raw=tail[offset : offset + size])
            offset += size
        elif has_shm:
            window = _shm_window(iparams, shm)
            if dt is None:
                raise InvalidArgumentError(f"invalid datatype for input {name}")
            request.inputs[name] = Tensor(name, dt, shape, raw=window)
            enc.shm = True
        else:
            count = 0
            for i, d in enumerate(shape):
                count = d if i == 0 else count * d
            if count == 0:  # Triton reads no data at all for no elements (an empty shape included)
                if dt is None:
                    raise InvalidArgumentError(f"invalid datatype for input {name}")
                request.inputs[name] = Tensor(name, dt, shape, raw=memoryview(b""))
                continue
            data = item["data"]
            if not isinstance(data, list):
                raise InternalError("Unable to parse 'data': attempt to access JSON non-array as array")
            if dt is None:
                raise InvalidArgumentError(f"invalid datatype for input {name}")
            if not dt.json_ok:
                raise InvalidArgumentError(
                    f"receiving {dt.wire} data via JSON is not supported. Please use the binary data "
                    f"format for input {name}"
                )
            request.inputs[name] = _json_tensor(name, dt, shape, data)
    if offset != tail_len:
        raise InvalidArgumentError(f"unexpected additional input data for model '{model.name}'")
    if "outputs" in doc:
        outputs = doc["outputs"]
        if not isinstance(outputs, list):
            raise InternalError("Unable to parse 'outputs': attempt to access JSON non-array as array")
        requested = []
        for item in outputs:
            if not isinstance(item, dict):
                item = {}
            oname = _string(item, "name")
            oparams = item.get("parameters")
            if not isinstance(oparams, dict):
                oparams = {}
            cls = oparams.get("classification", 0)
            if type(cls) is not int or cls < 0:
                raise InternalError(
                    "Unable to set 'classification': attempt to access JSON non-unsigned-integer as "
                    "unsigned-integer"
                )
            target = None
            if "shared_memory_region" in oparams:
                target = _shm_window(oparams, shm)
                enc.shm = True
            # a listed output is JSON unless it asks for binary (binary_data_output covers the others)
            enc.binary[oname] = _bool_param("binary_data", oparams.get("binary_data", False))
            custom = {k: v for k, v in oparams.items() if k not in _OUTPUT_CODEC_PARAMS}
            requested.append(RequestedOutput(oname, cls, custom, target))
        if requested:  # an empty list asks for every output, as no list does
            request.outputs = requested
            request.output_names = frozenset(o.name for o in requested)
    return request, enc


def _decode_raw(model: Model, version: str, body: bytes) -> tuple[InferRequest, OutputEncoding]:
    """A body that is one tensor, no JSON (Inference-Header-Content-Length: 0), as Triton deduces it."""
    request = InferRequest(model_name=model.name, inputs={}, model_version=version)
    specs = list(model.inputs.values())
    if len(specs) != 1:
        raise InvalidArgumentError(
            f"{request_prefix(request)}Raw request must only have 1 input (found 1) to be deduced but got "
            f"{len(specs)} inputs in '{model.name}' model configuration"
        )
    spec = specs[0]
    dims = list(spec.dims)
    variable = [i for i, d in enumerate(dims) if d == -1]
    if len(variable) > 1:
        raise InvalidArgumentError(
            f"{request_prefix(request)}The shape of the raw input '{spec.name}' can not be deduced because "
            "there are more than one variable-sized dimension"
        )
    count = 1
    for d in dims:
        if d != -1:
            count *= d
    data: bytes | memoryview = memoryview(body)
    if spec.datatype is BYTES:
        if variable or count != 1:
            raise InvalidArgumentError(
                f"{request_prefix(request)}For BYTE datatype raw input '{spec.name}', the model must have "
                "input shape [1]"
            )
        data = struct.pack("<I", len(body)) + body  # the body is the one string, unprefixed
    else:
        if variable:
            known = count * spec.datatype.itemsize
            dims[variable[0]] = len(body) // known if known else 0
            count *= dims[variable[0]]
        expected = count * spec.datatype.itemsize
        if len(body) != expected:
            # Triton names the input as its HTTP frontend added it, before deducing the model's name
            raise InvalidArgumentError(
                f"{request_prefix(request)}input byte size mismatch for input 'raw_input' for model "
                f"'{model.name}'. Expected {expected}, got {len(body)}"
            )
    shape = [1, *dims] if model.max_batch_size > 0 else dims
    request.inputs[spec.name] = Tensor(spec.name, spec.datatype, tuple(shape), raw=data)
    return request, OutputEncoding(default_binary=True)


def _json_data(t: Tensor) -> Any:
    arr = t.array
    if t.datatype is BYTES:
        return [
            v.decode("utf-8", "replace") if isinstance(v, (bytes, bytearray)) else str(v)
            for v in arr.reshape(-1)
        ]
    flat = arr.reshape(-1)
    if flat.dtype.kind == "f" and flat.dtype.itemsize < 8:
        # the reference prints FP32 through a double: 0.1f is 0.10000000149011612 there
        return flat.astype(np.float64)
    if not (flat.flags.c_contiguous and flat.dtype.isnative):  # orjson serialises only these
        flat = np.ascontiguousarray(flat, dtype=flat.dtype.newbyteorder("="))
    return flat


def write_to_target(t: Tensor, target: memoryview) -> None:
    """Copy an output into the shared-memory window the client named (500 when it is too small)."""
    data = t.to_bytes()
    size = len(data) if isinstance(data, bytes) else data.nbytes
    if size > target.nbytes:
        raise InternalError(
            f"shared memory size specified with the request for output '{t.name}' ({target.nbytes} bytes) "
            f"should be at least {size} bytes to hold the results"
        )
    target[:size] = data


def encode_infer_response(
    resp: InferResponse, enc: OutputEncoding, request: InferRequest | None = None
) -> tuple[bytes, list[bytes | memoryview], int]:
    """(JSON header, binary parts, header length or -1 when the body is pure JSON).

    Outputs the request asked for in shared memory are written there and listed without data.
    """
    outputs = []
    parts: list[bytes | memoryview] = []
    binary_bytes = 0
    targets: dict[str, memoryview] = {}
    if enc.shm and request is not None and request.outputs is not None:
        targets = {o.name: o.target for o in request.outputs if o.target is not None}
    for t in resp.outputs:
        o: dict[str, Any] = {"name": t.name, "datatype": t.datatype.wire, "shape": list(t.shape)}
        target = targets.get(t.name)
        if target is not None:
            write_to_target(t, target)
        elif enc.is_binary(t.name):
            data = t.to_bytes()
            size = len(data) if isinstance(data, bytes) else data.nbytes
            o["parameters"] = {"binary_data_size": size}
            parts.append(data)
            binary_bytes += size
        elif not t.datatype.json_ok:
            raise InvalidArgumentError(
                f"sending {t.datatype.wire} data via JSON is not supported. Please use the binary data format "
                "for output"
            )
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
    # no binary bytes at all (empty binary outputs included): a plain JSON answer, as the reference gives
    return head, parts, (len(head) if binary_bytes else -1)


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

    def __init__(
        self, capacity: int = 256, max_header: int = 4096, shm: SharedMemoryManager | None = None
    ) -> None:
        self._shm = shm
        self._capacity = capacity
        self._max_header = max_header
        self._cache: dict[bytes, _Template] = {}

    def decode(
        self, model: Model, version: str, body: bytes, header_length: int | None
    ) -> tuple[InferRequest, OutputEncoding, _Template | None]:
        """Like ``decode_infer_request``; also the template to mark validated after validation."""
        if header_length is None or header_length <= 0 or header_length > self._max_header:
            request, enc = decode_infer_request(model, version, body, header_length, self._shm)
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
        request, enc = decode_infer_request(model, version, body, header_length, self._shm)
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
        if enc.shm:
            return None  # windows are resolved per request
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
