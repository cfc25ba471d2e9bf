"""Argument checks of pb_utils calls: the exceptions and texts of the reference's pybind11 bindings
(observed on Triton 2.51 with a probe model; qa/L0_backend_python/argument_validation tests them)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from inferd.backends.python import pb_utils

INPUTS = [pb_utils.Tensor("INPUT0", np.asarray([1, 2], dtype=np.int32))]
REQUEST_SIGNATURE = (
    "__init__(): incompatible constructor arguments. The following argument types are supported:\n"
    "    1. c_python_backend_utils.InferenceRequest(request_id: str = '', correlation_id: object = 0, inputs: "
    "List[triton::backend::python::PbTensor], requested_output_names: List[str], model_name: str, model_version: "
    "int = -1, flags: int = 0, timeout: int = 0, preferred_memory: c_python_backend_utils.PreferredMemory = "
)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"inputs": None, "model_name": "m", "requested_output_names": ["o"]},
        {"inputs": INPUTS, "model_name": None, "requested_output_names": ["o"]},
        {"inputs": INPUTS, "model_name": "m", "requested_output_names": [None]},
        {"inputs": INPUTS, "model_name": "m", "requested_output_names": None},
        {"inputs": INPUTS, "model_name": "m", "requested_output_names": [], "correlation_id": None},
        {"inputs": INPUTS, "model_name": "m", "requested_output_names": [], "request_id": None},
        {"inputs": INPUTS, "model_name": "m", "requested_output_names": [], "model_version": None},
        {"inputs": INPUTS, "model_name": "m", "requested_output_names": [], "flags": None},
        {"model_name": "m"},
        {"inputs": [], "requested_output_names": []},
        {"inputs": [], "model_name": "m", "requested_output_names": [], "nonsense": 1},
    ],
)
def test_request_arguments_that_do_not_convert(kwargs: dict[str, Any]) -> None:
    with pytest.raises(TypeError) as info:
        pb_utils.InferenceRequest(**kwargs)
    text = str(info.value)
    assert text.startswith(REQUEST_SIGNATURE)
    invoked = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
    assert text.endswith(f"\n\nInvoked with: kwargs: {invoked}")


@pytest.mark.parametrize(
    ("kwargs", "text"),
    [
        (
            {"inputs": [None]},
            "Input tensor for request with id 'abc' and model name 'm' should not be empty.",
        ),
        ({"correlation_id": 1.5}, "Correlation ID must be integer or string"),
        ({"parameters": '{"a": 1}'}, "Expect N8pybind114dictE, got <class 'str'>"),
        ({"parameters": [1]}, "Expect N8pybind114dictE, got <class 'list'>"),
        ({"parameters": {1: 2}}, "Expect parameters keys to have type str, found type <class 'int'>"),
        (
            {"parameters": {"a": 1.5}},
            "Expect parameters values to have type bool/int/str, found type <class 'float'>",
        ),
    ],
)
def test_request_arguments_the_backend_refuses(kwargs: dict[str, Any], text: str) -> None:
    args: dict[str, Any] = {
        "inputs": [],
        "model_name": "m",
        "requested_output_names": [],
        "request_id": "abc",
    }
    args.update(kwargs)
    with pytest.raises(pb_utils.TritonModelException) as info:
        pb_utils.InferenceRequest(**args)
    assert str(info.value) == text


def test_request_arguments_that_are_fine() -> None:
    r = pb_utils.InferenceRequest(requested_output_names=[], inputs=[], model_name="m")
    assert r.correlation_id() == 0 and r.parameters() == "{}"
    assert pb_utils.InferenceRequest(
        inputs=INPUTS, model_name="m", requested_output_names=["o"], correlation_id=5
    )
    s = pb_utils.InferenceRequest(
        "id",
        "seq-5",
        INPUTS,
        ["o"],
        "m",
        2,
        1,
        7,
        pb_utils.PreferredMemory(),
        pb_utils.InferenceTrace(),
        {"a": True},
    )
    assert (s.request_id(), s.correlation_id(), s.flags(), s.timeout()) == ("id", "seq-5", 1, 7)
    assert s.parameters() == '{"a":true}'
    s.set_flags(pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START)
    assert s.flags() == 1


def test_response_arguments() -> None:
    with pytest.raises(pb_utils.TritonModelException) as info:
        pb_utils.InferenceResponse(output_tensors=[None])
    assert str(info.value) == "Output tensor for inference response should not be empty."
    with pytest.raises(TypeError) as type_info:
        pb_utils.InferenceResponse(output_tensors=None)
    assert str(type_info.value) == (
        "__init__(): incompatible constructor arguments. The following argument types are supported:\n"
        "    1. c_python_backend_utils.InferenceResponse(output_tensors: List[c_python_backend_utils.Tensor] = [], "
        "error: c_python_backend_utils.TritonError = None)\n\nInvoked with: kwargs: output_tensors=None"
    )
    with pytest.raises(TypeError):
        pb_utils.InferenceResponse(error="boom")
    assert pb_utils.InferenceResponse().output_tensors() == []
    assert pb_utils.InferenceResponse(output_tensors=[]).output_tensors() == []
    assert pb_utils.InferenceResponse(INPUTS).output_tensors() == INPUTS


def test_tensor_and_dlpack_arguments() -> None:
    with pytest.raises(pb_utils.TritonModelException) as info:
        pb_utils.Tensor.from_dlpack("OUTPUT0", None)
    assert str(info.value) == (
        "Provided tensor is not supported. Tensor must be a DLPack capsule         or have `__dlpack__` and "
        "`__dlpack_device__` attributes"
    )
    with pytest.raises(pb_utils.TritonModelException, match=r"^Tensor name cannot be an empty string\.$"):
        pb_utils.Tensor.from_dlpack("", None)
    with pytest.raises(TypeError):
        pb_utils.Tensor("", None)


LOG_SIGNATURE = (
    "log(): incompatible function arguments. The following argument types are supported:\n"
    "    1. (message: str, level: c_python_backend_utils.Logger.LogLevel = <LogLevel.INFO: 0>) -> None\n\n"
)


def test_logger_arguments() -> None:
    logger = pb_utils.Logger
    for level in (None, 1):
        with pytest.raises(TypeError) as info:
            logger.log("Invalid Level", level)
        assert str(info.value) == LOG_SIGNATURE + f"Invoked with: 'Invalid Level', {level!r}"
    for method in ("log_info", "log_warn", "log_error", "log_verbose"):
        with pytest.raises(TypeError) as info:
            getattr(logger, method)(None)
        assert str(info.value) == (
            f"{method}(): incompatible function arguments. The following argument types are supported:\n"
            "    1. (message: str) -> None\n\nInvoked with: None"
        )
    logger.log("Level unspecified")
    logger.log("x", logger.LogLevel.VERBOSE)
    assert repr(logger.INFO) == "<LogLevel.INFO: 0>"


def test_triton_error_arguments() -> None:
    assert repr(pb_utils.TritonError.CANCELLED) == "<__ErrorCode.CANCELLED: 7>"
    assert pb_utils.TritonError("x").code() is pb_utils.TritonError.INTERNAL
    with pytest.raises(TypeError, match=r"^__init__\(\): incompatible constructor arguments"):
        pb_utils.TritonError(None)  # type: ignore[arg-type]


def test_model_control_and_readiness_outside_a_server() -> None:
    with pytest.raises(TypeError, match=r"^is_model_ready\(\): incompatible function arguments"):
        pb_utils.is_model_ready(None)  # type: ignore[arg-type]
    with pytest.raises(pb_utils.TritonModelException):
        pb_utils.get_model_dir()
    with pytest.raises(pb_utils.TritonModelException, match=r"^Failed to load model: "):
        pb_utils.load_model("x")
