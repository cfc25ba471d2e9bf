"""Request validation: every error text is the reference server's."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from inferd.core.request import InferRequest, RequestedOutput
from inferd.core.tensor import Tensor
from inferd.core.types import BY_WIRE, BYTES
from inferd.engine.model import Model
from inferd.engine.validate import request_prefix, validate_request
from inferd.errors import InvalidArgumentError
from inferd.repository import parse_config_text

FP32 = BY_WIRE["FP32"]

ADD_SUB = """
name: "add_sub"
backend: "python"
max_batch_size: 64
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] },
  { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 16 ] }
]
"""
IDENTITY_FP32 = """
name: "identity_fp32"
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
"""
IDENTITY_BYTES = """
name: "identity_bytes"
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_STRING dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_STRING dims: [ -1 ] } ]
"""
OPTIONAL = """
name: "opt"
backend: "python"
max_batch_size: 0
input [
  { name: "A" data_type: TYPE_FP32 dims: [ 2 ] },
  { name: "B" data_type: TYPE_FP32 dims: [ 2 ] optional: true },
  { name: "C" data_type: TYPE_INT32 dims: [ 2, -1 ] }
]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 2 ] } ]
"""

NOTE = (
    "NOTE: Setting a non-zero max_batch_size in the model config requires a batch dimension to be prepended "
    "to each input shape. If you want to specify the full shape including the batch dim in your input dims "
    "config, try setting max_batch_size to zero. See the model configuration docs for more info on "
    "max_batch_size."
)


def _encode(elements: list[bytes]) -> bytes:
    return b"".join(struct.pack("<I", len(e)) + e for e in elements)


def model(text: str) -> Model:
    cfg = parse_config_text(text, "config.pbtxt")
    return Model(cfg.name, 1, cfg, Path("/nonexistent"))


def fp32(name: str, shape: tuple[int, ...]) -> Tensor:
    return Tensor.from_array(name, np.zeros(shape, dtype=np.float32))


def raw(name: str, wire: str, shape: tuple[int, ...], nbytes: int) -> Tensor:
    return Tensor(name, BY_WIRE[wire], shape, raw=memoryview(bytes(nbytes)))


def request(m: Model, *tensors: Tensor, outputs: list[str] | None = None, rid: str = "") -> InferRequest:
    return InferRequest(
        model_name=m.name,
        inputs={t.name: t for t in tensors},
        id=rid,
        outputs=None if outputs is None else [RequestedOutput(o) for o in outputs],
    )


def error_of(req: InferRequest, m: Model) -> str:
    with pytest.raises(InvalidArgumentError) as info:
        validate_request(req, m)
    assert info.value.code.http_status == 400
    return info.value.message


def test_request_prefix() -> None:
    m = model(ADD_SUB)
    assert request_prefix(request(m)) == "[request id: <id_unknown>] "
    assert request_prefix(request(m, rid="g-1")) == "[request id: g-1] "


def test_valid_batched_request_sets_batch_size() -> None:
    m = model(ADD_SUB)
    req = request(m, fp32("INPUT0", (3, 16)), fp32("INPUT1", (3, 16)))
    validate_request(req, m)
    assert req.batch_size == 3


def test_valid_unbatched_request_has_batch_size_one() -> None:
    m = model(IDENTITY_FP32)
    req = request(m, fp32("INPUT0", (7,)))
    validate_request(req, m)
    assert req.batch_size == 1


def test_unknown_input() -> None:
    m = model(ADD_SUB)
    req = request(m, fp32("INPUTX", (1, 16)), fp32("INPUT1", (1, 16)))
    assert error_of(req, m) == "unexpected inference input 'INPUTX' for model 'add_sub'"


def test_unknown_output() -> None:
    m = model(ADD_SUB)
    req = request(m, fp32("INPUT0", (1, 16)), fp32("INPUT1", (1, 16)), outputs=["OUTPUT1", "OUTPUTX"])
    assert error_of(req, m) == "unexpected inference output 'OUTPUTX' for model 'add_sub'"


def test_missing_input() -> None:
    m = model(ADD_SUB)
    assert error_of(request(m, fp32("INPUT0", (1, 16))), m) == (
        "[request id: <id_unknown>] expected 2 inputs but got 1 inputs for model 'add_sub'. Got input(s) "
        "['INPUT0'], but missing required input(s) ['INPUT1']. Please provide all required input(s)."
    )


def test_missing_input_with_request_id() -> None:
    m = model(ADD_SUB)
    assert error_of(request(m, fp32("INPUT0", (1, 16)), rid="g-1"), m) == (
        "[request id: g-1] expected 2 inputs but got 1 inputs for model 'add_sub'. Got input(s) "
        "['INPUT0'], but missing required input(s) ['INPUT1']. Please provide all required input(s)."
    )


def test_missing_every_input() -> None:
    m = model(ADD_SUB)
    assert error_of(request(m), m) == (
        "[request id: <id_unknown>] expected 2 inputs but got 0 inputs for model 'add_sub'. Got input(s) [], "
        "but missing required input(s) ['INPUT0','INPUT1']. Please provide all required input(s)."
    )


def test_missing_input_with_optional_inputs() -> None:
    m = model(OPTIONAL)
    assert error_of(request(m, fp32("B", (2,))), m) == (
        "[request id: <id_unknown>] expected number of inputs between 2 and 3 but got 1 inputs for model 'opt'. "
        "Got input(s) ['B'], but missing required input(s) ['A','C']. Please provide all required input(s)."
    )


def test_optional_input_may_be_left_out() -> None:
    m = model(OPTIONAL)
    c = Tensor.from_array("C", np.zeros((2, 5), dtype=np.int32))
    validate_request(request(m, fp32("A", (2,)), c), m)
    validate_request(request(m, fp32("A", (2,)), fp32("B", (2,)), c), m)


@pytest.mark.parametrize(
    ("wire", "text", "expects"),
    [
        ("INT32", ADD_SUB, "FP32"),
        ("BOOL", IDENTITY_FP32, "FP32"),
        ("BYTES", IDENTITY_FP32, "FP32"),
        ("FP32", IDENTITY_BYTES, "BYTES"),
    ],
)
def test_datatype(wire: str, text: str, expects: str) -> None:
    m = model(text)
    shape = (1, 16) if m.max_batch_size else (2,)
    # only INPUT0 is wrong (inputs are checked in reverse request order, see test_input_order)
    bad = Tensor("INPUT0", BY_WIRE[wire], shape, array=np.zeros(shape, BY_WIRE[wire].numpy))
    good = [
        Tensor.from_array(n, np.zeros(shape, s.datatype.numpy)) for n, s in m.inputs.items() if n != "INPUT0"
    ]
    assert error_of(request(m, bad, *good), m) == (
        f"[request id: <id_unknown>] inference input 'INPUT0' data-type is '{wire}', but model "
        f"'{m.name}' expects '{expects}'"
    )


@pytest.mark.parametrize(
    ("first", "second", "named"),
    [
        ("INT32", "INT32", "INPUT1"),  # both wrong: the last one sent is reported
        ("FP32", "INT32", "INPUT1"),
        ("INT32", "FP32", "INPUT0"),
    ],
)
def test_input_order(first: str, second: str, named: str) -> None:
    # Triton keeps a request's inputs in a hash map that iterates a few inputs in reverse order
    m = model(ADD_SUB)
    a = Tensor("INPUT0", BY_WIRE[first], (1, 16), array=np.zeros((1, 16), BY_WIRE[first].numpy))
    b = Tensor("INPUT1", BY_WIRE[second], (1, 16), array=np.zeros((1, 16), BY_WIRE[second].numpy))
    assert f"inference input '{named}' data-type is 'INT32'" in error_of(request(m, a, b), m)


def test_shape_with_batching_has_the_note() -> None:
    m = model(ADD_SUB)
    assert error_of(request(m, fp32("INPUT0", (1, 15)), fp32("INPUT1", (1, 16))), m) == (
        "[request id: <id_unknown>] unexpected shape for input 'INPUT0' for model 'add_sub'. Expected [-1,16], "
        f"got [1,15]. {NOTE}"
    )


def test_shape_with_batching_wrong_rank() -> None:
    m = model(ADD_SUB)
    assert error_of(request(m, fp32("INPUT0", (1,)), fp32("INPUT1", (1, 16))), m) == (
        "[request id: <id_unknown>] unexpected shape for input 'INPUT0' for model 'add_sub'. Expected [-1,16], "
        f"got [1]. {NOTE}"
    )


def test_shape_without_batching_has_no_note() -> None:
    m = model(IDENTITY_FP32)
    # the reference ends this text with a space
    assert error_of(request(m, fp32("INPUT0", (2, 3))), m) == (
        "[request id: <id_unknown>] unexpected shape for input 'INPUT0' for model 'identity_fp32'. "
        "Expected [-1], got [2,3]. "
    )


def test_shape_fixed_dim_without_batching() -> None:
    m = model(OPTIONAL)
    c = Tensor.from_array("C", np.zeros((3, 5), dtype=np.int32))
    assert error_of(request(m, fp32("A", (2,)), c), m) == (
        "[request id: <id_unknown>] unexpected shape for input 'C' for model 'opt'. Expected [2,-1], got [3,5]. "
    )


def test_variable_dims_accept_any_size() -> None:
    m = model(IDENTITY_FP32)
    for n in (0, 1, 1000):
        validate_request(request(m, fp32("INPUT0", (n,))), m)


def test_no_shape_on_a_batching_model() -> None:
    m = model(ADD_SUB)
    assert error_of(request(m, fp32("INPUT0", ()), fp32("INPUT1", (1, 16))), m) == (
        "[request id: <id_unknown>] input 'INPUT0' has no shape but model requires batch dimension for 'add_sub'"
    )


def test_batch_size_over_max() -> None:
    m = model(ADD_SUB)
    assert error_of(request(m, fp32("INPUT0", (65, 16)), fp32("INPUT1", (65, 16))), m) == (
        "[request id: <id_unknown>] inference request batch-size must be <= 64 for 'add_sub'"
    )
    ok = request(m, fp32("INPUT0", (64, 16)), fp32("INPUT1", (64, 16)))
    validate_request(ok, m)
    assert ok.batch_size == 64


def test_mismatched_batch_dims() -> None:
    m = model(ADD_SUB)
    assert error_of(request(m, fp32("INPUT0", (1, 16)), fp32("INPUT1", (2, 16))), m) == (
        "[request id: <id_unknown>] input 'INPUT0' batch size does not match other inputs for 'add_sub'"
    )


def test_byte_size_mismatch() -> None:
    m = model(ADD_SUB)
    req = request(m, raw("INPUT0", "FP32", (1, 16), 40), raw("INPUT1", "FP32", (1, 16), 64), rid="g-1")
    assert error_of(req, m) == (
        "[request id: g-1] input byte size mismatch for input 'INPUT0' for model 'add_sub'. Expected 64, got 40"
    )


def test_byte_size_of_a_good_raw_request() -> None:
    m = model(ADD_SUB)
    req = request(m, raw("INPUT0", "FP32", (2, 16), 128), raw("INPUT1", "FP32", (2, 16), 128))
    validate_request(req, m)
    assert req.batch_size == 2


def test_bytes_element_count_from_json() -> None:
    m = model(IDENTITY_BYTES)
    # the JSON codec hands BYTES over as a flat array of what was sent
    t = Tensor("INPUT0", BYTES, (2,), array=np.array([b"a"], dtype=np.object_))
    assert error_of(request(m, t), m) == (
        "[request id: <id_unknown>] expected 2 string elements for inference input 'INPUT0' for model "
        "'identity_bytes', got 1"
    )


def test_bytes_element_count_from_raw() -> None:
    m = model(IDENTITY_BYTES)
    t = Tensor("INPUT0", BYTES, (3,), raw=memoryview(_encode([b"a", b"b"])))
    assert error_of(request(m, t), m) == (
        "[request id: <id_unknown>] expected 3 string elements for inference input 'INPUT0' for model "
        "'identity_bytes', got 2"
    )


def test_malformed_raw_bytes() -> None:
    m = model(IDENTITY_BYTES)
    t = Tensor("INPUT0", BYTES, (1,), raw=memoryview(b"\x09\x00\x00\x00abc"))
    # the reference's Python backend refuses it, with no request id
    assert error_of(request(m, t, rid="r"), m) == (
        "incomplete string data for inference input 'INPUT0', expecting string of length 9 but only 3 bytes "
        "available"
    )


@pytest.mark.parametrize(
    ("shape", "raw", "text"),
    [
        (
            (2,),
            _encode([b"a"]) + b"\x01\x00",
            "incomplete string length indicator for inference input 'INPUT0' for model 'identity_bytes', "
            "expecting 4 bytes but only 2 bytes available. Please make sure the string length indicator is in "
            "one buffer.",
        ),
        (
            (1,),
            _encode([b"a", b"b"]),
            "unexpected number of string elements 2 for inference input 'INPUT0' for model 'identity_bytes', "
            "expecting 1",
        ),
    ],
)
def test_bad_raw_bytes(shape: tuple[int, ...], raw: bytes, text: str) -> None:
    m = model(IDENTITY_BYTES)
    t = Tensor("INPUT0", BYTES, shape, raw=memoryview(raw))
    assert error_of(request(m, t), m) == f"[request id: <id_unknown>] {text}"


def test_too_many_json_strings() -> None:
    m = model(IDENTITY_BYTES)
    t = Tensor("INPUT0", BYTES, (1,), array=np.array([b"a", b"b", b"c"], dtype=np.object_))
    assert error_of(request(m, t), m) == (
        "[request id: <id_unknown>] unexpected number of string elements 2 for inference input 'INPUT0' for "
        "model 'identity_bytes', expecting 1"
    )


def test_batch_of_zero() -> None:
    # the reference: a batch dimension of 0 leaves the batch out of the element count
    m = model(ADD_SUB)
    req = request(m, fp32("INPUT0", (0, 16)), fp32("INPUT1", (0, 16)))
    assert error_of(req, m) == (
        "[request id: <id_unknown>] input byte size mismatch for input 'INPUT1' for model 'add_sub'. "
        "Expected 64, got 0"
    )


def test_good_raw_bytes_are_decoded_in_shape() -> None:
    m = model(IDENTITY_BYTES)
    t = Tensor("INPUT0", BYTES, (2,), raw=memoryview(_encode([b"ab", b"c"])))
    validate_request(request(m, t), m)
    assert t.array.shape == (2,)
    assert t.array.tolist() == [b"ab", b"c"]


def _reference_cases() -> list[tuple[str, InferRequest, Model]]:
    add_sub, identity, strings = model(ADD_SUB), model(IDENTITY_FP32), model(IDENTITY_BYTES)
    i32 = Tensor("INPUT0", BY_WIRE["INT32"], (1, 16), array=np.zeros((1, 16), np.int32))
    boolean = Tensor("INPUT0", BY_WIRE["BOOL"], (2,), array=np.zeros(2, bool))
    one_string = Tensor("INPUT0", BYTES, (2,), array=np.array([b"a"], dtype=np.object_))
    return [
        ("err_wrong_input_name", request(add_sub, fp32("INPUTX", (1, 16)), fp32("INPUT1", (1, 16))), add_sub),
        ("err_unknown_output", request(add_sub, outputs=["OUTPUTX"]), add_sub),
        ("err_missing_input", request(add_sub, fp32("INPUT0", (1, 16))), add_sub),
        ("grpc err_missing_input", request(add_sub, fp32("INPUT0", (1, 16)), rid="g-1"), add_sub),
        ("opt_missing2", request(add_sub), add_sub),
        ("err_wrong_datatype", request(add_sub, i32, fp32("INPUT1", (1, 16))), add_sub),
        ("bool_dt", request(identity, boolean), identity),
        ("err_wrong_shape", request(add_sub, fp32("INPUT0", (1, 15)), fp32("INPUT1", (1, 16))), add_sub),
        (
            "grpc err_wrong_shape",
            request(add_sub, fp32("INPUT0", (1, 15)), fp32("INPUT1", (1, 16)), rid="g-1"),
            add_sub,
        ),
        ("err_rank_nobatch_model", request(identity, fp32("INPUT0", (2, 3))), identity),
        ("rank0", request(add_sub, fp32("INPUT0", ()), fp32("INPUT1", (1, 16))), add_sub),
        (
            "err_batch_too_large",
            request(add_sub, fp32("INPUT0", (65, 16)), fp32("INPUT1", (65, 16))),
            add_sub,
        ),
        ("batch_mismatch", request(add_sub, fp32("INPUT0", (1, 16)), fp32("INPUT1", (2, 16))), add_sub),
        (
            "grpc err_raw_size_mismatch",
            request(
                add_sub, raw("INPUT0", "FP32", (1, 16), 40), raw("INPUT1", "FP32", (1, 16), 64), rid="g-1"
            ),
            add_sub,
        ),
        ("bytes_json", request(strings, one_string), strings),
        ("batch0", request(add_sub, fp32("INPUT0", (0, 16)), fp32("INPUT1", (0, 16))), add_sub),
    ]


def test_reference_errors_are_read(reference_errors: dict[str, int | None]) -> None:
    assert reference_errors["unexpected inference input 'INPUTX' for model 'add_sub'"] == 400
    assert reference_errors["Request for unknown model: 'nope' is not found"] == 404
    assert "[request id: g-1] inference request batch-size must be <= 64 for 'add_sub'" in reference_errors


@pytest.mark.parametrize(
    ("case", "req", "m"), _reference_cases(), ids=lambda v: v if isinstance(v, str) else ""
)
def test_text_is_the_references(
    case: str, req: InferRequest, m: Model, reference_errors: dict[str, int | None]
) -> None:
    text = error_of(req, m)
    assert text in reference_errors
    assert reference_errors[text] in (400, None)
