"""``--trace-config``: tritonserver's syntax, defaults and refusals (the texts the reference prints)."""

from __future__ import annotations

import json

import pytest

from inferd.errors import InvalidArgumentError
from inferd.trace.config import (
    LEVEL_OFF,
    TENSORS,
    TIMESTAMPS,
    StoiError,
    parse_trace_config,
    stoi,
)
from repo_paths import FIXTURES

REFUSED = json.loads((FIXTURES / "reference_observed_trace.json").read_text())["refused_flags"]


def test_defaults() -> None:
    c = parse_trace_config([])
    assert (c.level, c.rate, c.count, c.log_frequency, c.file, c.mode) == (
        LEVEL_OFF,
        1000,
        -1,
        0,
        "",
        "triton",
    )
    assert c.shown == []


def test_levels_add_up_and_off_anywhere_turns_tracing_off() -> None:
    assert parse_trace_config(["level=TIMESTAMPS", "level=tensors"]).level == TIMESTAMPS | TENSORS
    assert parse_trace_config(["level=max"]).level == TIMESTAMPS
    assert parse_trace_config(["level=TIMESTAMPS", "level=OFF", "level=TENSORS"]).level == LEVEL_OFF


def test_triton_settings_and_the_ones_listed() -> None:
    c = parse_trace_config(
        ["triton,file=/tmp/t.json", "triton,log-frequency=50", "rate=100", "count=7", "triton,x=y"]
    )
    assert (c.file, c.log_frequency, c.rate, c.count) == ("/tmp/t.json", 50, 100, 7)
    assert c.shown == [("x", "y")]  # unknown settings are listed, file and log-frequency are not
    assert parse_trace_config(["rate=-1"]).rate == 2**32 - 1  # as the reference's uint32


def test_opentelemetry_settings_with_the_batch_processor_defaults() -> None:
    c = parse_trace_config(
        [
            "mode=opentelemetry",
            "opentelemetry,url=h:1/v1/traces",
            "opentelemetry,resource=a=b",
            "opentelemetry,resource=c=d",
        ],
        environ={"OTEL_BSP_MAX_QUEUE_SIZE": "99"},
    )
    assert c.mode == "opentelemetry"
    assert c.shown == [
        ("url", "h:1/v1/traces"),
        ("resource", "a=b"),
        ("resource", "c=d"),
        ("bsp_max_export_batch_size", "512"),
        ("bsp_schedule_delay", "5000"),
        ("bsp_max_queue_size", "99"),
    ]
    assert c.otel_setting("resource") == ["a=b", "c=d"]
    # in Triton mode the opentelemetry settings are neither read nor listed
    assert parse_trace_config(["opentelemetry,bsp_max_queue_size=x"]).shown == []


@pytest.mark.parametrize("flag", sorted(REFUSED))
def test_refused_flags_say_what_the_reference_says(flag: str) -> None:
    with pytest.raises(InvalidArgumentError) as e:
        parse_trace_config([flag])
    assert e.value.message == REFUSED[flag]


@pytest.mark.parametrize(
    ("text", "value"), [("12", 12), ("  -3x", -3), ("+7", 7), ("2147483647", 2**31 - 1), ("0012abc", 12)]
)
def test_stoi_reads_a_leading_integer(text: str, value: int) -> None:
    assert stoi(text) == value


@pytest.mark.parametrize(
    ("text", "out_of_range"), [("abc", False), ("", False), ("2147483648", True), ("-9999999999", True)]
)
def test_stoi_refuses_as_std_stoi(text: str, out_of_range: bool) -> None:
    with pytest.raises(StoiError) as e:
        stoi(text)
    assert e.value.out_of_range is out_of_range
