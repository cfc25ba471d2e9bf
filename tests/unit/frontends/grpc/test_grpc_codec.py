"""The gRPC codec: every datatype through raw and typed contents, responses read back by protobuf
and tritonclient, parameter typing and the reference's texts."""

from __future__ import annotations

import functools
import math
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from tritonclient.grpc import InferResult, service_pb2_grpc
from tritonclient.grpc import service_pb2 as pb

from inferd.core.request import SEQUENCE_END, SEQUENCE_START, parse_version
from inferd.core.response import InferResponse
from inferd.core.tensor import Tensor, serialize_bytes
from inferd.core.types import BY_WIRE, BYTES
from inferd.engine.model import Model
from inferd.engine.validate import validate_request
from inferd.errors import InferdError, InvalidArgumentError, NotFoundError
from inferd.frontends.grpc import codec
from inferd.frontends.grpc._pb import pb as inferd_pb
from inferd.frontends.grpc.aio import server_options
from inferd.frontends.grpc.codec import (
    FINAL_FALSE,
    FINAL_TRUE,
    ResponseEncoder,
    apply_parameters,
    decode_infer_request,
    encode_parameters,
    stream_error,
    stream_response,
    varint,
    well_formed,
)
from inferd.frontends.grpc.service import UNARY_RPCS, InferenceServicer
from inferd.options import ServerOptions
from inferd.repository import parse_config_text
from inferd.server_config import GrpcConfig

WIRE_TYPES = list(BY_WIRE)
#: wire datatype -> the InferTensorContents field that carries it
TYPED_FIELD = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}


def model(wire: str, dims: str = "-1", max_batch_size: int = 0) -> Model:
    text = f"""
    name: "m"
    backend: "python"
    max_batch_size: {max_batch_size}
    input [ {{ name: "IN" data_type: {BY_WIRE[wire].config} dims: [ {dims} ] }} ]
    output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] }} ]
    """
    return Model("m", 1, parse_config_text(text, "config.pbtxt"), Path("/nonexistent"))


MODELS = {w: model(w) for w in WIRE_TYPES}


@functools.cache
def model_of_rank(wire: str, rank: int) -> Model:
    return model(wire, ", ".join(["-1"] * rank))


ADD_SUB_LIKE = model("FP32", "16", 64)


def arrays(wire: str) -> st.SearchStrategy[np.ndarray[Any, Any]]:
    shape = hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=4)
    if wire == "BYTES":
        return shape.flatmap(
            lambda s: st.lists(st.binary(max_size=8), min_size=math.prod(s), max_size=math.prod(s)).map(
                lambda items, s=s: np.array([*items, b""], dtype=np.object_)[:-1].reshape(s)  # type: ignore[misc]
            )
        )
    return hnp.arrays(BY_WIRE[wire].numpy, shape)


def request_for(wire: str, arr: np.ndarray[Any, Any], typed: bool) -> Any:
    msg = pb.ModelInferRequest(model_name="m", id="r")
    t = msg.inputs.add(name="IN", datatype=wire, shape=list(arr.shape))
    if not typed:
        data = serialize_bytes(arr) if wire == "BYTES" else np.ascontiguousarray(arr).tobytes()
        msg.raw_input_contents.append(data)
    else:
        t.contents.SetInParent()
        values = arr.reshape(-1).tolist()
        getattr(t.contents, TYPED_FIELD[wire]).extend(values)
    return msg


def decode(msg: Any, m: Model) -> Any:
    request, _ = decode_infer_request(msg, m)
    validate_request(request, m)
    return request


def same(a: np.ndarray[Any, Any], b: np.ndarray[Any, Any]) -> bool:
    if a.dtype.kind == "f":
        return bool(np.array_equal(a, b, equal_nan=True))
    return a.shape == b.shape and bool(np.all(a == b))


def test_the_module_is_tritonclients() -> None:
    assert inferd_pb is pb  # loaded once, shared with tritonclient


# -- requests: every datatype, raw and typed -----------------------------------------------------------
@pytest.mark.parametrize("wire", WIRE_TYPES)
@given(data=st.data())
def test_raw_contents_round_trip(wire: str, data: st.DataObject) -> None:
    arr = data.draw(arrays(wire))
    request = decode(request_for(wire, arr, typed=False), model_of_rank(wire, arr.ndim))
    t = request.inputs["IN"]
    assert t.datatype is BY_WIRE[wire] and t.shape == arr.shape
    assert same(t.array, arr)


@pytest.mark.parametrize("wire", list(TYPED_FIELD))
@given(data=st.data())
def test_typed_contents_round_trip(wire: str, data: st.DataObject) -> None:
    arr = data.draw(arrays(wire))
    request = decode(request_for(wire, arr, typed=True), model_of_rank(wire, arr.ndim))
    t = request.inputs["IN"]
    assert t.datatype is BY_WIRE[wire] and t.shape == arr.shape
    assert same(t.array, arr)


@pytest.mark.parametrize("wire", ["FP16", "BF16"])
def test_no_typed_field_for_16_bit_floats(wire: str) -> None:
    msg = pb.ModelInferRequest(model_name="m")
    msg.inputs.add(name="IN", datatype=wire, shape=[1]).contents.fp32_contents.append(1.0)
    with pytest.raises(InvalidArgumentError) as e:
        decode(msg, MODELS[wire])
    assert e.value.message == (
        f"unexpected explicit tensor data for input tensor 'IN' for model 'm' of type 'FP32', expected datatype '{wire}'"
    )


def test_narrow_typed_ints_wrap_as_a_cast() -> None:
    msg = pb.ModelInferRequest(model_name="m")
    msg.inputs.add(name="IN", datatype="UINT8", shape=[3]).contents.uint_contents.extend([1, 300, 255])
    assert decode(msg, MODELS["UINT8"]).inputs["IN"].array.tolist() == [1, 44, 255]


def test_raw_and_typed_at_once() -> None:
    msg = request_for("FP32", np.ones(2, np.float32), typed=True)
    msg.raw_input_contents.append(b"\0" * 8)
    with pytest.raises(
        InvalidArgumentError, match="contents field must not be specified when using raw_input"
    ):
        decode(msg, MODELS["FP32"])


def test_raw_count_short_and_long() -> None:
    msg = pb.ModelInferRequest(model_name="m")
    msg.inputs.add(name="IN", datatype="FP32", shape=[1])
    with pytest.raises(InvalidArgumentError) as e:
        decode(msg, MODELS["FP32"])
    assert e.value.message == "unable to find data for input tensor 'IN' for model 'm' in request."
    msg.raw_input_contents.extend([b"\0\0\x80?", b"extra"])  # extra entries are ignored, as the reference
    assert decode(msg, MODELS["FP32"]).inputs["IN"].array.tolist() == [1.0]


def test_raw_size_must_match_shape() -> None:
    msg = pb.ModelInferRequest(model_name="m", id="g-1")
    msg.inputs.add(name="IN", datatype="FP32", shape=[1, 16])
    msg.raw_input_contents.append(b"\0" * 40)
    with pytest.raises(InvalidArgumentError) as e:
        decode(msg, ADD_SUB_LIKE)
    assert (
        e.value.message
        == "[request id: g-1] input byte size mismatch for input 'IN' for model 'm'. Expected 64, got 40"
    )


def test_unknown_datatype_reaches_validation_as_invalid() -> None:
    msg = pb.ModelInferRequest(model_name="m")
    msg.inputs.add(name="IN", datatype="FOO", shape=[1])
    msg.raw_input_contents.append(b"\0" * 4)
    with pytest.raises(InvalidArgumentError, match="data-type is '<invalid>', but model 'm' expects 'FP32'"):
        decode(msg, MODELS["FP32"])


def test_duplicate_input() -> None:
    msg = pb.ModelInferRequest(model_name="m")
    msg.inputs.add(name="IN", datatype="FP32", shape=[1])
    msg.inputs.add(name="IN", datatype="FP32", shape=[1])
    with pytest.raises(InvalidArgumentError) as e:
        decode(msg, MODELS["FP32"])
    assert e.value.message == "[request id: <id_unknown>] input 'IN' already exists in request"


def test_shared_memory_without_a_manager_is_an_unknown_region() -> None:
    msg = pb.ModelInferRequest(model_name="m")
    t = msg.inputs.add(name="IN", datatype="FP32", shape=[1])
    t.parameters["shared_memory_region"].string_param = "r"
    with pytest.raises(InvalidArgumentError, match="'shared_memory_byte_size' must be specified"):
        decode(msg, MODELS["FP32"])
    t.parameters["shared_memory_byte_size"].int64_param = 4
    with pytest.raises(NotFoundError, match="Unable to find shared memory region: 'r'"):
        decode(msg, MODELS["FP32"])
    t.parameters["shared_memory_offset"].string_param = "0"
    with pytest.raises(
        InvalidArgumentError, match="'shared_memory_offset' parameter for tensor 'IN', expected"
    ):
        decode(msg, MODELS["FP32"])


# -- parameters ----------------------------------------------------------------------------------
def params(**kv: tuple[str, Any]) -> dict[str, Any]:
    msg = pb.ModelInferRequest()
    for k, (kind, v) in kv.items():
        setattr(msg.parameters[k], kind, v)
    return dict(msg.parameters)


def test_reserved_parameters_are_applied() -> None:
    request = decode(request_for("FP32", np.ones(1, np.float32), False), MODELS["FP32"])
    empty_final = apply_parameters(
        request,
        params(
            sequence_id=("string_param", "s"),
            sequence_start=("bool_param", True),
            sequence_end=("bool_param", True),
            priority=("uint64_param", 2),
            timeout=("int64_param", 7),
            triton_enable_empty_final_response=("bool_param", True),
            custom=("double_param", 1.5),
        ),
    )
    assert empty_final
    assert request.correlation_id == "s" and request.flags == SEQUENCE_START | SEQUENCE_END
    assert (request.priority, request.timeout_us, request.parameters) == (2, 7, {"custom": 1.5})


@pytest.mark.parametrize(
    ("key", "kind", "value", "message"),
    [
        (
            "sequence_id",
            "uint64_param",
            1,
            "invalid value type for 'sequence_id' parameter, expected int64_param or string_param.",
        ),
        (
            "sequence_start",
            "int64_param",
            1,
            "invalid value type for 'sequence_start' parameter, expected bool_param.",
        ),
        (
            "priority",
            "string_param",
            "1",
            "invalid value type for 'priority' parameter, expected int64_param or uint64_param.",
        ),
        ("priority", "int64_param", -1, "invalid value for 'priority', expected value >= 0."),
        ("timeout", "uint64_param", 1, "invalid value type for 'timeout' parameter, expected int64_param."),
        (
            "u",
            "uint64_param",
            1,
            "invalid value type for 'u' parameter, expected int64_param, bool_param, or string_param.",
        ),
        (
            "triton_enable_empty_final_response",
            "int64_param",
            1,
            "invalid value type for 'triton_enable_empty_final_response' parameter, expected bool_param.",
        ),
        (
            "triton_x",
            "bool_param",
            True,
            "parameter keys starting with 'triton_' are reserved for Triton usage. Only the following keys starting with 'triton_' are allowed: triton_enable_empty_final_response",
        ),
    ],
)
def test_parameter_typing(key: str, kind: str, value: Any, message: str) -> None:
    request = decode(request_for("FP32", np.ones(1, np.float32), False), MODELS["FP32"])
    with pytest.raises(InvalidArgumentError) as e:
        apply_parameters(request, params(**{key: (kind, value)}))
    assert e.value.message == message


def test_parameter_without_value() -> None:
    msg = pb.ModelInferRequest()
    msg.parameters["e"].Clear()
    request = decode(request_for("FP32", np.ones(1, np.float32), False), MODELS["FP32"])
    with pytest.raises(InvalidArgumentError, match="invalid value type for 'e' parameter"):
        apply_parameters(request, dict(msg.parameters))


@pytest.mark.parametrize(("kind", "value"), [("string_param", "2"), ("int64_param", 0), ("int64_param", -1)])
def test_classification_parameter(kind: str, value: Any) -> None:
    msg = request_for("FP32", np.ones(1, np.float32), False)
    setattr(msg.outputs.add(name="OUT").parameters["classification"], kind, value)
    with pytest.raises(InvalidArgumentError, match="'classification' parameter"):
        decode(msg, MODELS["FP32"])


@pytest.mark.parametrize(
    ("text", "version"), [("", ""), ("1", "1"), ("7x", "7"), (" 3", "3"), ("-1", ""), ("-5", "-5")]
)
def test_parse_version(text: str, version: str) -> None:
    assert parse_version(text) == version


@pytest.mark.parametrize("text", ["abc", "x1", "99999999999999999999"])
def test_parse_version_errors(text: str) -> None:
    with pytest.raises(InvalidArgumentError) as e:
        parse_version(text)
    assert e.value.message == (
        f"failed to get model version from specified version string '{text}' (details: stol), "
        "version should be an integral value > 0"
    )


# -- responses -----------------------------------------------------------------------------------------
parameter_values = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=8),
)


@given(st.dictionaries(st.text(min_size=1, max_size=6), parameter_values, max_size=4))
def test_parameters_round_trip(values: dict[str, Any]) -> None:
    resp = pb.ModelInferResponse.FromString(encode_parameters(0x22, values))
    got = {k: getattr(v, v.WhichOneof("parameter_choice")) for k, v in resp.parameters.items()}
    assert got == values
    for k, v in values.items():
        kind = resp.parameters[k].WhichOneof("parameter_choice")
        if isinstance(v, bool):
            assert kind == "bool_param"
        elif isinstance(v, int):
            assert kind == ("uint64_param" if v >= 2**63 else "int64_param")


@pytest.mark.parametrize("wire", WIRE_TYPES)
@given(data=st.data())
def test_response_round_trip(wire: str, data: st.DataObject) -> None:
    arrs = data.draw(st.lists(arrays(wire), min_size=1, max_size=3))
    outputs = [Tensor(f"OUT{i}", BY_WIRE[wire], a.shape, array=a) for i, a in enumerate(arrs)]
    resp = InferResponse("m", "1", data.draw(st.text(max_size=5)), outputs, {"p": 1})
    body = ResponseEncoder().encode(resp)
    msg = pb.ModelInferResponse.FromString(body)
    assert (msg.model_name, msg.model_version, msg.id) == ("m", "1", resp.id)
    assert msg.parameters["p"].int64_param == 1
    assert len(msg.outputs) == len(msg.raw_output_contents) == len(arrs)
    result = InferResult(msg)  # what tritonclient makes of it
    for i, a in enumerate(arrs):
        o = msg.outputs[i]
        assert (o.name, o.datatype, tuple(o.shape)) == (f"OUT{i}", wire, a.shape)
        if wire == "BF16":
            assert msg.raw_output_contents[i] == a.tobytes()
            continue
        got = result.as_numpy(f"OUT{i}")
        if wire == "BYTES":
            assert got.reshape(-1).tolist() == a.reshape(-1).tolist() and got.shape == a.shape
        else:
            assert same(got, a)


def test_output_metadata_is_cached_per_name_datatype_shape() -> None:
    enc = ResponseEncoder()
    t = Tensor("O", BY_WIRE["FP32"], (1, 2), array=np.ones((1, 2), np.float32))
    first = enc.encode(InferResponse("m", "1", outputs=[t]))
    assert enc.encode(InferResponse("m", "1", outputs=[t])) == first
    assert len(enc._outputs) == 1


def test_stream_responses() -> None:
    inner = ResponseEncoder().encode(InferResponse("m", "1", "r"), FINAL_TRUE)
    msg = pb.ModelStreamInferResponse.FromString(stream_response(inner))
    assert msg.error_message == "" and msg.infer_response.parameters["triton_final_response"].bool_param
    msg = pb.ModelStreamInferResponse.FromString(stream_error("boom", "r", "m", FINAL_FALSE))
    assert msg.error_message == "boom"
    assert (msg.infer_response.model_name, msg.infer_response.id) == ("m", "r")
    assert msg.infer_response.parameters["triton_final_response"].bool_param is False
    msg = pb.ModelStreamInferResponse.FromString(stream_error("early", "r"))
    assert msg.infer_response.model_name == "" and not msg.infer_response.parameters


@given(st.integers(min_value=-(2**63), max_value=2**64 - 1))
def test_varint(n: int) -> None:
    assert pb.ModelInferResponse.FromString(b"\x10" + varint(n)) is not None
    if n < 2**63:
        shape = pb.ModelInferResponse.InferOutputTensor.FromString(codec.field(0x1A, varint(n))).shape
        assert list(shape) == [n]


def test_well_formed() -> None:
    assert well_formed(b"") and well_formed(b"\x0a\x03foo") and well_formed(b"\x08\x01")
    assert not well_formed(b"\xff") and not well_formed(b"\x0a\x05ab") and not well_formed(b"\x00")


# -- the servicer and its options ------------------------------------------------------------------
def test_servicer_has_every_generated_method() -> None:
    generated = {m for m in vars(service_pb2_grpc.GRPCInferenceServiceServicer) if not m.startswith("_")}
    assert generated == {*UNARY_RPCS, "ModelStreamInfer"}
    assert all(callable(getattr(InferenceServicer, m)) for m in generated)


def test_server_options_follow_tritonservers_flags() -> None:
    opts = dict(
        server_options(
            GrpcConfig.from_options(
                ServerOptions(
                    grpc_keepalive_time=1000,
                    grpc_max_connection_age=5,
                    grpc_infer_response_compression_level="high",
                    reuse_grpc_port=True,
                )
            )
        )
    )
    assert opts["grpc.max_send_message_length"] == 2**31 - 1
    assert opts["grpc.max_receive_message_length"] == 1 << 26  # --grpc-max-message-size
    assert opts["grpc.max_concurrent_streams"] == 256
    assert opts["grpc.keepalive_time_ms"] == 1000 and opts["grpc.keepalive_timeout_ms"] == 20000
    assert opts["grpc.max_connection_age_ms"] == 5 and opts["grpc.so_reuseport"] == 1
    assert opts["grpc.default_compression_level"] == 3
    assert dict(server_options(GrpcConfig()))["grpc.so_reuseport"] == 0


def test_errors_map_to_grpc_status_names() -> None:
    from inferd.frontends.grpc.service import _STATUS

    assert {c.name: s.name for c, s in _STATUS.items()}["UNSUPPORTED"] == "UNIMPLEMENTED"
    assert isinstance(InvalidArgumentError("x"), InferdError)


def test_bytes_typed_empty_contents() -> None:
    msg = pb.ModelInferRequest(model_name="m")
    msg.inputs.add(name="IN", datatype="BYTES", shape=[0]).contents.SetInParent()
    assert decode(msg, MODELS["BYTES"]).inputs["IN"].array.shape == (0,)
    assert BYTES.wire == "BYTES" and struct.calcsize("<I") == 4
