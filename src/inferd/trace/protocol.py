"""The trace settings endpoints' requests and answers, as the reference reads and writes them
(``src/http_server.cc`` HandleTrace, ``src/grpc/grpc_server.cc`` TraceSetting), texts included.

HTTP takes a JSON object of strings (``trace_level`` an array; ``null`` clears a model's field so it
follows the global setting again); gRPC takes ``map<string, SettingValue{repeated string}>`` (an empty
list clears). Unknown settings, unknown level names and a body that is not an object are ignored, as
in the reference. The answer lists every setting as strings.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from inferd.errors import InternalError, InvalidArgumentError, UnsupportedError
from inferd.trace.config import INT32_MAX, LEVEL_OFF, TENSORS, TIMESTAMPS, StoiError, stoi, to_uint32
from inferd.trace.settings import UNSET, NewSetting

FILE_READ_ONLY = "trace file location can not be updated through network protocol"
_NON_STRING = "attempt to access JSON non-string as string"
_UINT32_RANGE = "[ 0, 4294967295 ]"
_COUNT_RANGE = f"[ -1, {INT32_MAX} ]"


def unknown_model(name: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"Request for unknown model : {name}")


def _levels(values: Sequence[Any], check: Any = None) -> int | object:
    """A level list: OR of TIMESTAMPS/TENSORS, OFF alone; unknown names ignored (UNSET if none)."""
    level: int | object = UNSET
    bits = LEVEL_OFF
    for v in values:
        if check is not None:
            check(v)
        if v == "OFF":
            if len(values) != 1:
                raise InvalidArgumentError("Expect only one trace level 'OFF' is specified")
            level = LEVEL_OFF
        elif v == "TIMESTAMPS":
            bits |= TIMESTAMPS
            level = bits
        elif v == "TENSORS":
            bits |= TENSORS
            level = bits
    return level


def _number(name: str, text: str, count: bool, grpc: bool) -> int:
    try:
        n = stoi(text)
    except StoiError as e:
        if e.out_of_range:
            span = _COUNT_RANGE if count else _UINT32_RANGE
            raise InvalidArgumentError(
                f"Unable to parse '{name}', value is out of range {span}, got: {text}"
            ) from None
        raise InvalidArgumentError(f"Unable to parse '{name}', got: {text}") from None
    if count:
        if n < -1:
            sep = " " if grpc else ""
            raise InvalidArgumentError(f"Unable to parse '{name}'. Expecting value >= -1, got:{sep}{text}")
        return n
    return to_uint32(n)


def _string(v: Any) -> None:
    if not isinstance(v, str):
        raise InternalError(_NON_STRING)


def http_update(doc: Any) -> NewSetting:
    """A POST body (parsed JSON) as an update; InferdError with the reference's code and text."""
    new = NewSetting()
    if not isinstance(doc, dict):
        return new
    if "trace_file" in doc:
        raise UnsupportedError(FILE_READ_ONLY)
    if "trace_level" in doc:
        value = doc["trace_level"]
        if value is None:
            new.level = None
        elif not isinstance(value, list):
            raise InternalError("attempt to access JSON non-array as array")
        else:
            new.level = _levels(value, _string)
    for key, count in (("trace_rate", False), ("trace_count", True), ("log_frequency", False)):
        if key not in doc:
            continue
        value = doc[key]
        if value is None:
            setattr(new, key.removeprefix("trace_"), None)
            continue
        _string(value)
        setattr(new, key.removeprefix("trace_"), _number(key, value, count, grpc=False))
    return new


def grpc_update(settings: Mapping[str, Sequence[str]]) -> NewSetting:
    """A TraceSettingRequest's settings as an update (an empty list clears)."""
    new = NewSetting()
    if "trace_file" in settings:
        raise UnsupportedError(FILE_READ_ONLY)
    if "trace_level" in settings:
        values = list(settings["trace_level"])
        new.level = None if not values else _levels(values)
    for key, count in (("trace_rate", False), ("trace_count", True), ("log_frequency", False)):
        if key not in settings:
            continue
        values = list(settings[key])
        field = key.removeprefix("trace_")
        if not values:
            setattr(new, field, None)
        elif len(values) == 1:
            setattr(new, field, _number(key, values[0], count, grpc=True))
        else:
            raise InvalidArgumentError(f"expect only 1 value for '{key}'")
    return new


def http_answer(items: Sequence[tuple[str, str | list[str]]]) -> bytes:
    """The settings as the reference's JSON object (a key listed twice appears twice)."""
    return b"{" + b",".join(orjson.dumps(k) + b":" + orjson.dumps(v) for k, v in items) + b"}"


def grpc_answer(items: Sequence[tuple[str, str | list[str]]]) -> dict[str, list[str]]:
    """The settings as TraceSettingResponse's map (a key listed twice gets both values)."""
    out: dict[str, list[str]] = {}
    for k, v in items:
        out.setdefault(k, []).extend(v if isinstance(v, list) else [v])
    return out
