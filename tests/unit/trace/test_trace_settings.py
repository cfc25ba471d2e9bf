"""Trace settings as the reference keeps them: global and per model, fallback, clearing, counts, and
the settings endpoints' parsing and answers."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from inferd.errors import InferdError, InternalError, InvalidArgumentError, UnsupportedError
from inferd.trace import NewSetting, Tracing, parse_trace_config
from inferd.trace.protocol import grpc_answer, grpc_update, http_answer, http_update


def tracing(tmp_path: Path, *flags: str) -> Tracing:
    return Tracing(parse_trace_config([f"triton,file={tmp_path / 't.json'}", *flags]))


def shown(t: Tracing, model: str = "") -> dict[str, object]:
    return dict(t.describe(model))


def test_model_settings_follow_the_global_fields_they_do_not_set(tmp_path: Path) -> None:
    t = tracing(tmp_path, "level=TIMESTAMPS", "rate=6")
    assert t.on
    t.update("m", NewSetting(log_frequency=2))
    assert shown(t, "m")["log_frequency"] == "2" and shown(t, "m")["trace_rate"] == "6"
    t.update("", NewSetting(rate=3))
    assert shown(t, "m")["trace_rate"] == "3" and shown(t, "m")["log_frequency"] == "2"
    assert shown(t)["log_frequency"] == "0"
    t.update("m", NewSetting(log_frequency=None))  # cleared: the model follows the global setting again
    assert "m" not in t.settings.models
    t.update("", NewSetting(level=0))
    assert not t.on
    t.update("m", NewSetting(level=4))
    assert t.on and shown(t, "m")["trace_level"] == ["TIMESTAMPS"] and shown(t)["trace_level"] == ["OFF"]
    t.close()


def test_sampling_counts_requests_and_the_count_runs_out(tmp_path: Path) -> None:
    t = tracing(tmp_path, "level=TIMESTAMPS", "rate=2", "count=2")
    sampled = [t.sample("m") is not None for _ in range(6)]
    assert sampled == [False, True, False, True, False, False]
    assert shown(t)["trace_count"] == "0"
    # an update that leaves the count unset takes the start-up one again
    t.update("", NewSetting(log_frequency=4))
    assert shown(t)["trace_count"] == "2"
    # a count set through the API that ran out makes the setting invalid: further updates are refused
    t.update("", NewSetting(count=1, rate=1))
    assert t.sample("m") is not None and t.sample("m") is None
    with pytest.raises(InvalidArgumentError, match=r"^Attempting to set invalid trace setting :$"):
        t.update("", NewSetting(log_frequency=0))
    t.update("", NewSetting(count=-1))
    assert t.sample("m") is not None
    t.close()


def test_invalid_settings_are_refused_with_the_reference_reason(tmp_path: Path) -> None:
    t = Tracing(parse_trace_config([]))
    with pytest.raises(InvalidArgumentError, match="trace file name is not given"):
        t.update("", NewSetting(level=4))
    t = tracing(tmp_path, "level=TIMESTAMPS")
    with pytest.raises(InvalidArgumentError, match="sample rate must be non-zero"):
        t.update("", NewSetting(rate=0))
    t.update("", NewSetting(level=0, rate=0))  # allowed while it traces nothing


def test_a_trace_file_that_cannot_be_written_is_refused(tmp_path: Path) -> None:
    t = Tracing(parse_trace_config([f"triton,file={tmp_path / 'no' / 't.json'}"]))
    with pytest.raises(
        InvalidArgumentError, match=r"can not be written: the directory '.*/no' does not exist"
    ):
        t.update("", NewSetting(level=4))
    assert not t.on and shown(t)["trace_level"] == ["OFF"]
    with pytest.raises(InvalidArgumentError, match="it is a directory"):
        Tracing.from_flags([f"triton,file={tmp_path}", "level=TIMESTAMPS"])


def test_opentelemetry_samples_a_propagated_context_even_at_rate_zero() -> None:
    pytest.importorskip("opentelemetry.sdk")
    t = Tracing(
        parse_trace_config(
            ["mode=opentelemetry", "level=TIMESTAMPS", "rate=0", "opentelemetry,url=127.0.0.1:9"]
        )
    )
    assert t.sample("m") is None
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    trace = t.sample("m", parent)
    assert trace is not None and trace.trace_id == 0x0AF7651916CD43DD8448EB211C80319C
    assert t.sample("m", "00-00000000000000000000000000000000-b7ad6b7169203331-01") is None
    assert "log_frequency" not in shown(t) and shown(t)["url"] == "127.0.0.1:9"
    t.close()


@pytest.mark.parametrize(
    ("doc", "error", "kind"),
    [
        (
            {"trace_file": None},
            "trace file location can not be updated through network protocol",
            UnsupportedError,
        ),
        ({"trace_level": "TIMESTAMPS"}, "attempt to access JSON non-array as array", InternalError),
        ({"trace_level": ["TIMESTAMPS", 1]}, "attempt to access JSON non-string as string", InternalError),
        (
            {"trace_level": ["TIMESTAMPS", "OFF"]},
            "Expect only one trace level 'OFF' is specified",
            InvalidArgumentError,
        ),
        ({"trace_rate": 5}, "attempt to access JSON non-string as string", InternalError),
        ({"trace_rate": "abc"}, "Unable to parse 'trace_rate', got: abc", InvalidArgumentError),
        (
            {"trace_rate": "10000000000"},
            "Unable to parse 'trace_rate', value is out of range [ 0, 4294967295 ], got: 10000000000",
            InvalidArgumentError,
        ),
        (
            {"trace_count": "-2"},
            "Unable to parse 'trace_count'. Expecting value >= -1, got:-2",
            InvalidArgumentError,
        ),
        (
            {"trace_count": "10000000000"},
            "Unable to parse 'trace_count', value is out of range [ -1, 2147483647 ], got: 10000000000",
            InvalidArgumentError,
        ),
        ({"log_frequency": "x"}, "Unable to parse 'log_frequency', got: x", InvalidArgumentError),
    ],
)
def test_http_update_refusals(doc: dict[str, object], error: str, kind: type[InferdError]) -> None:
    with pytest.raises(kind) as e:
        http_update(doc)
    assert e.value.message == error


def test_http_update_reads_as_the_reference() -> None:
    new = http_update(
        {"trace_level": ["TENSORS", "BOGUS", "TIMESTAMPS"], "trace_rate": "12abc", "log_frequency": "-3"}
    )
    assert (new.level, new.rate, new.log_frequency) == (12, 12, 2**32 - 3)
    assert http_update({"trace_count": None}).count is None
    assert http_update([1]) == NewSetting() and http_update({"bogus": "1"}) == NewSetting()


def test_grpc_update_reads_as_the_reference() -> None:
    assert grpc_update({"trace_rate": [], "trace_level": []}) == NewSetting(level=None, rate=None)
    with pytest.raises(InvalidArgumentError, match=r"^expect only 1 value for 'trace_count'$"):
        grpc_update({"trace_count": ["1", "2"]})
    with pytest.raises(InvalidArgumentError, match=r"Expecting value >= -1, got: -5$"):
        grpc_update({"trace_count": ["-5"]})
    with pytest.raises(UnsupportedError):
        grpc_update({"trace_file": []})


def test_answers_keep_repeated_keys() -> None:
    items: list[tuple[str, str | list[str]]] = [
        ("trace_level", ["OFF"]),
        ("resource", "a=b"),
        ("resource", "c=d"),
    ]
    assert http_answer(items) == b'{"trace_level":["OFF"],"resource":"a=b","resource":"c=d"}'
    assert grpc_answer(items) == {"trace_level": ["OFF"], "resource": ["a=b", "c=d"]}
    assert orjson.loads(http_answer(items[:1])) == {"trace_level": ["OFF"]}
