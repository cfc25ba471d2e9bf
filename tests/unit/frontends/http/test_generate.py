"""The generate extension: body -> InferRequest, response -> flat JSON, SSE pump, chunked HTTP.

Expected texts and values were observed on the 2.51 reference with the fixture models gen_echo,
gen_echo_b and dec_ctl (tests/fixtures/models).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from inferd.core.request import InferRequest
from inferd.core.response import InferResponse, ResponseStream
from inferd.core.tensor import Tensor
from inferd.engine.model import Model
from inferd.engine.validate import validate_request
from inferd.errors import (
    InferdError,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    UnavailableError,
    UnsupportedError,
)
from inferd.frontends.http.generate import (
    NOT_ONE_RESPONSE,
    SSE_CONTENT_TYPE,
    GenerateRoutes,
    _Collect,
    decode_generate_request,
    encode_generate_response,
)
from inferd.frontends.http.protocol import HttpConnection, HttpRequest, Responder
from inferd.repository import normalize_config, parse_config_text

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "models"
_MODELS: dict[str, Model] = {}


def fixture_model(name: str) -> Model:
    if name not in _MODELS:
        model_dir = FIXTURES / name
        cfg = parse_config_text((model_dir / "config.pbtxt").read_text(), "config.pbtxt")
        normalize_config(cfg, name, model_dir=model_dir)
        _MODELS[name] = Model(name, 1, cfg, model_dir)
    return _MODELS[name]


def decode(body: str | bytes, name: str = "gen_echo") -> InferRequest:
    raw = body.encode() if isinstance(body, str) else body
    return decode_generate_request(fixture_model(name), "", raw)


def inputs(request: InferRequest) -> dict[str, tuple[str, list[int], list[Any]]]:
    out = {}
    for name, t in request.inputs.items():
        values = [v.decode() if isinstance(v, bytes) else v for v in t.array.reshape(-1).tolist()]
        out[name] = (t.datatype.wire, list(t.shape), values)
    return out


# -- request: inputs and parameters -------------------------------------------------------------


def test_inputs_and_parameters() -> None:
    r = decode(
        '{"text_input":["a","b"],"id":"g1","f":[1,2.5],"i":7,"b":[true,false],"u8":[1,2],'
        '"foo":"bar","n":3,"fl":1.5,"bo":true}'
    )
    assert inputs(r) == {
        "text_input": ("BYTES", [2], ["a", "b"]),
        "f": ("FP32", [2], [1.0, 2.5]),
        "i": ("INT64", [1], [7]),
        "b": ("BOOL", [2], [True, False]),
        "u8": ("UINT8", [2], [1, 2]),
    }
    # "id" is the request id and, as every member that is no input, a parameter too
    assert r.id == "g1"
    assert r.parameters == {"id": "g1", "foo": "bar", "n": 3, "fl": 1.5, "bo": True}
    validate_request(r, fixture_model("gen_echo"))


def test_the_parameters_object_is_flattened_with_the_same_rule() -> None:
    r = decode('{"text_input":"hi","parameters":{"stream":false,"temperature":0,"f":[1,2]}}')
    assert r.parameters == {"stream": False, "temperature": 0}
    assert inputs(r) == {"text_input": ("BYTES", [1], ["hi"]), "f": ("FP32", [2], [1.0, 2.0])}
    # reserved names of /infer are only parameters here; "triton_" is no reserved prefix
    r = decode('{"sequence_id":1,"priority":3,"timeout":5,"binary_data_output":true,"triton_x":1}')
    assert r.parameters == {
        "sequence_id": 1,
        "priority": 3,
        "timeout": 5,
        "binary_data_output": True,
        "triton_x": 1,
    }
    assert (r.correlation_id, r.priority, r.timeout_us) == (0, 0, 0)
    # numbers: doubles are welcome, an integer beyond int64 is a double
    assert decode('{"a":1.5,"big":18446744073709551615}').parameters == {
        "a": 1.5,
        "big": 1.8446744073709552e19,
    }
    # "parameters" inside "parameters" is just a parameter
    assert decode('{"parameters":{"parameters":1}}').parameters == {"parameters": 1}


def test_duplicate_members_read_the_first_value() -> None:
    # rapidjson visits every member but Find() returns the first one of a name
    assert decode('{"a":1,"a":2}').parameters == {"a": 1}
    assert decode('{"parameters":{"x":1},"parameters":{"y":2}}').parameters == {"x": 1}
    r = decode('{"parameters":{"id":"b"},"id":"a"}')
    assert (r.id, r.parameters) == ("a", {"id": "a"})
    r = decode('{"id":"a","parameters":{"id":"b"}}')
    assert (r.id, r.parameters) == ("a", {"id": "b"})
    assert decode('{"parameters":{"id":"b"}}').id == ""


@pytest.mark.parametrize(
    ("body", "name", "want"),
    [
        ('{"fixed4":[1,2,3,4]}', "gen_echo", [4]),
        ('{"mat":[1,2,3,4,5,6]}', "gen_echo", [2, 3]),
        ('{"f":[]}', "gen_echo", [0]),
        ('{"f":[[1],[2]]}', "gen_echo", [2]),  # nested arrays are flattened, the top level counts
        ('{"f":[1,[2]]}', "gen_echo", [2]),
        ('{"f":5}', "gen_echo_b", [1, 1]),
        ('{"f":[1,2,3]}', "gen_echo_b", [1, 3]),
        ('{"fixed4":[1,2,3,4]}', "gen_echo_b", [1, 4]),
        ('{"fixed4":[1,2,3,4,5,6,7,8]}', "gen_echo_b", [2, 4]),
        ('{"mat":[1,2,3,4]}', "gen_echo_b", [1, 2, 2]),
        ('{"text_input":"s"}', "gen_echo_b", [1, 1]),
        ('{"f":[]}', "gen_echo_b", [1, 0]),
        ('{"IN":1}', "dec_ctl", [1]),
    ],
)
def test_shapes_spread_the_element_count_over_the_metadata_shape(
    body: str, name: str, want: list[int]
) -> None:
    r = decode(body, name)
    (t,) = r.inputs.values()
    assert list(t.shape) == want
    validate_request(r, fixture_model(name))  # which shapes BYTES arrays too
    assert t.array.shape == tuple(want)


def test_datatype_conversions_are_c_casts() -> None:
    got = inputs(decode('{"i8":300,"i32":3000000000,"u64":18446744073709551615,"d":1,"f":1e40}'))
    assert got["i8"] == ("INT8", [1], [44])
    assert got["i32"] == ("INT32", [1], [-1294967296])
    assert got["u64"] == ("UINT64", [1], [18446744073709551615])
    assert got["d"] == ("FP64", [1], [1.0])
    assert got["f"] == ("FP32", [1], [float("inf")])
    (nan,) = decode('{"f":NaN}').inputs["f"].array.tolist()
    assert nan != nan
    # a NUL inside a JSON string is data; the body ends at a NUL byte itself
    assert inputs(decode('{"text_input":"a\\u0000b"}'))["text_input"][2] == ["a\0b"]
    assert decode(b'{"text_input":"x"}\0garbage').inputs["text_input"].array.tolist() == [b"x"]


_ERRORS: list[tuple[str, str, type[InferdError], str]] = [
    ("gen_echo", "", InternalError, "failed to parse the request JSON buffer: The document is empty. at 0"),
    (
        "gen_echo",
        "{bad",
        InternalError,
        "failed to parse the request JSON buffer: Missing a name for object member. at 1",
    ),
    (
        "gen_echo",
        '{"text_input":"x"} x',
        InternalError,
        "failed to parse the request JSON buffer: The document root must not be followed by other values. at 19",
    ),
    ("gen_echo", "[1,2]", InternalError, "attempt to get members for non-object"),
    ("gen_echo", '"str"', InternalError, "attempt to get members for non-object"),
    ("gen_echo", "5", InternalError, "attempt to get members for non-object"),
    (
        "gen_echo",
        '{"id":5}',
        InternalError,
        "Unable to parse 'id': attempt to access JSON non-string as string",
    ),
    (
        "gen_echo",
        '{"a":{},"id":true}',
        InternalError,
        "Unable to parse 'id': attempt to access JSON non-string as string",
    ),
    (
        "gen_echo",
        '{"parameters":5}',
        InternalError,
        "Expected JSON object for keyword: 'parameters': attempt to access JSON non-object as object",
    ),
    (
        "gen_echo",
        '{"parameters":[1]}',
        InternalError,
        "Expected JSON object for keyword: 'parameters': attempt to access JSON non-object as object",
    ),
    (
        "gen_echo",
        '{"parameters":{"a":{"b":1}}}',
        InvalidArgumentError,
        "Converting keyword: 'parameters': parameter 'a' has invalid type. It should be either 'int', 'bool', or 'string'.",
    ),
    (
        "gen_echo",
        '{"parameters":{"parameters":{}}}',
        InvalidArgumentError,
        "Converting keyword: 'parameters': parameter 'parameters' has invalid type. It should be either 'int', 'bool', "
        "or 'string'.",
    ),
    (
        "gen_echo",
        '{"parameters":{"f":"x"}}',
        InternalError,
        "Converting keyword: 'parameters': Unable to parse 'data': attempt to access JSON non-number as double",
    ),
    (
        "gen_echo",
        '{"f":1,"parameters":{"f":2}}',
        InvalidArgumentError,
        "Converting keyword: 'parameters': [request id: <id_unknown>] input 'f' already exists in request",
    ),
    (
        "gen_echo",
        '{"f":1,"f":2}',
        InvalidArgumentError,
        "[request id: <id_unknown>] input 'f' already exists in request",
    ),
    (
        "gen_echo",
        '{"id":"q","f":1,"f":2}',
        InvalidArgumentError,
        "[request id: q] input 'f' already exists in request",
    ),
    *(
        (
            "gen_echo",
            body,
            InvalidArgumentError,
            "parameter 'a' has invalid type. It should be either 'int', 'bool', or 'string'.",
        )
        for body in ('{"a":{"b":1}}', '{"a":[1]}', '{"a":null}')
    ),
    (
        "gen_echo",
        '{"fixed4":[1,2]}',
        InvalidArgumentError,
        "The schema can not convert input 'fixed4' to tensor with proper shape",
    ),
    (
        "gen_echo",
        '{"fixed4":[1,2,3,4,5,6,7,8]}',
        InvalidArgumentError,
        "The schema can not convert input 'fixed4' to tensor with proper shape",
    ),
    (
        "gen_echo",
        '{"fixed4":[]}',
        InvalidArgumentError,
        "The schema can not convert input 'fixed4' to tensor with proper shape",
    ),
    (
        "gen_echo",
        '{"mat":[1,2,3]}',
        InvalidArgumentError,
        "The schema can not convert input 'mat' to tensor with proper shape",
    ),
    (
        "dec_ctl",
        '{"IN":[1,2]}',
        InvalidArgumentError,
        "The schema can not convert input 'IN' to tensor with proper shape",
    ),
    (
        "gen_echo",
        '{"f":[[1,2],[3,4]]}',
        InternalError,
        "Unable to parse 'data': Shape does not match true shape of 'data' field",
    ),
    (
        "gen_echo",
        '{"f":[[1],[]]}',
        InternalError,
        "Unable to parse 'data': Shape does not match true shape of 'data' field",
    ),
    (
        "gen_echo",
        '{"f":"x"}',
        InternalError,
        "Unable to parse 'data': attempt to access JSON non-number as double",
    ),
    (
        "gen_echo",
        '{"f":true}',
        InternalError,
        "Unable to parse 'data': attempt to access JSON non-number as double",
    ),
    (
        "gen_echo",
        '{"f":null}',
        InternalError,
        "Unable to parse 'data': attempt to access JSON non-number as double",
    ),
    (
        "gen_echo",
        '{"f":{"a":1}}',
        InternalError,
        "Unable to parse 'data': attempt to access JSON non-number as double",
    ),
    (
        "gen_echo",
        '{"f":[null]}',
        InternalError,
        "Unable to parse 'data': attempt to access JSON non-number as double",
    ),
    (
        "gen_echo",
        '{"d":"x"}',
        InternalError,
        "Unable to parse 'data': attempt to access JSON non-number as double",
    ),
    (
        "gen_echo",
        '{"i":1.5}',
        InternalError,
        "Unable to parse 'data': attempt to access JSON non-signed-integer as signed-integer",
    ),
    (
        "gen_echo",
        '{"i32":1.5}',
        InternalError,
        "Unable to parse 'data': attempt to access JSON non-signed-integer as signed-integer",
    ),
    (
        "gen_echo",
        '{"i8":1.5}',
        InternalError,
        "Unable to parse 'data': attempt to access JSON non-signed-integer as signed-integer",
    ),
    (
        "gen_echo",
        '{"i":9223372036854775808}',
        InternalError,
        "Unable to parse 'data': attempt to access JSON non-signed-integer as signed-integer",
    ),
    (
        "gen_echo",
        '{"u8":-1}',
        InternalError,
        "Unable to parse 'data': attempt to access JSON non-unsigned-integer as unsigned-integer",
    ),
    (
        "gen_echo",
        '{"u64":-1}',
        InternalError,
        "Unable to parse 'data': attempt to access JSON non-unsigned-integer as unsigned-integer",
    ),
    (
        "gen_echo",
        '{"b":1}',
        InternalError,
        "Unable to parse 'data': attempt to access JSON non-boolean as boolean",
    ),
    (
        "gen_echo",
        '{"b":[true,1]}',
        InternalError,
        "Unable to parse 'data': attempt to access JSON non-boolean as boolean",
    ),
    (
        "gen_echo",
        '{"text_input":5}',
        InternalError,
        "Unable to parse JSON bytes array: attempt to access JSON non-string as string",
    ),
    (
        "gen_echo",
        '{"text_input":null}',
        InternalError,
        "Unable to parse JSON bytes array: attempt to access JSON non-string as string",
    ),
    (
        "gen_echo",
        '{"h":[1.5]}',
        InvalidArgumentError,
        "receiving FP16 data via JSON is not supported. Please use the binary data format for input h",
    ),
]


@pytest.mark.parametrize(("name", "body", "kind", "message"), _ERRORS)
def test_malformed_bodies(name: str, body: str, kind: type[InferdError], message: str) -> None:
    with pytest.raises(InferdError) as info:
        decode(body, name)
    assert type(info.value) is kind
    assert info.value.message == message
    # JSON errors of the generate endpoints answer with the code's status (500 or 400)
    assert info.value.code.http_status == (500 if kind is InternalError else 400)


def test_string_counts_are_validated_by_the_core() -> None:
    model = fixture_model("gen_echo")
    for body, message in [
        (
            '{"text_input":[["a","b"],["c"]]}',
            "[request id: <id_unknown>] unexpected number of string elements 3 for inference input "
            "'text_input' for model 'gen_echo', expecting 2",
        ),
        (
            '{"text_input":[["a"],[]]}',
            "[request id: <id_unknown>] expected 2 string elements for inference input 'text_input' for "
            "model 'gen_echo', got 1",
        ),
    ]:
        with pytest.raises(InvalidArgumentError, match=None) as info:
            validate_request(decode(body), model)
        assert info.value.message == message
    r = decode('{"text_input":[["a"],["b"]]}')
    validate_request(r, model)
    assert inputs(r)["text_input"] == ("BYTES", [2], ["a", "b"])


def test_missing_required_input_is_the_cores_error() -> None:
    r = decode('{"id":"q"}', "dec_ctl")
    with pytest.raises(InvalidArgumentError) as info:
        validate_request(r, fixture_model("dec_ctl"))
    assert info.value.message == (
        "[request id: q] expected 1 inputs but got 0 inputs for model 'dec_ctl'. Got input(s) [], but missing "
        "required input(s) ['IN']. Please provide all required input(s)."
    )


# -- response -----------------------------------------------------------------------------------


def _resp(*outputs: Tensor, rid: str = "", **params: Any) -> InferResponse:
    return InferResponse("gen_echo", "1", rid, outputs=list(outputs), parameters=params)


def test_response_is_flat_byte_sorted_and_unwraps_single_elements() -> None:
    body = encode_generate_response(
        _resp(
            Tensor.from_array("text_output", np.array([b"X"], np.object_)),
            Tensor.from_array("Zm", np.array([[1.5, 2.0], [3.0, 4.0]], np.float32)),
            Tensor.from_array("Am", np.array([[True]])),
            Tensor.from_array("Bm", np.array([b"x", b"y"], np.object_)),
            Tensor.from_array("EMPTY", np.zeros([0], np.float32)),
            Tensor.from_array("U", np.array([2**63 + 5], np.uint64)),
            Tensor.from_array("aaa", np.array([1], np.int32)),
            rid="zz",
        )
    )
    assert body == (
        b'{"Am":true,"Bm":["x","y"],"EMPTY":[],"U":9223372036854775813,"Zm":[1.5,2.0,3.0,4.0],"aaa":1,'
        b'"id":"zz","model_name":"gen_echo","model_version":"1","text_output":"X"}'
    )
    # no id: no key; UTF-8 names sort by their bytes
    body = encode_generate_response(
        _resp(*(Tensor.from_array(k, np.array([1], np.int32)) for k in ("\u00e9", "Z", "_", "\u4e2d")))
    )
    assert list(json.loads(body)) == ["Z", "_", "model_name", "model_version", "\u00e9", "\u4e2d"]


def test_floats_are_written_as_doubles_with_nan_and_infinity() -> None:
    f = Tensor.from_array("F", np.array([0.1, 1e-8, np.nan, np.inf, -np.inf], np.float32))
    assert encode_generate_response(_resp(f)) == (
        b'{"F":[0.10000000149011612,9.99999993922529e-9,NaN,Infinity,-Infinity],'
        b'"model_name":"gen_echo","model_version":"1"}'
    )
    one = Tensor.from_array("F", np.array([np.nan], np.float64))
    assert encode_generate_response(_resp(one)).startswith(b'{"F":NaN,')
    big = Tensor.from_array("F", np.array([-np.inf, 3.25, 1e-30, 123456789], np.float32))
    assert encode_generate_response(_resp(big)).startswith(
        b'{"F":[-Infinity,3.25,1.0000000031710769e-30,123456792.0],'
    )


def test_reserved_names_and_parameters() -> None:
    # model_name, model_version and id come first: an output of that name does not replace them
    body = encode_generate_response(
        _resp(
            Tensor.from_array("model_name", np.array([7], np.int32)), rid="r", temperature=1, flag=True, s="v"
        )
    )
    assert json.loads(body) == {
        "flag": True,
        "id": "r",
        "model_name": "gen_echo",
        "model_version": "1",
        "s": "v",
        "temperature": 1,
    }
    with pytest.raises(UnsupportedError) as info:
        encode_generate_response(_resp(p=b"raw"))
    assert info.value.message == (
        "Response parameter 'p' has type 'TRITONSERVER_PARAMETER_BYTES' which is not currently supported"
    )


def test_outputs_json_cannot_carry() -> None:
    with pytest.raises(InvalidArgumentError) as info:
        encode_generate_response(_resp(Tensor.from_array("H", np.array([1.5], np.float16))))
    assert info.value.message == (
        "sending FP16 data via JSON is not supported. Please use the binary data format for output"
    )
    with pytest.raises(UnavailableError):
        encode_generate_response(InferResponse("m", "1", error=UnavailableError("gone")))


# -- HTTP: chunked responses on a connection -----------------------------------------------------


class FakeTransport:
    """What HttpConnection writes, and uvloop's flow control driven by hand."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.closed = False
        self.reading = True

    def write(self, data: bytes) -> None:
        self.data += data

    def writelines(self, parts: list[bytes]) -> None:
        for p in parts:
            self.data += p

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def get_write_buffer_size(self) -> int:
        return len(self.data)

    def take(self) -> bytes:
        out = bytes(self.data)
        self.data.clear()
        return out


def _connection(app: Callable[[HttpRequest, Responder], Any]) -> tuple[HttpConnection, FakeTransport]:
    conn = HttpConnection(app, set())
    transport = FakeTransport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    return conn, transport


def _post(path: str, body: bytes = b"{}", version: str = "1.1") -> bytes:
    return f"POST {path} HTTP/{version}\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body


def test_chunked_response_framing() -> None:
    held: list[Responder] = []
    conn, transport = _connection(lambda req, resp: held.append(resp))
    conn.data_received(_post("/a"))
    (r,) = held
    r.start_chunked(200, SSE_CONTENT_TYPE)
    r.write_chunk(b"data: 1\n\n")
    r.write_chunk(b"")  # nothing: an empty chunk would end the body
    r.write_chunk(b"data: 22\n\n")
    r.end_chunked()
    r.write_chunk(b"late")  # after the end: nothing
    assert transport.take() == (
        b"HTTP/1.1 200 OK\r\nX-Content-Type-Options: nosniff\r\nContent-Type: text/event-stream; charset=utf-8\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n"
        b"9\r\ndata: 1\n\n\r\na\r\ndata: 22\n\n\r\n0\r\n\r\n"
    )
    assert not transport.closed


def test_http_1_0_gets_the_body_until_close() -> None:
    held: list[Responder] = []
    conn, transport = _connection(lambda req, resp: held.append(resp))
    conn.data_received(_post("/a", version="1.0"))
    (r,) = held
    r.start_chunked(200, "application/json")
    r.write_chunk(b'{"a":1}')
    r.end_chunked()
    assert (
        transport.take()
        == b"HTTP/1.1 200 OK\r\nX-Content-Type-Options: nosniff\r\nContent-Type: application/json\r\n"
        b'Connection: close\r\n\r\n{"a":1}'
    )
    assert transport.closed


def test_pipelined_answers_keep_request_order() -> None:
    held: list[Responder] = []
    conn, transport = _connection(lambda req, resp: held.append(resp))
    conn.data_received(_post("/1") + _post("/2") + _post("/3") + _post("/4"))
    first, second, third, fourth = held
    # the second starts streaming and the third answers before the first: both wait
    second.start_chunked(200, SSE_CONTENT_TYPE)
    second.write_chunk(b"two-a")
    third.send(200, b"three")
    assert transport.take() == b""
    assert second.must_wait
    first.start_chunked(200, "application/json")
    first.write_chunk(b"one")
    assert not first.must_wait and second.must_wait
    first.end_chunked()
    # the first ended: the second's held chunks go out, the third still waits for its end
    out = transport.take()
    assert out.index(b"one") < out.index(b"two-a")
    assert b"three" not in out
    assert not second.must_wait
    second.write_chunk(b"two-b")
    fourth.send(200, b"four")
    second.end_chunked()
    out = transport.take()
    assert out.index(b"two-b") < out.index(b"0\r\n\r\n") < out.index(b"three") < out.index(b"four")


def test_flow_control_and_drain() -> None:
    async def main() -> None:
        held: list[Responder] = []
        conn, _ = _connection(lambda req, resp: held.append(resp))
        conn.data_received(_post("/a"))
        (r,) = held
        r.start_chunked(200, SSE_CONTENT_TYPE)
        assert not r.must_wait
        conn.pause_writing()
        assert r.must_wait
        waiter = asyncio.ensure_future(r.drain())
        await asyncio.sleep(0)
        assert not waiter.done()
        conn.resume_writing()
        await asyncio.wait_for(waiter, 5)
        assert not r.must_wait

    asyncio.run(main())


def test_connection_lost_cancels_what_is_still_owed() -> None:
    async def main() -> None:
        held: list[Responder] = []
        conn, _ = _connection(lambda req, resp: held.append(resp))
        conn.data_received(_post("/1") + _post("/2") + _post("/3"))
        calls: list[int] = []
        for i, r in enumerate(held):
            r.on_close = lambda i=i: calls.append(i)
        held[0].send(200, b"done")
        held[2].start_chunked(200, SSE_CONTENT_TYPE)
        conn.pause_writing()
        waiter = asyncio.ensure_future(held[2].drain())
        await asyncio.sleep(0)
        conn.connection_lost(None)
        await asyncio.wait_for(waiter, 5)  # a drain returns once the client is gone
        assert calls == [1, 2]  # the answered request is not cancelled
        assert held[2].closed
        held[2].write_chunk(b"x")  # harmless
        held[1].send(200, b"late")

    asyncio.run(main())


# -- the SSE pump and /generate's collector -------------------------------------------------------


class FakeResponder:
    """Records what a generate handler writes."""

    def __init__(self) -> None:
        self.status = 0
        self.content_type = ""
        self.chunks: list[bytes] = []
        self.ended = False
        self.must_wait = False
        self.closed = False
        self.drained = asyncio.Event()
        self.draining = asyncio.Event()  # the pump waits in drain()

    def start_chunked(self, status: int, content_type: str, extra_headers: Any = None) -> None:
        assert self.status == 0
        self.status, self.content_type = status, content_type

    def write_chunk(self, data: bytes) -> None:
        assert self.status and not self.ended
        self.chunks.append(data)

    def end_chunked(self) -> None:
        self.ended = True

    def send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        raise AssertionError("a generate answer is chunked")

    async def drain(self) -> None:
        self.draining.set()
        await self.drained.wait()
        self.must_wait = False


WAIT_S = 30


async def _until(cond: Callable[[], bool], what: str) -> None:
    """Lets the loop run until ``cond`` holds; fails naming ``what`` after WAIT_S."""
    deadline = time.monotonic() + WAIT_S
    while not cond():
        assert time.monotonic() < deadline, f"no {what} after {WAIT_S} s"
        await asyncio.sleep(0)


def _ok(i: int) -> InferResponse:
    return InferResponse("dec_ctl", "1", outputs=[Tensor.from_array("OUT", np.array([i], np.int32))])


def _err(msg: str = "custom failure") -> InferResponse:
    return InferResponse("dec_ctl", "1", error=NotFoundError(msg))


def _stream_events(items: list[tuple[InferResponse | None, bool]]) -> FakeResponder:
    async def main() -> FakeResponder:
        stream = ResponseStream(asyncio.get_running_loop())
        for r, final in items:
            stream.send(r, final)
        resp = FakeResponder()
        await asyncio.wait_for(GenerateRoutes._pump(stream, resp), 5)  # type: ignore[arg-type]
        return resp

    return asyncio.run(main())


def test_stream_events_status_fixed_by_the_first() -> None:
    resp = _stream_events([(_ok(0), False), (_err(), False), (_ok(2), False), (None, True)])
    assert (resp.status, resp.content_type, resp.ended) == (200, SSE_CONTENT_TYPE, True)
    assert resp.chunks == [
        b'data: {"OUT":0,"model_name":"dec_ctl","model_version":"1"}\n\n',
        b'data: {"error":"custom failure"}\n\n',
        b'data: {"OUT":2,"model_name":"dec_ctl","model_version":"1"}\n\n',
    ]
    # an error first: 400 whatever its code, and the stream goes on
    resp = _stream_events([(_err(), False), (_ok(1), True)])
    assert resp.status == 400
    assert resp.chunks == [
        b'data: {"error":"custom failure"}\n\n',
        b'data: {"OUT":1,"model_name":"dec_ctl","model_version":"1"}\n\n',
    ]
    # no response at all: 200 and an empty stream
    resp = _stream_events([(None, True)])
    assert (resp.status, resp.chunks, resp.ended) == (200, [], True)


def test_stream_waits_while_the_client_reads_slowly() -> None:
    async def main() -> None:
        stream = ResponseStream(asyncio.get_running_loop())
        resp = FakeResponder()
        task = asyncio.ensure_future(GenerateRoutes._pump(stream, resp))  # type: ignore[arg-type]
        stream.send(_ok(0))
        await _until(lambda: len(resp.chunks) >= 1, "the first response written")
        assert len(resp.chunks) == 1
        resp.must_wait = True  # the transport's buffer is full
        stream.send(_ok(1))
        stream.send(_ok(2))
        await asyncio.wait_for(resp.draining.wait(), WAIT_S)
        # the pump stopped pulling: responses wait in the stream, not encoded
        assert len(resp.chunks) == 2
        resp.drained.set()
        stream.send(_ok(3), True)
        await asyncio.wait_for(task, 5)
        assert [json.loads(c[6:])["OUT"] for c in resp.chunks] == [0, 1, 2, 3]
        assert resp.ended

    asyncio.run(main())


def test_stream_stops_when_the_client_is_gone() -> None:
    async def main() -> None:
        stream = ResponseStream(asyncio.get_running_loop())
        resp = FakeResponder()
        task = asyncio.ensure_future(GenerateRoutes._pump(stream, resp))  # type: ignore[arg-type]
        resp.must_wait = True
        stream.send(_ok(0))
        await asyncio.wait_for(resp.draining.wait(), WAIT_S)  # written, and waiting for the client
        resp.closed = True
        resp.drained.set()
        await asyncio.wait_for(task, 5)
        assert len(resp.chunks) == 1 and not resp.ended

    asyncio.run(main())


def _collect(items: list[tuple[InferResponse | None, bool]]) -> FakeResponder:
    resp = FakeResponder()
    collect = _Collect(resp)  # type: ignore[arg-type]
    for r, final in items:
        collect(r, final)
    assert resp.ended
    assert resp.content_type == "application/json"
    return resp


def test_generate_needs_exactly_one_response() -> None:
    not_one = json.dumps({"error": NOT_ONE_RESPONSE}, separators=(",", ":")).encode()
    resp = _collect([(_ok(0), True)])
    assert (resp.status, resp.chunks) == (200, [b'{"OUT":0,"model_name":"dec_ctl","model_version":"1"}'])
    resp = _collect([(_ok(0), False), (None, True)])
    assert (resp.status, resp.chunks) == (200, [b'{"OUT":0,"model_name":"dec_ctl","model_version":"1"}'])
    assert _collect([(None, True)]).chunks == [not_one]
    resp = _collect([(_ok(0), False), (_ok(1), False), (_ok(2), True)])
    assert (resp.status, resp.chunks) == (200, [not_one])
    # the one response is an error: 400 with it
    resp = _collect([(_err(), True)])
    assert (resp.status, resp.chunks) == (400, [b'{"error":"custom failure"}'])
    # several, the first an error: 400 with the count's error
    resp = _collect([(_err(), False), (_ok(1), True)])
    assert (resp.status, resp.chunks) == (400, [not_one])


def test_deep_and_wide_bodies() -> None:
    # nesting is flattened without recursion; a body too deep for the parser is a JSON error
    assert list(decode('{"f":' + "[" * 500 + "1" + "]" * 500 + "}").inputs["f"].shape) == [1]
    with pytest.raises(InternalError) as info:
        decode('{"f":' + "[" * 5000 + "1" + "]" * 5000 + "}")
    assert info.value.message.startswith("failed to parse the request JSON buffer: ")
    # many members: each is looked up once
    r = decode("{" + ",".join(f'"k{i}":{i}' for i in range(50000)) + "}")
    assert len(r.parameters) == 50000 and r.parameters["k49999"] == 49999
