"""The generate extension: ``/generate`` (one JSON answer) and ``/generate_stream`` (server-sent events).

A flat JSON object in: keys named as model inputs become inputs, the others (and the members
of ``"parameters"``) request parameters. One flat JSON object out per response: outputs by name
(one element unwrapped to a scalar), ``id``, ``model_name``, ``model_version``, keys byte-sorted.
Texts, status codes and their order are the 2.51 reference's; its quirks are kept: a response
error makes the first event's status 400 whatever its code, and ``/generate`` answers a model
that produced 0 or several responses 200 with an error body.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
from collections.abc import AsyncGenerator
from functools import partial
from typing import Any, cast

import numpy as np
import orjson

from inferd.core.request import InferRequest, parse_version
from inferd.core.response import InferResponse, ResponseStream
from inferd.core.tensor import Tensor
from inferd.core.types import BYTES, DataType
from inferd.engine.facade import Core
from inferd.engine.model import Model
from inferd.engine.validate import request_prefix
from inferd.errors import InferdError, InternalError, InvalidArgumentError, UnsupportedError, error_for_code
from inferd.frontends.http.errors import error_body, send_error
from inferd.frontends.http.jsonparse import parse_json
from inferd.frontends.http.protocol import HttpRequest, Responder

log = logging.getLogger("inferd.http")

SSE_CONTENT_TYPE = "text/event-stream; charset=utf-8"
_JSON = "application/json"
NOT_ONE_RESPONSE = (
    "generate expects model to produce exactly 1 response, use generate stream for model that generates "
    "various number of responses"
)
_NOT_ONE_BODY = orjson.dumps({"error": NOT_ONE_RESPONSE})
_INT64_MIN, _INT64_END, _UINT64_END = -(2**63), 2**63, 2**64


# -- JSON in ----------------------------------------------------------------------------------
class _Obj(list[tuple[str, Any]]):
    """A JSON object as its members in order, duplicates kept (rapidjson's view of it)."""


_MISSING = object()


def _first(obj: _Obj, key: str) -> Any:
    """The value of the first member called ``key`` (rapidjson's ``Find``), else ``_MISSING``."""
    for k, v in obj:
        if k == key:
            return v
    return _MISSING


def parse_generate_body(body: bytes) -> Any:
    """The body as rapidjson reads it; objects as ``_Obj`` (duplicate keys matter: the reference
    visits every member but reads the first value of a name)."""
    nul = body.find(b"\0")
    if nul >= 0:
        body = body[:nul]
    try:
        return json.loads(body, object_pairs_hook=_Obj)
    except (ValueError, RecursionError):
        parse_json(body)  # raises rapidjson's message and offset
        raise InternalError("failed to parse the request JSON buffer") from None


def _leaves(value: Any, out: list[Any]) -> None:
    """The non-array values of ``value``, depth first (iterative: nesting depth is the client's)."""
    stack = [iter((value,))]
    while stack:
        for v in stack[-1]:
            if isinstance(v, list) and not isinstance(v, _Obj):
                stack.append(iter(v))
                break
            out.append(v)
        else:
            stack.pop()


def _shape(name: str, element_count: int, full_shape: list[int]) -> tuple[int, ...]:
    """Spread ``element_count`` over the metadata shape as the reference does: fixed dimensions
    first, then the innermost variable one takes the rest and the other variable ones 1."""
    shape = list(full_shape)
    n = element_count
    for d in reversed(shape):
        if d != -1:
            if d == 0 or n % d:
                raise InvalidArgumentError(
                    f"The schema can not convert input '{name}' to tensor with proper shape"
                )
            n //= d
    for i in range(len(shape) - 1, -1, -1):
        if shape[i] == -1:
            shape[i] = n
            n = 1
    if n != 1:
        raise InvalidArgumentError(f"The schema can not convert input '{name}' to tensor with proper shape")
    return tuple(shape)


def _data_error(what: str) -> InternalError:
    return InternalError(f"Unable to parse 'data': attempt to access JSON {what}")


def _input_tensor(name: str, dt: DataType, value: Any, full_shape: list[int]) -> Tensor:
    """One generate member as an input tensor (``ExactMappingInput``)."""
    top_count = len(value) if isinstance(value, list) and not isinstance(value, _Obj) else 1
    leaves: list[Any] = []
    _leaves(value, leaves)
    if dt is BYTES:
        for v in leaves:
            if not isinstance(v, str):
                raise InternalError(
                    "Unable to parse JSON bytes array: attempt to access JSON non-string as string"
                )
    shape = _shape(name, top_count, full_shape)
    if dt is BYTES:
        # the element count is validated by the core against the shape, as for /infer
        arr = np.empty(len(leaves), dtype=np.object_)
        arr[:] = [v.encode("utf-8", "surrogatepass") for v in leaves]
        return Tensor(name, dt, shape, array=arr)
    if not dt.json_ok:
        raise InvalidArgumentError(
            f"receiving {dt.wire} data via JSON is not supported. Please use the binary data format for "
            f"input {name}"
        )
    kind = dt.numpy.kind
    for i, v in enumerate(leaves):
        if i >= top_count:
            raise InternalError("Unable to parse 'data': Shape does not match true shape of 'data' field")
        t = type(v)
        if kind == "b":
            if t is not bool:
                raise _data_error("non-boolean as boolean")
        elif kind == "i":
            if t is not int or not _INT64_MIN <= v < _INT64_END:
                raise _data_error("non-signed-integer as signed-integer")
        elif kind == "u":
            if t is not int or not 0 <= v < _UINT64_END:
                raise _data_error("non-unsigned-integer as unsigned-integer")
        elif t is not float and t is not int:
            raise _data_error("non-number as double")
    if len(leaves) != top_count:
        raise InternalError("Unable to parse 'data': Shape does not match true shape of 'data' field")
    # C casts, as the reference stores them: integers wrap, doubles round to float32 (or inf)
    if kind == "b":
        arr = np.array(leaves, dtype=np.bool_)
    elif kind == "i":
        arr = np.array(leaves, dtype=np.int64).astype(dt.numpy)
    elif kind == "u":
        arr = np.array(leaves, dtype=np.uint64).astype(dt.numpy)
    else:
        with np.errstate(over="ignore"):
            arr = np.array([float(v) for v in leaves], dtype=np.float64).astype(dt.numpy)
    return Tensor(name, dt, shape, array=arr.reshape(shape))


def _parameter(request: InferRequest, key: str, value: Any) -> None:
    t = type(value)
    if t is str or t is bool:
        request.parameters[key] = value
    elif t is int:
        # rapidjson: an integer outside int64 is a double
        request.parameters[key] = value if _INT64_MIN <= value < _INT64_END else float(value)
    elif t is float:
        request.parameters[key] = value
    else:
        raise InvalidArgumentError(
            f"parameter '{key}' has invalid type. It should be either 'int', 'bool', or 'string'."
        )


def _convert(model: Model, request: InferRequest, doc: _Obj, top: bool) -> None:
    """Members of ``doc`` to inputs and parameters (``ConvertGenerateRequest``)."""
    specs = model.inputs
    first: dict[str, Any] = {}
    for key, value in doc:
        first.setdefault(key, value)
    for key, _ in doc:
        value = first[key]
        if top and key == "parameters":
            if key in specs:
                raise InvalidArgumentError(
                    "Keyword 'parameters' for nested schema also given as input tensor name"
                )
            if not isinstance(value, _Obj):
                raise InternalError(
                    "Expected JSON object for keyword: 'parameters': attempt to access JSON non-object as object"
                )
            try:
                _convert(model, request, value, False)
            except InferdError as e:
                raise error_for_code(e.code, f"Converting keyword: 'parameters': {e.message}") from e
            continue
        spec = specs.get(key)
        if spec is None:
            _parameter(request, key, value)
            continue
        if key in request.inputs:
            raise InvalidArgumentError(f"{request_prefix(request)}input '{key}' already exists in request")
        request.inputs[key] = _input_tensor(key, spec.datatype, value, spec.full_shape(model.max_batch_size))


def decode_generate_request(model: Model, version: str, body: bytes) -> InferRequest:
    """A generate body as an InferRequest for ``model`` (errors with the reference's texts)."""
    doc = parse_generate_body(body)
    request = InferRequest(model_name=model.name, inputs={}, model_version=version)
    if not isinstance(doc, _Obj):
        raise InternalError("attempt to get members for non-object")
    rid = _first(doc, "id")
    if rid is not _MISSING:
        if not isinstance(rid, str):
            raise InternalError("Unable to parse 'id': attempt to access JSON non-string as string")
        request.id = rid  # and, as any other member, a parameter too
    _convert(model, request, doc, True)
    return request


# -- JSON out ---------------------------------------------------------------------------------
_NON_FINITE = {math.inf: b"Infinity", -math.inf: b"-Infinity"}


def _float_json(v: float) -> bytes:
    if v != v:
        return b"NaN"
    return _NON_FINITE.get(v) or orjson.dumps(v)


def _output_json(t: Tensor) -> bytes:
    """An output's value: a scalar when it has one element, else the flat list (as rapidjson writes)."""
    dt = t.datatype
    if not dt.json_ok:
        raise InvalidArgumentError(
            f"sending {dt.wire} data via JSON is not supported. Please use the binary data format for output"
        )
    flat = t.array.reshape(-1)
    if dt is BYTES:
        values: Any = [
            v.decode("utf-8", "replace") if isinstance(v, (bytes, bytearray)) else str(v) for v in flat
        ]
        return orjson.dumps(values[0] if len(values) == 1 else values)
    if dt.numpy.kind == "f":
        as_double = flat.astype(np.float64)  # the reference widens floats to double, digits and all
        if not np.isfinite(as_double).all():
            parts = [_float_json(float(v)) for v in as_double]
            return parts[0] if len(parts) == 1 else b"[" + b",".join(parts) + b"]"
        flat = as_double
    if flat.size == 1:
        return orjson.dumps(flat[0], option=orjson.OPT_SERIALIZE_NUMPY)
    if not (flat.flags.c_contiguous and flat.dtype.isnative):
        flat = np.ascontiguousarray(flat, dtype=flat.dtype.newbyteorder("="))
    return orjson.dumps(flat, option=orjson.OPT_SERIALIZE_NUMPY)


def encode_generate_response(resp: InferResponse) -> bytes:
    """One response as the reference's flat object (an error response raises its error)."""
    if resp.error is not None:
        raise resp.error
    members: dict[str, bytes] = {}
    if resp.id:
        members["id"] = orjson.dumps(resp.id)
    members["model_name"] = orjson.dumps(resp.model_name)
    members["model_version"] = orjson.dumps(resp.model_version)
    for key, value in resp.parameters.items():
        if isinstance(value, (bytes, bytearray)):
            raise UnsupportedError(
                f"Response parameter '{key}' has type 'TRITONSERVER_PARAMETER_BYTES' which is not currently "
                "supported"
            )
        members.setdefault(key, orjson.dumps(value))
    for t in resp.outputs:
        if t.name not in members:  # a name taken already keeps its first value, as std::map::emplace
            members[t.name] = _output_json(t)
    # the reference keeps members in a std::map: byte order of the UTF-8 names (= code point order)
    return b"{" + b",".join(orjson.dumps(k) + b":" + members[k] for k in sorted(members)) + b"}"


def _answer(resp: InferResponse) -> tuple[bool, bytes]:
    """(ok, JSON) of one response: its flat object, or its error."""
    try:
        return True, encode_generate_response(resp)
    except InferdError as e:
        return False, error_body(e)


# -- HTTP -------------------------------------------------------------------------------------
class GenerateRoutes:
    """``/generate`` and ``/generate_stream`` over one core Server."""

    def __init__(self, core: Core) -> None:
        self.core = core
        #: the pumps of open event streams (owned: a strong reference until they end)
        self._tasks: set[asyncio.Task[None]] = set()

    def handle(self, req: HttpRequest, resp: Responder, name: str, version: str, streaming: bool) -> None:
        """Look up, decode, submit, and answer as the responses come (the method is POST)."""

        def decode(model: Model) -> InferRequest:
            enc = req.headers.get("content-encoding", "").strip().lower()
            if enc and enc != "identity":
                raise InvalidArgumentError("Unsupported content-encoding, only 'identity' is supported.")
            return decode_generate_request(model, version, req.body)

        try:
            version = parse_version(version)
            stream = self.core.submit(name, version, decode)
        except InferdError as e:
            send_error(resp, e)
            return
        resp.on_close = stream.cancel_on_close
        if streaming:
            task = asyncio.get_running_loop().create_task(self._pump(stream, resp))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            resp.on_close = partial(_cancel_stream, stream, task)
        else:
            stream.set_callback(_Collect(resp))

    @staticmethod
    async def _pump(stream: ResponseStream, resp: Responder) -> None:
        try:
            await GenerateRoutes._events(stream, resp)
        except Exception:  # a bug of ours: answer, log, keep serving
            log.exception("streaming generate responses failed")
            resp.send(500, b'{"error":"internal server error"}', _JSON)
            resp.end_chunked()

    @staticmethod
    async def _events(stream: ResponseStream, resp: Responder) -> None:
        """Responses as server-sent events; the first one fixes the status. While the client reads
        slower than the model produces, responses wait in the stream, not encoded."""
        started = False
        responses = cast(AsyncGenerator[tuple[InferResponse | None, bool], None], stream.__aiter__())
        async with contextlib.aclosing(responses):
            async for r, final in responses:
                if r is not None:
                    ok, body = _answer(r)
                    if not started:
                        resp.start_chunked(200 if ok else 400, SSE_CONTENT_TYPE)
                        started = True
                    resp.write_chunk(b"data: " + body + b"\n\n")
                if final:
                    break
                if resp.must_wait:
                    await resp.drain()
                    if resp.closed:
                        return
        if not started:
            resp.start_chunked(200, SSE_CONTENT_TYPE)
        resp.end_chunked()


def _cancel_stream(stream: ResponseStream, task: asyncio.Task[None]) -> None:
    """The client of an event stream went away: cancel the request and stop pumping its responses."""
    stream.cancel_on_close()
    task.cancel()


class _Collect:
    """``/generate``: waits for the final flag, then answers the one response (or the error)."""

    __slots__ = ("_body", "_count", "_ok", "_resp")

    def __init__(self, resp: Responder) -> None:
        self._resp = resp
        self._count = 0
        self._ok = True
        self._body = b""

    def __call__(self, r: InferResponse | None, final: bool) -> None:
        if r is not None:
            self._count += 1
            if self._count == 1:
                self._ok, self._body = _answer(r)
            else:
                self._body = b""  # let it go: only the error text will be sent
        if not final:
            return
        resp = self._resp
        # the status is the first callback's: a final flag alone is a success
        resp.start_chunked(200 if self._ok else 400, _JSON)
        resp.write_chunk(self._body if self._count == 1 else _NOT_ONE_BODY)
        resp.end_chunked()
