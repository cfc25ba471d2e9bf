"""The KServe v2 HTTP codec against tritonclient: round trips of every datatype, and parse errors."""

from __future__ import annotations

import ast
import base64
import json
from typing import Any

import numpy as np
import pytest
from codec_models import (
    ADD_SUB,
    BATCHED,
    FIXED_2D,
    IDENTITY_BYTES,
    IDENTITY_FP32,
    VAR_2D,
    VAR_MIDDLE,
    client_array,
    client_body,
    model,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from tritonclient.http import InferenceServerClient, InferInput, InferRequestedOutput, InferResult

from inferd.core.request import SEQUENCE_END, SEQUENCE_START
from inferd.core.response import InferResponse
from inferd.core.tensor import Tensor, serialize_bytes
from inferd.core.types import BY_WIRE, BYTES
from inferd.engine.model import Model
from inferd.engine.validate import validate_request
from inferd.errors import InferdError, InternalError, InvalidArgumentError
from inferd.frontends.http.decode import RESERVED_PARAMETERS, decode_infer_request
from inferd.frontends.http.encode import OutputEncoding, encode_infer_response
from inferd.repository import normalize_config, parse_config_text
from repo_paths import FIXTURE_MODELS, FIXTURES, REFERENCE_MODELS

WIRE_TYPES = list(BY_WIRE)
JSON_TYPES = [w for w, dt in BY_WIRE.items() if dt.json_ok]


# -- strategies ----------------------------------------------------------------------------------

# rank >= 1: Triton counts the elements of shape [] as 0 (see test_scalar_shape_is_a_shape_error)
shapes = st.lists(st.integers(min_value=0, max_value=3), min_size=1, max_size=3).map(tuple)


@st.composite
def tensors(draw: st.DrawFn, wire: str, json_safe: bool) -> np.ndarray[Any, Any]:
    """An array of ``wire`` type as a client holds it (BF16: uint16 words; BYTES: object array)."""
    shape = draw(shapes)
    count = int(np.prod(shape, dtype=np.int64))
    if wire == "BYTES":
        if json_safe:  # JSON carries text
            items: list[Any] = [
                s.encode() for s in draw(st.lists(st.text(max_size=8), min_size=count, max_size=count))
            ]
        else:
            items = draw(st.lists(st.binary(max_size=8), min_size=count, max_size=count))
        arr = np.empty(count, dtype=np.object_)
        arr[:] = items
        return arr.reshape(shape)
    dtype = BY_WIRE[wire].numpy
    if dtype.kind == "f":
        width = 8 * dtype.itemsize  # 16, 32 or 64: what st.floats takes
        elements = st.floats(width=width, allow_nan=not json_safe, allow_infinity=not json_safe)  # type: ignore[arg-type]
        return draw(hnp.arrays(dtype, shape, elements=elements))
    return draw(hnp.arrays(dtype, shape))


def assert_same(wire: str, got: np.ndarray[Any, Any], expected: np.ndarray[Any, Any]) -> None:
    if wire == "BYTES":
        assert got.reshape(-1).tolist() == expected.reshape(-1).tolist()
        assert all(type(v) is bytes for v in got.reshape(-1))
        return
    assert got.shape == expected.shape
    assert got.dtype == BY_WIRE[wire].numpy
    assert got.tobytes() == np.ascontiguousarray(expected).tobytes()


# -- request round trips -------------------------------------------------------------------------


@pytest.mark.parametrize("wire", WIRE_TYPES)
@settings(max_examples=25, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_binary_request_round_trip(wire: str, data: st.DataObject) -> None:
    arr = data.draw(tensors(wire, json_safe=False))
    body, json_size = client_body([("INPUT0", wire, arr)], binary=True)
    assert json_size is not None
    request, enc = decode_infer_request(IDENTITY_FP32, "", body, json_size)
    t = request.inputs["INPUT0"]
    assert t.datatype is BY_WIRE[wire]
    assert t.shape == arr.shape
    assert isinstance(t.raw, memoryview)  # received bytes, not copied
    assert_same(wire, t.array.reshape(arr.shape) if wire == "BYTES" else t.array, arr)
    if wire != "BYTES" and arr.size:
        assert np.shares_memory(t.array, np.frombuffer(body, dtype=np.uint8))
    assert enc.default_binary  # tritonclient asks for binary outputs when it names none


@pytest.mark.parametrize("wire", JSON_TYPES)
@settings(max_examples=25, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_json_request_round_trip(wire: str, data: st.DataObject) -> None:
    arr = data.draw(tensors(wire, json_safe=True))
    body, json_size = client_body([("INPUT0", wire, arr)], binary=False)
    assert json_size is None
    request, _ = decode_infer_request(IDENTITY_FP32, "", body, None)
    t = request.inputs["INPUT0"]
    assert t.datatype is BY_WIRE[wire]
    assert t.shape == arr.shape
    assert_same(wire, t.array, arr)


@settings(max_examples=25)
@given(st.lists(st.sampled_from(WIRE_TYPES), min_size=1, max_size=4), st.data())
def test_mixed_binary_and_json_inputs(wires: list[str], data: st.DataObject) -> None:
    inputs = []
    infer_inputs = []
    for i, wire in enumerate(wires):
        binary = data.draw(st.booleans()) or not BY_WIRE[wire].json_ok
        arr = data.draw(tensors(wire, json_safe=not binary))
        ii = InferInput(f"IN{i}", list(arr.shape), wire)
        ii.set_data_from_numpy(client_array(wire, arr), binary_data=binary)
        infer_inputs.append(ii)
        inputs.append((f"IN{i}", wire, arr))
    body, json_size = InferenceServerClient.generate_request_body(infer_inputs)
    request, _ = decode_infer_request(IDENTITY_FP32, "", body, json_size)
    assert list(request.inputs) == [name for name, _, _ in inputs]
    for name, wire, arr in inputs:
        assert_same(wire, request.inputs[name].array, arr)


def test_request_fields_and_parameters() -> None:
    arr = np.ones((1, 16), dtype=np.float32)
    i0 = InferInput("INPUT0", [1, 16], "FP32").set_data_from_numpy(arr)
    i1 = InferInput("INPUT1", [1, 16], "FP32").set_data_from_numpy(arr, binary_data=False)
    outputs = [
        InferRequestedOutput("OUTPUT0", binary_data=False, class_count=3),
        InferRequestedOutput("OUTPUT1", binary_data=True),
    ]
    body, json_size = InferenceServerClient.generate_request_body(
        [i0, i1],
        outputs=outputs,
        request_id="req-7",
        sequence_id=42,
        sequence_start=True,
        sequence_end=True,
        priority=2,
        timeout=1500,
        parameters={"foo": "bar", "n": 3, "f": 1.5, "b": True},
    )
    request, enc = decode_infer_request(ADD_SUB, "1", body, json_size)
    assert request.model_name == "add_sub"
    assert request.model_version == "1"
    assert request.id == "req-7"
    assert request.correlation_id == 42
    assert request.flags == SEQUENCE_START | SEQUENCE_END
    assert request.priority == 2
    assert request.timeout_us == 1500
    # only custom parameters reach the model
    assert request.parameters == {"foo": "bar", "n": 3, "f": 1.5, "b": True}
    assert request.outputs is not None
    assert [(o.name, o.classification) for o in request.outputs] == [("OUTPUT0", 3), ("OUTPUT1", 0)]
    assert not enc.is_binary("OUTPUT0")
    assert enc.is_binary("OUTPUT1")
    assert not enc.default_binary


def test_string_sequence_id_and_no_flags() -> None:
    doc = {
        "parameters": {"sequence_id": "abc", "sequence_start": False, "sequence_end": False},
        "inputs": [{"name": "INPUT0", "shape": [1], "datatype": "FP32", "data": [1]}],
    }
    request, enc = decode_infer_request(IDENTITY_FP32, "", json.dumps(doc).encode(), None)
    assert request.correlation_id == "abc"
    assert request.flags == 0
    assert request.parameters == {}
    assert request.outputs is None
    assert not enc.default_binary


def test_reserved_parameters() -> None:
    assert {
        "sequence_id",
        "sequence_start",
        "sequence_end",
        "priority",
        "timeout",
        "binary_data_output",
        "headers",
    } == RESERVED_PARAMETERS


def test_nested_json_data_is_accepted() -> None:
    doc = b'{"inputs":[{"name":"INPUT0","shape":[2],"datatype":"FP32","data":[[1],[2]]}]}'
    request, _ = decode_infer_request(IDENTITY_FP32, "", doc, None)
    np.testing.assert_array_equal(request.inputs["INPUT0"].array, np.array([1, 2], dtype=np.float32))


def test_json_data_must_be_an_array(reference_errors: dict[str, int | None]) -> None:
    doc = b'{"inputs":[{"name":"INPUT0","shape":[1],"datatype":"INT32","data":7}]}'
    e = _error(IDENTITY_FP32, doc, None)
    assert isinstance(e, InternalError)
    assert e.message == "Unable to parse 'data': attempt to access JSON non-array as array"
    assert reference_errors[e.message] == 500


@pytest.mark.parametrize("data", ["[]", "[5]"])
def test_scalar_shape_is_a_shape_error(data: str, reference_errors: dict[str, int | None]) -> None:
    # Triton counts the elements of shape [] as 0; validation refuses the shape before any data is read
    doc = f'{{"inputs":[{{"name":"INPUT0","shape":[],"datatype":"FP32","data":{data}}}]}}'.encode()
    request, _ = decode_infer_request(IDENTITY_FP32, "", doc, None)
    assert request.inputs["INPUT0"].shape == ()
    with pytest.raises(InvalidArgumentError) as info:
        validate_request(request, IDENTITY_FP32)
    text = (
        "[request id: <id_unknown>] unexpected shape for input 'INPUT0' for model 'identity_fp32'. "
        "Expected [-1], got []. "
    )
    assert info.value.message == text
    assert reference_errors[text] == 400


def test_json_integers_are_accepted_for_floats() -> None:
    doc = b'{"inputs":[{"name":"INPUT0","shape":[3],"datatype":"FP64","data":[1,2.5,-3]}]}'
    request, _ = decode_infer_request(IDENTITY_FP32, "", doc, None)
    assert request.inputs["INPUT0"].array.tolist() == [1.0, 2.5, -3.0]


def test_output_parameters_other_than_ours_reach_the_request() -> None:
    doc = {
        "inputs": [{"name": "INPUT0", "shape": [1], "datatype": "FP32", "data": [1]}],
        "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": False, "classification": 0, "x": 1}}],
    }
    request, _ = decode_infer_request(IDENTITY_FP32, "", json.dumps(doc).encode(), None)
    assert request.outputs is not None
    assert request.outputs[0].parameters == {"x": 1}


# -- raw requests (Inference-Header-Content-Length: 0) -------------------------------------------


def test_raw_request_single_input() -> None:
    body = np.array([1.5, -2.0], dtype=np.float32).tobytes()
    request, enc = decode_infer_request(IDENTITY_FP32, "", body, 0)
    t = request.inputs["INPUT0"]
    assert t.shape == (2,)
    assert t.array.tolist() == [1.5, -2.0]
    assert np.shares_memory(t.array, np.frombuffer(body, dtype=np.uint8))
    assert enc.default_binary  # every output comes back binary


def test_raw_request_on_a_batching_model_is_batch_one() -> None:
    body = np.arange(4, dtype=np.float32).tobytes()
    request, _ = decode_infer_request(BATCHED, "", body, 0)
    assert request.inputs["INPUT0"].shape == (1, 4)


def test_raw_request_with_fixed_and_variable_dims() -> None:
    request, _ = decode_infer_request(FIXED_2D, "", bytes(12), 0)
    assert request.inputs["X"].shape == (2, 3)
    request, _ = decode_infer_request(VAR_MIDDLE, "", bytes(24), 0)
    assert request.inputs["X"].shape == (2, 4, 3)


def test_raw_bytes_request_is_the_one_string() -> None:
    one = model("one_string", '{ name: "S" data_type: TYPE_STRING dims: [ 1 ] }')
    body = b"\x03\x00\x00\x00abc"  # no length prefix on the raw path: this is all one string
    request, _ = decode_infer_request(one, "", body, 0)
    t = request.inputs["S"]
    assert t.shape == (1,)
    validate_request(request, one)
    assert t.array.tolist() == [body]


def test_empty_body_without_header_is_raw() -> None:
    request, _ = decode_infer_request(IDENTITY_FP32, "", b"", None)
    assert request.inputs["INPUT0"].shape == (0,)


def _error(m: Model, body: bytes, header_length: int | None) -> InferdError:
    with pytest.raises(InferdError) as info:
        decode_infer_request(m, "", body, header_length)
    return info.value


@pytest.mark.parametrize(
    ("m", "body", "cls", "text"),
    [
        (
            VAR_2D,
            bytes(8),
            InvalidArgumentError,
            "[request id: <id_unknown>] The shape of the raw input 'X' can not be deduced because there are more "
            "than one variable-sized dimension",
        ),
        (
            IDENTITY_FP32,
            bytes(6),
            InvalidArgumentError,
            "[request id: <id_unknown>] input byte size mismatch for input 'raw_input' for model 'identity_fp32'. "
            "Expected 4, got 6",
        ),
        (
            IDENTITY_BYTES,
            b"abc",
            InvalidArgumentError,
            "[request id: <id_unknown>] For BYTE datatype raw input 'INPUT0', the model must have input shape [1]",
        ),
        (
            FIXED_2D,
            bytes(13),
            InvalidArgumentError,
            "[request id: <id_unknown>] input byte size mismatch for input 'raw_input' for model 'fixed'. "
            "Expected 12, got 13",
        ),
    ],
)
def test_raw_request_errors(m: Model, body: bytes, cls: type[InferdError], text: str) -> None:
    e = _error(m, body, 0)
    assert type(e) is cls
    assert e.message == text


# -- parse errors as the reference words them ---------------------------------------------------

_FP32_IN = '{"name":"INPUT0","shape":[1],"datatype":"FP32","data":[1]}'

REFERENCE_CASES: list[tuple[str, Model, bytes, int | None, str]] = [
    (
        "err_malformed_json",
        ADD_SUB,
        b'{"inputs":  x}',
        None,
        "failed to parse the request JSON buffer: Invalid value. at 12",
    ),
    (
        "err_empty_body",
        ADD_SUB,
        b"",
        None,
        "[request id: <id_unknown>] Raw request must only have 1 input (found 1) to be deduced but got 2 inputs "
        "in 'add_sub' model configuration",
    ),
    (
        "err_inputs_not_array",
        ADD_SUB,
        b'{"inputs":{}}',
        None,
        "Unable to parse 'inputs': attempt to access JSON non-array as array",
    ),
    (
        "no_inputs",
        IDENTITY_FP32,
        b"{}",
        None,
        "Unable to parse 'inputs': attempt to access non-existing object member 'inputs'",
    ),
    (
        "no_name",
        IDENTITY_FP32,
        b'{"inputs":[{"shape":[2],"datatype":"FP32","data":[1,2]}]}',
        None,
        "Unable to parse 'name': attempt to access non-existing object member 'name'",
    ),
    (
        "no_shape",
        IDENTITY_FP32,
        b'{"inputs":[{"name":"INPUT0","datatype":"FP32","data":[1,2]}]}',
        None,
        "Unable to parse 'shape': attempt to access non-existing object member 'shape'",
    ),
    (
        "neg_shape",
        IDENTITY_FP32,
        b'{"inputs":[{"name":"INPUT0","shape":[-2],"datatype":"FP32","data":[1,2]}]}',
        None,
        "Unable to parse 'shape': attempt to access JSON non-unsigned-integer as unsigned-integer",
    ),
    (
        "shape_str",
        IDENTITY_FP32,
        b'{"inputs":[{"name":"INPUT0","shape":["a"],"datatype":"FP32","data":[1,2]}]}',
        None,
        "Unable to parse 'shape': attempt to access JSON non-unsigned-integer as unsigned-integer",
    ),
    (
        "id_num",
        IDENTITY_FP32,
        ('{"id":5,"inputs":[' + _FP32_IN + "]}").encode(),
        None,
        "Unable to parse 'id': attempt to access JSON non-string as string",
    ),
    (
        "outputs_noname",
        IDENTITY_FP32,
        ('{"inputs":[' + _FP32_IN + '],"outputs":[{}]}').encode(),
        None,
        "Unable to parse 'name': attempt to access non-existing object member 'name'",
    ),
    (
        "bytes_num",
        IDENTITY_BYTES,
        b'{"inputs":[{"name":"INPUT0","shape":[1],"datatype":"BYTES","data":[5]}]}',
        None,
        "Unable to parse JSON bytes array: attempt to access JSON non-string as string",
    ),
    (
        "fp_str",
        IDENTITY_FP32,
        b'{"inputs":[{"name":"INPUT0","shape":[1],"datatype":"FP32","data":["x"]}]}',
        None,
        "Unable to parse 'data': attempt to access JSON non-number as double",
    ),
    (
        "no_data",
        IDENTITY_FP32,
        b'{"inputs":[{"name":"INPUT0","shape":[2],"datatype":"FP32"}]}',
        None,
        "Input must set only one of the following fields: 'data', 'binary_data_size' in 'parameters', "
        "'shared_memory_region' in 'parameters'. But no field is set",
    ),
    (
        "triton_param",
        IDENTITY_FP32,
        b'{"parameters":{"triton_x":1},"inputs":[{"name":"INPUT0","shape":[2],"datatype":"FP32","data":[1,2]}]}',
        None,
        "parameter keys starting with 'triton_' are reserved for Triton usage and should not be specified.",
    ),
    (
        "fp16",
        IDENTITY_FP32,
        b'{"inputs":[{"name":"INPUT0","shape":[2],"datatype":"FP16","data":[1,2]}]}',
        None,
        "receiving FP16 data via JSON is not supported. Please use the binary data format for input INPUT0",
    ),
    (
        "dup_input",
        IDENTITY_FP32,
        ('{"inputs":[' + _FP32_IN + "," + _FP32_IN + "]}").encode(),
        None,
        "[request id: <id_unknown>] input 'INPUT0' already exists in request",
    ),
    (
        "err_unknown_datatype",
        ADD_SUB,
        b'{"inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"FP8","data":[]}]}',
        None,
        "invalid datatype for input INPUT0",
    ),
    (
        "err_shape_data_mismatch",
        ADD_SUB,
        b'{"inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"FP32","data":[1,2,3]}]}',
        None,
        "Unable to parse 'data': Shape does not match true shape of 'data' field",
    ),
    (
        "err_binary_size_mismatch",
        IDENTITY_FP32,
        b'{"inputs":[{"name":"INPUT0","shape":[2],"datatype":"FP32","parameters":{"binary_data_size":8}}]}'
        + bytes(4),
        len(
            b'{"inputs":[{"name":"INPUT0","shape":[2],"datatype":"FP32","parameters":{"binary_data_size":8}}]}'
        ),
        "unexpected size for input 'INPUT0', expecting 4 additional bytes for model 'identity_fp32'",
    ),
    (
        "err_bad_header_length",
        IDENTITY_FP32,
        b'{"inputs": []}',
        999,
        "inference header size should be in range (0, 14), got: 999",
    ),
]


@pytest.mark.parametrize(
    ("case", "m", "body", "header_length", "text"), REFERENCE_CASES, ids=[c[0] for c in REFERENCE_CASES]
)
def test_reference_parse_errors(
    case: str,
    m: Model,
    body: bytes,
    header_length: int | None,
    text: str,
    reference_errors: dict[str, int | None],
) -> None:
    e = _error(m, body, header_length)
    assert e.message == text
    assert text in reference_errors, "the expected text is not the reference's"
    assert e.code.http_status == reference_errors[text]


@pytest.mark.parametrize(
    ("body", "text"),
    [
        (b'{"inputs": x}', "failed to parse the request JSON buffer: Invalid value. at 11"),
        (b"[1", "failed to parse the request JSON buffer: "),
        (
            b'{"a":1} x',
            "failed to parse the request JSON buffer: The document root must not be followed by other values. at 8",
        ),
        (b"{1:2}", "failed to parse the request JSON buffer: Missing a name for object member. at 1"),
        (
            b'{"a" 1}',
            "failed to parse the request JSON buffer: Missing a colon after a name of object member. at 5",
        ),
        (
            b'{"a":1 "b"}',
            "failed to parse the request JSON buffer: Missing a comma or '}' after an object member. at 7",
        ),
        (
            b"[1 2]",
            "failed to parse the request JSON buffer: Missing a comma or ']' after an array element. at 3",
        ),
    ],
)
def test_json_syntax_errors_use_rapidjson_words(body: bytes, text: str) -> None:
    e = _error(ADD_SUB, body, None)
    assert isinstance(e, InternalError)
    assert e.message.startswith(text)


@pytest.mark.parametrize(
    ("body", "header_length", "cls", "text"),
    [
        (
            b'{"inputs":[{"name":"INPUT0","shape":[1],"datatype":"FP32","data":[1],'
            b'"parameters":{"binary_data_size":4}}]}\x00\x00\x00\x00',
            len(
                b'{"inputs":[{"name":"INPUT0","shape":[1],"datatype":"FP32","data":[1],'
                b'"parameters":{"binary_data_size":4}}]}'
            ),
            InvalidArgumentError,
            "Input must set only one of the following fields: 'data', 'binary_data_size' in 'parameters', "
            "'shared_memory_region' in 'parameters'. But set 'data' 'binary_data_size'",
        ),
        (
            b'{"inputs":[{"name":"INPUT0","shape":[1],"datatype":"FP32","parameters":{"binary_data_size":4}}]}'
            + bytes(6),
            len(
                b'{"inputs":[{"name":"INPUT0","shape":[1],"datatype":"FP32","parameters":{"binary_data_size":4}}]}'
            ),
            InvalidArgumentError,
            "unexpected additional input data for model 'identity_fp32'",
        ),
        (
            b'{"inputs":[{"name":"INPUT0","shape":[1],"datatype":"FP32","parameters":{"binary_data_size":-4}}]}',
            None,
            InternalError,
            "Unable to parse 'binary_data_size': attempt to access JSON non-unsigned-integer as unsigned-integer",
        ),
        (
            b'{"inputs":[1]}',
            None,
            InvalidArgumentError,
            "Input must set only one of the following fields: 'data', 'binary_data_size' in 'parameters', "
            "'shared_memory_region' in 'parameters'. But no field is set",
        ),
        (
            b'{"inputs":[{"name":1,"shape":[1],"datatype":"FP32","data":[1]}]}',
            None,
            InternalError,
            "Unable to parse 'name': attempt to access JSON non-string as string",
        ),
        (
            b'{"inputs":[{"name":"INPUT0","shape":[1],"data":[1]}]}',
            None,
            InternalError,
            "Unable to parse 'datatype': attempt to access non-existing object member 'datatype'",
        ),
        (
            b'{"inputs":[{"name":"INPUT0","shape":3,"datatype":"FP32","data":[1]}]}',
            None,
            InternalError,
            "Unable to parse 'shape': attempt to access JSON non-array as array",
        ),
        (
            b'{"parameters":[],"inputs":[]}',
            None,
            InternalError,
            "failed to get request params.: attempt to get members for non-object",
        ),
        (
            ('{"inputs":[' + _FP32_IN + '],"outputs":{}}').encode(),
            None,
            InternalError,
            "Unable to parse 'outputs': attempt to access JSON non-array as array",
        ),
        (
            ('{"inputs":[' + _FP32_IN + '],"outputs":[1]}').encode(),
            None,
            InternalError,
            "Unable to parse 'name': attempt to access non-existing object member 'name'",
        ),
        (
            (
                '{"inputs":['
                + _FP32_IN
                + '],"outputs":[{"name":"OUTPUT0","parameters":{"classification":-1}}]}'
            ).encode(),
            None,
            InternalError,
            "Unable to set 'classification': attempt to access JSON non-unsigned-integer as unsigned-integer",
        ),
        (
            b'{"inputs":[{"name":"INPUT0","shape":[1],"datatype":"BOOL","data":[1]}]}',
            None,
            InternalError,
            "Unable to parse 'data': attempt to access JSON non-boolean as boolean",
        ),
        (
            b'{"inputs":[{"name":"INPUT0","shape":[1],"datatype":"INT32","data":[1.5]}]}',
            None,
            InternalError,
            "Unable to parse 'data': attempt to access JSON non-signed-integer as signed-integer",
        ),
        (
            b'{"inputs":[{"name":"INPUT0","shape":[1],"datatype":"UINT8","data":[-1]}]}',
            None,
            InternalError,
            "Unable to parse 'data': attempt to access JSON non-unsigned-integer as unsigned-integer",
        ),
        (
            b'{"inputs":[{"name":"INPUT0","shape":[1],"datatype":"FP32","data":[true]}]}',
            None,
            InternalError,
            "Unable to parse 'data': attempt to access JSON non-number as double",
        ),
        (
            b'{"inputs":[{"name":"INPUT0","shape":[1],"datatype":"BF16","data":[1]}]}',
            None,
            InvalidArgumentError,
            "receiving BF16 data via JSON is not supported. Please use the binary data format for input INPUT0",
        ),
        (b"{}", -1, InvalidArgumentError, "inference header size should be in range (0, 2), got: -1"),
    ],
)
def test_other_parse_errors(
    body: bytes,
    header_length: int | None,
    cls: type[InferdError],
    text: str,
    reference_errors: dict[str, int | None],
) -> None:
    e = _error(IDENTITY_FP32, body, header_length)
    assert type(e) is cls
    assert e.message == text
    if text in reference_errors:
        assert e.code.http_status == reference_errors[text]


def test_out_of_range_json_integer() -> None:
    e = _error(
        IDENTITY_FP32, b'{"inputs":[{"name":"INPUT0","shape":[1],"datatype":"INT8","data":[300]}]}', None
    )
    assert isinstance(e, InvalidArgumentError)
    assert e.message.startswith("Unable to parse 'data': ")


# -- responses -----------------------------------------------------------------------------------


def parse_response(resp: InferResponse, enc: OutputEncoding) -> tuple[InferResult, dict[str, Any], int]:
    head, parts, hlen = encode_infer_response(resp, enc)
    body = head + b"".join(bytes(p) for p in parts)
    result = InferResult.from_response_body(body, header_length=hlen if hlen >= 0 else None)
    return result, json.loads(head), hlen


def expected_client_value(wire: str, arr: np.ndarray[Any, Any], binary: bool) -> np.ndarray[Any, Any]:
    if wire == "BYTES" and not binary:
        out = np.empty(arr.size, dtype=np.object_)
        out[:] = [v.decode() for v in arr.reshape(-1)]
        return out.reshape(arr.shape)
    return arr


@pytest.mark.parametrize("wire", WIRE_TYPES)
@pytest.mark.parametrize("binary", [True, False])
@settings(max_examples=20, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_response_round_trip(wire: str, binary: bool, data: st.DataObject) -> None:
    arr = data.draw(tensors(wire, json_safe=not binary))
    out = Tensor.from_array("OUT", arr, BY_WIRE[wire])
    resp = InferResponse("m", "1", outputs=[out])
    if not binary and not BY_WIRE[wire].json_ok:
        with pytest.raises(InvalidArgumentError) as info:
            encode_infer_response(resp, OutputEncoding())
        assert info.value.message == (
            f"sending {wire} data via JSON is not supported. Please use the binary data format for output"
        )
        return
    result, head, hlen = parse_response(resp, OutputEncoding(default_binary=binary))
    (o,) = head["outputs"]
    assert o["datatype"] == wire
    assert o["shape"] == list(arr.shape)
    assert ("parameters" in o) is binary
    assert ("data" in o) is not binary
    binary_bytes = o["parameters"]["binary_data_size"] if binary else 0
    if binary:
        assert binary_bytes == (len(serialize_bytes(arr)) if wire == "BYTES" else arr.nbytes)
    # no binary bytes at all: a plain JSON answer, as the reference gives
    assert (hlen >= 0) is (binary_bytes > 0)
    got = result.as_numpy("OUT")
    assert got is not None
    assert got.shape == arr.shape
    expected = expected_client_value(wire, arr, binary)
    if wire == "BF16":
        assert got.view(np.uint16).tobytes() == arr.tobytes()
    elif wire == "BYTES":
        assert got.reshape(-1).tolist() == expected.reshape(-1).tolist()
    else:
        assert got.dtype == arr.dtype
        assert got.tobytes() == arr.tobytes()


def test_response_with_several_outputs_in_both_encodings() -> None:
    a = np.arange(6, dtype=np.int32).reshape(2, 3)
    b = np.array([b"x", b"yz"], dtype=np.object_)
    c = np.array([0.5, 1.5], dtype=np.float16)
    resp = InferResponse(
        "m",
        "3",
        id="r9",
        outputs=[Tensor.from_array("A", a), Tensor.from_array("B", b), Tensor.from_array("C", c)],
    )
    enc = OutputEncoding(default_binary=False, binary={"B": True, "C": True})
    result, head, hlen = parse_response(resp, enc)
    assert head["id"] == "r9" and head["model_name"] == "m" and head["model_version"] == "3"
    assert [o["name"] for o in head["outputs"]] == ["A", "B", "C"]
    assert head["outputs"][0]["data"] == [0, 1, 2, 3, 4, 5]
    assert head["outputs"][1]["parameters"] == {"binary_data_size": 11}
    assert head["outputs"][2]["parameters"] == {"binary_data_size": 4}
    assert hlen > 0
    np.testing.assert_array_equal(result.as_numpy("A"), a)
    assert result.as_numpy("B").tolist() == [b"x", b"yz"]
    np.testing.assert_array_equal(result.as_numpy("C"), c)
    assert result.get_response()["id"] == "r9"


def test_response_parameters_and_no_id() -> None:
    resp = InferResponse("e", "1", outputs=[], parameters={"sequence_id": 0, "sequence_start": False})
    head, parts, hlen = encode_infer_response(resp, OutputEncoding())
    assert json.loads(head) == {
        "model_name": "e",
        "model_version": "1",
        "parameters": {"sequence_id": 0, "sequence_start": False},
        "outputs": [],
    }
    assert parts == [] and hlen == -1


def test_json_bytes_output_that_is_not_utf8_is_replaced() -> None:
    out = Tensor.from_array("S", np.array([b"\xff"], dtype=np.object_))
    head, _, _ = encode_infer_response(InferResponse("m", "1", outputs=[out]), OutputEncoding())
    assert json.loads(head)["outputs"][0]["data"] == ["\ufffd"]


@pytest.mark.parametrize(
    "arr",
    [
        np.arange(8, dtype=np.float32)[::2],  # a strided view
        np.arange(6, dtype=np.float32).reshape(2, 3).T,  # Fortran order
        np.arange(3, dtype=">f4"),  # big-endian
        np.arange(3, dtype=">i8"),
    ],
    ids=["strided", "transposed", "big-endian-float", "big-endian-int"],
)
@pytest.mark.parametrize("binary", [True, False])
def test_responses_of_unusual_arrays(arr: np.ndarray[Any, Any], binary: bool) -> None:
    # models return numpy views freely; the wire is always row-major little-endian
    dt = BY_WIRE["FP32"] if arr.dtype.kind == "f" else BY_WIRE["INT64"]
    out = Tensor("OUT", dt, tuple(arr.shape), array=arr)
    result, _, _ = parse_response(
        InferResponse("m", "1", outputs=[out]), OutputEncoding(default_binary=binary)
    )
    got = result.as_numpy("OUT")
    assert got is not None
    np.testing.assert_array_equal(got, arr)


# -- golden answers of the reference --------------------------------------------------------------


def test_binary_answer_is_the_references(reference_answers: dict[str, str]) -> None:
    expected = ast.literal_eval(reference_answers["infer_ok_binary_in_out"])
    out = Tensor.from_array("OUTPUT0", np.array([1.5, -2.0], dtype=np.float32))
    head, parts, hlen = encode_infer_response(
        InferResponse("identity_fp32", "1", outputs=[out]), OutputEncoding(default_binary=True)
    )
    assert head + b"".join(bytes(p) for p in parts) == expected
    assert hlen == len(head)


def test_json_answer_is_the_references(reference_answers: dict[str, str]) -> None:
    a = np.arange(1, 17, dtype=np.float32).reshape(1, 16)
    outs = [Tensor.from_array("OUTPUT0", a), Tensor.from_array("OUTPUT1", a - 2)]
    head, parts, hlen = encode_infer_response(
        InferResponse("add_sub", "1", id="req-42", outputs=outs), OutputEncoding()
    )
    assert head == reference_answers["infer_ok_json"].encode()
    assert parts == [] and hlen == -1


def test_json_bytes_answer_is_the_references(reference_answers: dict[str, str]) -> None:
    out = Tensor.from_array("OUTPUT0", np.array([b"ab", b"c"], dtype=np.object_))
    head, _, _ = encode_infer_response(InferResponse("identity_bytes", "1", outputs=[out]), OutputEncoding())
    assert head == reference_answers["infer_ok_bytes_json"].encode()


def test_bytes_json_input_is_handed_over_flat() -> None:
    doc = b'{"inputs":[{"name":"INPUT0","shape":[2,1],"datatype":"BYTES","data":["a","b"]}]}'
    request, _ = decode_infer_request(IDENTITY_BYTES, "", doc, None)
    t = request.inputs["INPUT0"]
    assert t.datatype is BYTES
    assert t.shape == (2, 1)
    assert t.array.reshape(-1).tolist() == [b"a", b"b"]


# -- the reference's observed answers, asked of decode + validate -----------------------------------

_OBSERVED = FIXTURES / "reference_observed.json"
_MODEL_DIRS = {
    "add_sub": REFERENCE_MODELS / "add_sub",
    "identity_fp32": REFERENCE_MODELS / "identity_fp32",
    "identity_bytes": REFERENCE_MODELS / "identity_bytes",
    "identity_types": FIXTURE_MODELS / "identity_types",
}
#: errors the reference gives after the model ran (classification, output encoding): not decode's
_LATER = ("sending ", "class result not available")


def _observed_infer_cases() -> list[Any]:
    cases = []
    for entry in json.loads(_OBSERVED.read_text()):
        path = entry["path"]
        name = path.split("/")[3] if path.startswith("/v2/models/") and path.endswith("/infer") else ""
        headers = {k.lower(): v for k, v in entry["headers"].items()}
        if name not in _MODEL_DIRS or path != f"/v2/models/{name}/infer" or entry["method"] != "POST":
            continue
        if set(headers) - {"inference-header-content-length"}:
            continue  # content encodings and the like belong to the HTTP app
        hl = headers.get("inference-header-content-length")
        if hl is not None and not hl.isdigit():
            continue  # parsing the header is the HTTP app's
        body = entry["body"]
        raw = base64.b64decode(body["b64"]) if "b64" in body else json.dumps(body["json"]).encode()
        error = None
        text = entry["response"].get("text", "")
        if text.startswith('{"error"'):
            error = json.loads(text)["error"]
        cases.append(
            pytest.param(name, raw, None if hl is None else int(hl), entry["status"], error, id=entry["id"])
        )
    return cases


_MODELS: dict[str, Model] = {}


def _reference_model(name: str) -> Model:
    if name not in _MODELS:
        model_dir = _MODEL_DIRS[name]
        cfg = parse_config_text((model_dir / "config.pbtxt").read_text(), "config.pbtxt")
        normalize_config(cfg, name, model_dir=model_dir)
        _MODELS[name] = Model(name, 1, cfg, model_dir)
    return _MODELS[name]


@pytest.mark.parametrize(("name", "body", "header_length", "status", "error"), _observed_infer_cases())
def test_observed_answers_of_decode_and_validate(
    name: str, body: bytes, header_length: int | None, status: int, error: str | None
) -> None:
    m = _reference_model(name)
    try:
        request, _ = decode_infer_request(m, "", body, header_length)
        validate_request(request, m)
    except InferdError as e:
        assert error is not None, f"the reference answered {status}, inferd: {e.message}"
        assert (e.message, e.code.http_status) == (error, status)
        return
    assert error is None or error.startswith(_LATER), f"the reference answered {status}: {error}"
