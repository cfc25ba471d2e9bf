"""``RequestTemplate``: what the HTTP header cache and the gRPC request cache keep of a request."""

from __future__ import annotations

from inferd.core.request import InferRequest, RequestedOutput, RequestTemplate
from inferd.core.tensor import Tensor
from inferd.core.types import BY_WIRE

FP32 = BY_WIRE["FP32"]


def tensor(name: str, fill: int) -> Tensor:
    return Tensor(name, FP32, (1, 4), raw=memoryview(bytes([fill]) * 16))


def decoded() -> InferRequest:
    outputs = [RequestedOutput("OUTPUT0", classification=2)]
    return InferRequest(
        "add_sub",
        {"INPUT0": tensor("INPUT0", 1)},
        "1",
        "first",
        {"custom": "x"},
        outputs,
        7,
        1,
        3,
        500,
        frozenset({"OUTPUT0"}),
        None,
    )


def test_a_request_from_the_template_is_the_decoded_one_with_new_tensors_and_id() -> None:
    first = decoded()
    tpl = RequestTemplate.of(first, b"key")
    inputs = {"INPUT0": tensor("INPUT0", 2)}
    got = tpl.request(inputs, "second", None)
    assert got.inputs is inputs and got.id == "second"
    assert (got.model_name, got.model_version, got.parameters, got.outputs) == (
        "add_sub",
        "1",
        {"custom": "x"},
        first.outputs,
    )
    assert (got.correlation_id, got.flags, got.priority, got.timeout_us) == (7, 1, 3, 500)
    assert got.output_names == frozenset({"OUTPUT0"})
    assert got.validation_key == b"key"  # the cache's key, not the decoded request's None


def test_a_sequence_id_from_the_message_replaces_the_templates() -> None:
    tpl = RequestTemplate.of(decoded(), b"key")
    assert tpl.request({}, "", 42).correlation_id == 42
    assert tpl.request({}, "", "corr").correlation_id == "corr"
    assert tpl.request({}, "", 0).correlation_id == 0  # 0 is a value, not "none given"
    assert tpl.request({}, "", None).correlation_id == 7


def test_parameters_are_each_requests_own() -> None:
    first = decoded()
    tpl = RequestTemplate.of(first, b"key")
    first.parameters["custom"] = "changed by the model"  # the decoded request went on to the model
    a = tpl.request({}, "a", None)
    a.parameters["added"] = 1
    b = tpl.request({}, "b", None)
    assert b.parameters == {"custom": "x"}
    assert a.parameters is not b.parameters


def test_no_parameters_give_a_fresh_empty_dict() -> None:
    req = decoded()
    req.parameters = {}
    tpl = RequestTemplate.of(req, b"key")
    a, b = tpl.request({}, "a", None), tpl.request({}, "b", None)
    a.parameters["x"] = 1
    assert b.parameters == {}
