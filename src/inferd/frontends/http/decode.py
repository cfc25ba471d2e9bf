"""KServe v2 HTTP requests: JSON and binary-tensor bodies -> InferRequest.

Binary inputs become zero-copy ``memoryview`` slices of the received body; members are read in
the reference's order and fail with its texts (rapidjson's wording where a client could see it).
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any

import numpy as np

from inferd.core.request import SEQUENCE_END, SEQUENCE_START, InferRequest, RequestedOutput
from inferd.core.tensor import Tensor
from inferd.core.types import BY_WIRE, BYTES, DataType
from inferd.engine.model import Model
from inferd.engine.validate import request_prefix
from inferd.errors import InternalError, InvalidArgumentError, NotFoundError
from inferd.frontends.http.encode import OutputEncoding
from inferd.frontends.http.jsonparse import parse_json

if TYPE_CHECKING:
    from inferd.shm.system import SharedMemoryManager, Window

#: Request parameters the server consumes; never passed on to the model.
RESERVED_PARAMETERS = frozenset(
    {"sequence_id", "sequence_start", "sequence_end", "priority", "timeout", "binary_data_output", "headers"}
)


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
        if type(d) is not int or not 0 <= d < 2**64:
            raise InternalError(
                "Unable to parse 'shape': attempt to access JSON non-unsigned-integer as unsigned-integer"
            )
    return tuple(v)


_JSON_KIND_ERR = {
    "b": "attempt to access JSON non-boolean as boolean",
    "i": "attempt to access JSON non-signed-integer as signed-integer",
    "u": "attempt to access JSON non-unsigned-integer as unsigned-integer",
    "f": "attempt to access JSON non-number as double",
}


#: the reference's limit (newer releases): deeper ``data`` is refused before it is walked
MAX_JSON_DEPTH = 100


def _flatten(data: list[Any], out: list[Any]) -> None:
    """The leaves of nested lists, depth first (iterative: the nesting depth is the client's)."""
    stack = [iter(data)]
    while stack:
        for v in stack[-1]:
            if isinstance(v, list):
                if len(stack) >= MAX_JSON_DEPTH:
                    raise InvalidArgumentError(
                        f"JSON nesting depth exceeds maximum allowed limit ({MAX_JSON_DEPTH})"
                    )
                stack.append(iter(v))
                break
            out.append(v)
        else:
            stack.pop()


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


def _shm_window(params: dict[str, Any], shm: SharedMemoryManager | None) -> Window:
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
            request.inputs[name] = (
                Tensor(name, dt, shape, raw=window)
                if type(window) is memoryview
                else window.input_tensor(name, dt, shape)
            )
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
