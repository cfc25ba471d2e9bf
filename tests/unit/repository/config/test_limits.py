"""What a config may ask for beyond Triton's own checks (repository/config/limits.py): file names
that stay in their folder, counts that cannot exhaust the server; each refusal names the field."""

from __future__ import annotations

import re
from typing import Any

import pytest
from google.protobuf import json_format

from inferd.errors import InvalidArgumentError
from inferd.repository.config.limits import MAX_INSTANCES, MAX_TENSORS, check_limits, file_name_problem
from inferd.repository.config.schema import ModelConfig
from inferd.repository.config.validate import config_checks


def _config(**fields: Any) -> ModelConfig:
    doc = {"name": "m", "backend": "python", **fields}
    return json_format.ParseDict(doc, ModelConfig())


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("/tmp/evil.py", "absolute path"),
        ("../../../evil/evil.py", "'..' component"),
        ("sub/../../model.py", "'..' component"),
        ("a\\..\\b.py", "backslash"),
        ("m\0.py", "NUL"),
    ],
)
def test_a_file_name_that_leads_outside_its_folder(value: str, why: str) -> None:
    problem = file_name_problem(value)
    assert problem is not None and why in problem


@pytest.mark.parametrize("value", ["", "model.py", "sub/model.py", "model.savedmodel", "./model.onnx"])
def test_a_file_name_inside_its_folder(value: str) -> None:
    assert file_name_problem(value) is None


@pytest.mark.parametrize(
    ("fields", "text"),
    [
        (
            {"default_model_filename": "/tmp/evil.py"},
            "default_model_filename '/tmp/evil.py' must name a file inside the version folder",
        ),
        ({"default_model_filename": "../x.py"}, "default_model_filename '../x.py' must name a file inside"),
        ({"cc_model_filenames": {"7.5": "../x.plan"}}, r"cc_model_filenames\['7.5'\] '../x.plan'"),
        (
            {
                "output": [
                    {"name": "O", "data_type": "TYPE_FP32", "dims": [1], "label_filename": "/etc/passwd"}
                ]
            },
            "label_filename of output 'O' '/etc/passwd' must name a file inside the model folder",
        ),
        (
            {
                "model_warmup": [
                    {
                        "name": "w",
                        "batch_size": 1,
                        "inputs": {
                            "I": {"data_type": "TYPE_FP32", "dims": [1], "input_data_file": "../../secret"}
                        },
                    }
                ]
            },
            "input_data_file of warmup 'w' input 'I' '../../secret' must name a file inside the model's warmup folder",
        ),
        (
            {"instance_group": [{"count": 1000, "kind": "KIND_CPU"}, {"count": 25, "kind": "KIND_CPU"}]},
            f"asks for 1025 instances; at most {MAX_INSTANCES}",
        ),
        ({"instance_group": [{"count": 100000, "kind": "KIND_CPU"}]}, "asks for 100000 instances"),
        (
            {
                "input": [
                    {"name": f"I{i}", "data_type": "TYPE_FP32", "dims": [1]} for i in range(MAX_TENSORS + 1)
                ]
            },
            f"declares {MAX_TENSORS + 1} inputs; at most {MAX_TENSORS}",
        ),
    ],
)
def test_a_config_that_asks_too_much_is_refused_naming_the_field(fields: dict[str, Any], text: str) -> None:
    cfg = _config(**fields)
    with pytest.raises(InvalidArgumentError, match=text):
        check_limits(cfg)
    failed = []
    for path, check in config_checks(cfg):  # inferd check: the same refusal, at its field
        try:
            check()
        except InvalidArgumentError as e:
            failed.append((path, e.message))
    assert any(re.search(text, m) for _, m in failed)


def test_a_config_within_the_limits_passes() -> None:
    check_limits(
        _config(
            default_model_filename="model.py",
            instance_group=[{"count": MAX_INSTANCES, "kind": "KIND_CPU"}],
            input=[{"name": f"I{i}", "data_type": "TYPE_FP32", "dims": [1]} for i in range(100)],
        )
    )


def test_a_duplicate_among_thousands_of_inputs_is_found_at_its_place() -> None:
    """The duplicate check looks each name up once (it looked back at every earlier input: a 10,000
    input override took 20 s of the server's load lock; RELIABILITY.md has the figures)."""
    inputs = [{"name": f"I{i}", "data_type": "TYPE_FP32", "dims": [1]} for i in range(MAX_TENSORS)]
    inputs[-1]["name"] = "I0"
    cfg = _config(
        input=inputs, output=[{"name": "O", "data_type": "TYPE_FP32", "dims": [1]}], max_batch_size=0
    )
    errors = []
    for path, check in config_checks(cfg):
        try:
            check()
        except InvalidArgumentError as e:
            if path[0] == "input":
                errors.append((path, e.message))
    assert errors == [(("input", MAX_TENSORS - 1), "model input 'I0' is specified more than once for m")]
