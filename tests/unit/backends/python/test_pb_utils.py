"""triton_python_backend_utils look-alike: tensors, requests, errors, helpers, ModelConfig, Logger."""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

import numpy as np
import pytest
from tritonclient.utils import serialize_byte_tensor as client_serialize

from inferd.backends.python import pb_utils
from inferd.core.request import SEQUENCE_END, SEQUENCE_START, InferRequest, RequestedOutput
from inferd.core.tensor import Tensor as CoreTensor
from inferd.core.types import BY_WIRE

CODES = {
    "BOOL": 1, "UINT8": 2, "UINT16": 3, "UINT32": 4, "UINT64": 5, "INT8": 6, "INT16": 7, "INT32": 8,
    "INT64": 9, "FP16": 10, "FP32": 11, "FP64": 12, "BYTES": 13,
}  # fmt: skip


def test_importable_under_its_triton_name() -> None:
    pb_utils.install()
    import triton_python_backend_utils

    assert triton_python_backend_utils is pb_utils
    assert sys.modules["triton_python_backend_utils"] is pb_utils


def test_constants() -> None:
    assert pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START == 1
    assert pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END == 2
    assert pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL == 1
    assert pb_utils.TRITONSERVER_REQUEST_RELEASE_ALL == 1
    assert pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE == 2


# -- Tensor --------------------------------------------------------------------------------------


def test_tensor_accessors() -> None:
    arr = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = pb_utils.Tensor("X", arr)
    assert t.name() == "X"
    assert t.as_numpy() is arr  # in-process: no copy
    assert t.shape() == [2, 3]
    assert t.is_cpu()
    assert repr(t) == "Tensor('X', shape=[2, 3], dtype=float32)"


def test_tensor_arguments_are_checked_as_the_reference_checks_them() -> None:
    for args in (("X", [[1, 2]]), (None, np.zeros(2)), ("X", None), ("X", np.zeros(2), np.int16)):
        with pytest.raises(TypeError) as info:
            pb_utils.Tensor(*args)
        assert str(info.value).startswith(
            "__init__(): incompatible constructor arguments. The following argument types are supported:\n"
            "    1. c_python_backend_utils.Tensor(arg0: str, arg1: numpy.ndarray)\n\nInvoked with: "
        )
    with pytest.raises(pb_utils.TritonModelException, match=r"^Tensor name cannot be an empty string\.$"):
        pb_utils.Tensor("", np.zeros(2))
    with pytest.raises(pb_utils.TritonModelException, match=r"^NumPy dtype is not supported\.$"):
        pb_utils.Tensor("X", np.zeros(2, np.complex64))


@pytest.mark.parametrize(("wire", "code"), CODES.items())
def test_triton_dtype_codes(wire: str, code: int) -> None:
    arr = np.zeros(2, dtype=BY_WIRE[wire].numpy)
    assert pb_utils.Tensor("X", arr).triton_dtype() == code
    assert pb_utils.numpy_to_triton_type(BY_WIRE[wire].numpy) == code
    assert np.dtype(pb_utils.triton_to_numpy_type(code)) == BY_WIRE[wire].numpy


def test_dlpack_round_trip() -> None:
    arr = np.arange(4, dtype=np.float64)
    t = pb_utils.Tensor("X", arr)
    back = pb_utils.Tensor.from_dlpack("Y", t)
    assert back.name() == "Y"
    np.testing.assert_array_equal(back.as_numpy(), arr)
    assert np.shares_memory(back.as_numpy(), arr)
    assert t.__dlpack_device__() == (1, 0)
    from_capsule = pb_utils.Tensor.from_dlpack("Z", t.to_dlpack())
    np.testing.assert_array_equal(from_capsule.as_numpy(), arr)


# -- type helpers --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "dtype"),
    [
        ("TYPE_BOOL", np.bool_),
        ("TYPE_UINT8", np.uint8),
        ("TYPE_UINT16", np.uint16),
        ("TYPE_UINT32", np.uint32),
        ("TYPE_UINT64", np.uint64),
        ("TYPE_INT8", np.int8),
        ("TYPE_INT16", np.int16),
        ("TYPE_INT32", np.int32),
        ("TYPE_INT64", np.int64),
        ("TYPE_FP16", np.float16),
        ("TYPE_FP32", np.float32),
        ("TYPE_FP64", np.float64),
        ("TYPE_STRING", np.object_),
    ],
)
def test_triton_string_to_numpy(name: str, dtype: type) -> None:
    assert np.dtype(pb_utils.triton_string_to_numpy(name)) == np.dtype(dtype)
    assert pb_utils.TRITON_STRING_TO_NUMPY[name] is pb_utils.triton_string_to_numpy(name)


def test_triton_string_to_numpy_has_the_triton_keys() -> None:
    # Triton's table has no BF16 entry: numpy has no bfloat16
    assert set(pb_utils.TRITON_STRING_TO_NUMPY) == {f"TYPE_{w}" for w in CODES if w != "BYTES"} | {
        "TYPE_STRING"
    }


def test_serialize_and_deserialize_byte_tensor() -> None:
    arr = np.array([[b"a", b""], [b"xyz", "é".encode()]], dtype=np.object_)
    encoded = pb_utils.serialize_byte_tensor(arr)
    assert encoded is not None
    assert encoded.dtype == np.uint8
    assert encoded.tobytes() == client_serialize(arr).item()
    back = pb_utils.deserialize_bytes_tensor(encoded.tobytes())
    assert back.tolist() == [b"a", b"", b"xyz", "é".encode()]
    assert pb_utils.serialize_byte_tensor(np.empty((0,), dtype=np.object_)) is None


# -- errors --------------------------------------------------------------------------------------


def test_triton_error_codes() -> None:
    e = pb_utils.TritonError
    assert list(range(8)) == [e.UNKNOWN, e.INTERNAL, e.NOT_FOUND, e.INVALID_ARG, e.UNAVAILABLE, e.UNSUPPORTED,
            e.ALREADY_EXISTS, e.CANCELLED]  # fmt: skip
    err = pb_utils.TritonError("bad")
    assert err.message() == "bad"
    assert err.code() == e.INTERNAL  # Triton's default
    assert pb_utils.TritonError("x", e.NOT_FOUND).code() == 2
    assert repr(err) == "TritonError('bad', 1)"
    assert issubclass(pb_utils.TritonModelException, Exception)


def test_inference_response() -> None:
    t = pb_utils.Tensor("Y", np.ones(1))
    ok = pb_utils.InferenceResponse(output_tensors=[t])
    assert ok.output_tensors() == [t]
    assert not ok.has_error() and ok.error() is None
    err = pb_utils.TritonError("nope")
    bad = pb_utils.InferenceResponse(error=err)
    assert bad.has_error() and bad.error() is err
    assert bad.output_tensors() == []
    assert pb_utils.get_output_tensor_by_name(ok, "Y") is t
    assert pb_utils.get_output_tensor_by_name(ok, "Z") is None


# -- requests ------------------------------------------------------------------------------------


def _core_request(**kwargs: Any) -> InferRequest:
    a = np.arange(3, dtype=np.float32)
    defaults: dict[str, Any] = {
        "model_name": "m",
        "inputs": {"A": CoreTensor.from_array("A", a), "B": CoreTensor.from_array("B", a * 2)},
    }
    defaults.update(kwargs)
    return InferRequest(**defaults)


def test_received_request_accessors() -> None:
    core = _core_request(
        id="r1",
        correlation_id="seq-a",
        flags=SEQUENCE_START | SEQUENCE_END,
        timeout_us=500,
        parameters={"foo": "bar", "n": 3, "f": 1.5, "b": True},
        outputs=[RequestedOutput("Y")],
    )
    r = pb_utils.InferenceRequest._wrap(core, frozenset({"Y"}))
    assert [t.name() for t in r.inputs()] == ["A", "B"]
    assert r.request_id() == "r1"
    assert r.correlation_id() == "seq-a"
    assert r.flags() == 3
    assert r.timeout() == 500
    assert json.loads(r.parameters()) == {"foo": "bar", "n": 3, "f": 1.5, "b": True}
    assert r.parameters() == '{"foo":"bar","n":3,"f":1.5,"b":true}'
    assert r.model_name() == "m"
    assert r.requested_output_names() == {"Y"}
    assert isinstance(r.requested_output_names(), set)
    assert isinstance(r.trace(), pb_utils.InferenceTrace)
    assert not r.is_cancelled()
    assert isinstance(r.get_response_sender(), pb_utils.InferenceResponseSender)


def test_input_lookup_shares_the_request_memory() -> None:
    core = _core_request()
    r = pb_utils.InferenceRequest._wrap(core, None)
    a = pb_utils.get_input_tensor_by_name(r, "A")
    assert a is not None
    assert a.as_numpy() is core.inputs["A"].array
    assert pb_utils.get_input_tensor_by_name(r, "missing") is None  # how optional inputs are seen
    r.inputs()
    assert pb_utils.get_input_tensor_by_name(r, "B") is not None
    assert pb_utils.get_input_tensor_by_name(r, "missing") is None
    assert r.requested_output_names() == set()


def test_keyword_constructor_wraps_a_received_request() -> None:
    core = _core_request(correlation_id=7)
    r = pb_utils.InferenceRequest(_core=core, _output_names=frozenset({"Y", "Z"}))
    assert r.correlation_id() == 7
    assert r.requested_output_names() == {"Y", "Z"}


def test_set_release_flags_takes_any_uint32_as_the_reference_binding() -> None:
    r = pb_utils.InferenceRequest._wrap(_core_request(), None)
    r.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_ALL)
    r.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
    r.set_release_flags(7)  # the reference accepts it (and reschedules only on the exact flag)
    for bad in (-1, 2**32, "2", 2.0, None):
        with pytest.raises(TypeError, match="incompatible function arguments"):
            r.set_release_flags(bad)  # type: ignore[arg-type]


def test_bls_request_construction() -> None:
    x = pb_utils.Tensor("X", np.ones(2, dtype=np.int32))
    r = pb_utils.InferenceRequest(
        model_name="other",
        requested_output_names=["Y"],
        inputs=[x],
        request_id="bls-1",
        correlation_id=5,
        model_version=2,
        flags=1,
        timeout=10,
        parameters={"k": "v"},
    )
    core = r._core
    assert core.model_name == "other"
    assert core.model_version == "2"
    assert core.id == "bls-1"
    assert core.correlation_id == 5 and core.flags == 1 and core.timeout_us == 10
    assert core.parameters == {"k": "v"}
    assert core.outputs is not None and [o.name for o in core.outputs] == ["Y"]
    assert core.inputs["X"].datatype is BY_WIRE["INT32"]
    assert core.inputs["X"].array is x.as_numpy()
    assert r.requested_output_names() == {"Y"}
    latest = pb_utils.InferenceRequest(
        model_name="other", inputs=[x], requested_output_names=[], parameters={"a": 1}
    )
    assert latest._core.model_version == ""
    assert latest._core.outputs is None
    assert latest._core.parameters == {"a": 1}


def test_bls_and_senders_outside_an_instance() -> None:
    r = pb_utils.InferenceRequest(model_name="other", inputs=[], requested_output_names=[])
    with pytest.raises(pb_utils.TritonModelException, match="BLS is not available"):
        r.exec()
    sender = pb_utils.InferenceRequest._wrap(_core_request(), None).get_response_sender()
    with pytest.raises(pb_utils.TritonModelException, match="response senders are not available"):
        sender.send(pb_utils.InferenceResponse(), pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
    assert not sender.is_cancelled()


# -- config helpers ------------------------------------------------------------------------------

CONFIG: dict[str, Any] = {
    "name": "m",
    "input": [{"name": "A", "data_type": "TYPE_FP32", "dims": [2]}],
    "output": [{"name": "Y", "data_type": "TYPE_INT64", "dims": [-1]}],
    "model_transaction_policy": {"decoupled": True},
}


def test_config_lookups() -> None:
    assert pb_utils.get_input_config_by_name(CONFIG, "A") == CONFIG["input"][0]
    assert pb_utils.get_input_config_by_name(CONFIG, "Y") is None
    out = pb_utils.get_output_config_by_name(CONFIG, "Y")
    assert out is not None
    assert pb_utils.triton_string_to_numpy(out["data_type"]) is np.int64
    assert pb_utils.get_output_config_by_name(CONFIG, "A") is None
    assert pb_utils.get_input_config_by_name({}, "A") is None
    assert pb_utils.using_decoupled_model_transaction_policy(CONFIG)
    assert not pb_utils.using_decoupled_model_transaction_policy({})


def test_model_config_add_input_and_output() -> None:
    cfg = pb_utils.ModelConfig(json.dumps({"name": "m", "max_batch_size": 0}))
    cfg.add_input({"name": "A", "data_type": "TYPE_FP32", "dims": (4,)})
    cfg.add_output({"name": "Y", "data_type": "TYPE_FP32", "dims": [4]})
    cfg.set_max_batch_size(8)
    cfg.set_dynamic_batching()
    cfg.set_model_transaction_policy({"decoupled": False})
    assert cfg.as_dict() == {
        "name": "m",
        "max_batch_size": 8,
        "input": [{"name": "A", "data_type": "TYPE_FP32", "dims": [4]}],
        "output": [{"name": "Y", "data_type": "TYPE_FP32", "dims": [4]}],
        "dynamic_batching": {},
        "model_transaction_policy": {"decoupled": False},
    }


def test_model_config_add_merges_an_existing_entry() -> None:
    cfg = pb_utils.ModelConfig({"name": "m", "input": [{"name": "A", "data_type": "TYPE_FP32"}]})
    cfg.add_input({"name": "A", "data_type": "TYPE_FP32", "dims": [3]})
    assert cfg.as_dict()["input"] == [{"name": "A", "data_type": "TYPE_FP32", "dims": [3]}]


@pytest.mark.parametrize("method", ["add_input", "add_output"])
def test_model_config_add_conflicts(method: str) -> None:
    key = "input" if method == "add_input" else "output"
    cfg = pb_utils.ModelConfig({"name": "m", key: [{"name": "A", "data_type": "TYPE_FP32", "dims": [3]}]})
    with pytest.raises(ValueError) as info:
        getattr(cfg, method)({"name": "A", "data_type": "TYPE_INT32"})
    assert str(info.value) == (
        f"unable to load model 'm', configuration expects data_type TYPE_FP32 for {key} 'A' but "
        "auto-complete sets TYPE_INT32"
    )
    with pytest.raises(ValueError, match="dims"):
        getattr(cfg, method)({"name": "A", "dims": [4]})
    with pytest.raises(ValueError, match=f"{key} in auto-complete-config must contain the 'name' property"):
        getattr(cfg, method)({"data_type": "TYPE_FP32"})


def test_model_config_batching_conflicts() -> None:
    cfg = pb_utils.ModelConfig({"name": "m", "max_batch_size": 16, "sequence_batching": {}})
    with pytest.raises(ValueError, match="max_batch_size 16 which is greater than the value 8"):
        cfg.set_max_batch_size(8)
    cfg.set_max_batch_size(32)
    with pytest.raises(ValueError, match="sequence_batching"):
        cfg.set_dynamic_batching()


# -- Logger --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "level"),
    [
        ("log_info", logging.INFO),
        ("log_warn", logging.WARNING),
        ("log_error", logging.ERROR),
        ("log_verbose", logging.DEBUG),
    ],
)
def test_logger_writes_at_the_callers_line(method: str, level: int, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="inferd.model")
    line = sys._getframe().f_lineno + 1
    getattr(pb_utils.Logger, method)("hello")
    (record,) = [r for r in caplog.records if r.name == "inferd.model"]
    assert record.levelno == level
    assert record.getMessage() == "hello"  # as it is: the log's formatter quotes it once
    assert record.pathname == __file__
    assert record.lineno == line
    assert record.funcName == "test_logger_writes_at_the_callers_line"


@pytest.mark.parametrize(
    ("level", "expected"),
    [
        (pb_utils.Logger.INFO, logging.INFO),
        (pb_utils.Logger.WARNING, logging.WARNING),
        (pb_utils.Logger.ERROR, logging.ERROR),
        (pb_utils.Logger.VERBOSE, logging.DEBUG),
    ],
)
def test_logger_log_with_a_level(level: int, expected: int, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="inferd.model")
    line = sys._getframe().f_lineno + 1
    pb_utils.Logger.log("x", level)
    (record,) = [r for r in caplog.records if r.name == "inferd.model"]
    assert record.levelno == expected
    assert record.pathname == __file__
    assert record.lineno == line


def test_logger_default_level_is_info(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="inferd.model")
    pb_utils.Logger.log("x")
    (record,) = [r for r in caplog.records if r.name == "inferd.model"]
    assert record.levelno == logging.INFO
