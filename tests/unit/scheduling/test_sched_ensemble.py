"""Ensemble planning: steps grouped into waves of what their inputs allow."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferd.errors import InvalidArgumentError
from inferd.repository import ModelConfig, parse_config_text
from inferd.scheduling.ensemble import Step, plan_steps


def _ensemble(steps: str, inputs: tuple[str, ...] = ("IN",)) -> ModelConfig:
    ins = ", ".join(f'{{ name: "{n}" data_type: TYPE_FP32 dims: [ 1 ] }}' for n in inputs)
    text = f"""
    name: "e"
    platform: "ensemble"
    max_batch_size: 0
    input [ {ins} ]
    output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] }} ]
    ensemble_scheduling {{ step [ {steps} ] }}
    """
    return parse_config_text(text, "config.pbtxt")


def _step(model: str, inputs: dict[str, str], outputs: dict[str, str], version: int = -1) -> str:
    ins = " ".join(f'input_map {{ key: "{k}" value: "{v}" }}' for k, v in inputs.items())
    outs = " ".join(f'output_map {{ key: "{k}" value: "{v}" }}' for k, v in outputs.items())
    return f'{{ model_name: "{model}" model_version: {version} {ins} {outs} }}'


def test_reference_ensemble_has_two_waves(reference_models: Path) -> None:
    cfg = parse_config_text(
        (reference_models / "ensemble_add_sub" / "config.pbtxt").read_text(), "config.pbtxt"
    )
    waves = plan_steps(cfg)
    assert waves == [
        [
            Step(
                "add_sub",
                "",
                (("INPUT0", "INPUT0"), ("INPUT1", "INPUT1")),
                (("OUTPUT0", "sum"), ("OUTPUT1", "OUTPUT1")),
            )
        ],
        [Step("mul_fp32", "", (("INPUT0", "sum"), ("INPUT1", "OUTPUT1")), (("OUTPUT0", "OUTPUT0"),))],
    ]


def test_independent_steps_share_a_wave() -> None:
    steps = ", ".join(
        [
            _step("join", {"A": "x", "B": "y"}, {"Z": "OUT"}),
            _step("left", {"I": "IN"}, {"O": "x"}),
            _step("right", {"I": "IN"}, {"O": "y"}, version=3),
        ]
    )
    waves = plan_steps(_ensemble(steps))
    assert [[s.model_name for s in wave] for wave in waves] == [["left", "right"], ["join"]]
    assert waves[0][1].model_version == "3"
    assert waves[0][0].model_version == ""


def test_a_chain_is_one_step_per_wave() -> None:
    steps = ", ".join(
        [
            _step("c", {"I": "t2"}, {"O": "OUT"}),
            _step("b", {"I": "t1"}, {"O": "t2"}),
            _step("a", {"I": "IN"}, {"O": "t1"}),
        ]
    )
    assert [[s.model_name for s in w] for w in plan_steps(_ensemble(steps))] == [["a"], ["b"], ["c"]]


def test_a_step_may_read_ensemble_inputs_and_earlier_outputs() -> None:
    steps = ", ".join([_step("a", {"I": "IN"}, {"O": "t"}), _step("b", {"I": "t", "J": "IN2"}, {"O": "OUT"})])
    waves = plan_steps(_ensemble(steps, inputs=("IN", "IN2")))
    assert [[s.model_name for s in w] for w in waves] == [["a"], ["b"]]


def test_unresolved_tensor() -> None:
    steps = ", ".join([_step("a", {"I": "IN"}, {"O": "t"}), _step("b", {"I": "nowhere"}, {"O": "OUT"})])
    with pytest.raises(InvalidArgumentError) as info:
        plan_steps(_ensemble(steps))
    assert info.value.message == (
        "ensemble 'e' has circular or unresolved dependencies: no step produces 'nowhere'"
    )


def test_circular_steps() -> None:
    steps = ", ".join([_step("a", {"I": "t2"}, {"O": "t1"}), _step("b", {"I": "t1"}, {"O": "t2"})])
    with pytest.raises(
        InvalidArgumentError, match="circular or unresolved dependencies: no step produces 't1', 't2'"
    ):
        plan_steps(_ensemble(steps))


def test_no_steps() -> None:
    assert plan_steps(_ensemble("")) == []
