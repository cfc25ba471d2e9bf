"""``--trace-config``: tritonserver's syntax and checks, its texts included.

``--trace-config [<mode>,]<setting>=<value>``: without a mode, the global settings ``level`` (repeatable,
OR-ed; OFF anywhere turns tracing off), ``rate``, ``count`` and ``mode``; with ``triton``, ``file`` and
``log-frequency``; with ``opentelemetry``, ``url``, ``resource`` (repeatable, ``key=value``) and the batch
span processor's ``bsp_max_queue_size``, ``bsp_schedule_delay`` and ``bsp_max_export_batch_size``
(defaults from ``OTEL_BSP_*``). Unknown settings are kept and shown by the settings endpoints, as the
reference does; they change nothing.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from inferd.errors import InvalidArgumentError

#: TRITONSERVER_InferenceTraceLevel bits
LEVEL_OFF = 0
TIMESTAMPS = 0x4
TENSORS = 0x8
MODE_TRITON = "triton"
MODE_OPENTELEMETRY = "opentelemetry"
#: the reference's map keys for mode-specific settings (TRACE_MODE_TRITON, TRACE_MODE_OPENTELEMETRY)
MODE_KEYS = {MODE_TRITON: "0", MODE_OPENTELEMETRY: "1"}
INT32_MAX = 2**31 - 1
UINT32_MAX = 2**32 - 1
#: the batch span processor's settings with their environment variables and defaults (the order
#: the reference lists the ones left out)
BSP_DEFAULTS = (
    ("bsp_max_export_batch_size", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "512"),
    ("bsp_schedule_delay", "OTEL_BSP_SCHEDULE_DELAY", "5000"),
    ("bsp_max_queue_size", "OTEL_BSP_MAX_QUEUE_SIZE", "2048"),
)
DEFAULT_OTLP_URL = "http://localhost:4318/v1/traces"
_LEADING_INT = re.compile(r"[ \t\n\v\f\r]*([+-]?[0-9]+)")


class StoiError(ValueError):
    """What ``std::stoi`` throws: ``invalid_argument`` (``out_of_range`` False) or ``out_of_range``."""

    def __init__(self, out_of_range: bool) -> None:
        super().__init__("out_of_range" if out_of_range else "invalid_argument")
        self.out_of_range = out_of_range


def stoi(text: str) -> int:
    """``std::stoi``: leading blanks, a sign and digits, the rest ignored; an int32 or StoiError."""
    m = _LEADING_INT.match(text)
    if m is None:
        raise StoiError(False)
    n = int(m.group(1))
    if not -(2**31) <= n <= INT32_MAX:
        raise StoiError(True)
    return n


def to_uint32(n: int) -> int:
    """An int assigned to a ``uint32_t`` (negative values wrap, as in the reference)."""
    return n & UINT32_MAX


def parse_level(text: str) -> int:
    """One ``level`` value (tritonserver's spellings), or InvalidArgumentError with its text."""
    v = text.lower()
    if v in ("false", "off"):
        return LEVEL_OFF
    if v in ("true", "on", "min", "max", "timestamps"):
        return TIMESTAMPS
    if v == "tensors":
        return TENSORS
    raise InvalidArgumentError(f"invalid value for trace level option: {v}")


def parse_mode(text: str) -> str:
    v = text.lower()
    if v in (MODE_TRITON, MODE_OPENTELEMETRY):
        return v
    raise InvalidArgumentError(
        f'invalid value for trace mode option: {v}. Available options are "triton" and "opentelemetry"'
    )


def option_int(text: str) -> int:
    """``ParseOption<int>``: the reference's texts for a value it cannot read."""
    try:
        return stoi(text)
    except StoiError as e:
        if e.out_of_range:
            raise InvalidArgumentError(f"Provided option value is out of bound. Got {text}") from None
        raise InvalidArgumentError(f"Invalid option value. Got {text}") from None


def _bad(option: str, e: InvalidArgumentError) -> InvalidArgumentError:
    return InvalidArgumentError(f'Bad option: "--trace-config{option}".\n{e.message}')


@dataclass(slots=True)
class TraceConfig:
    """What the ``--trace-config`` flags say: the global settings and each mode's own."""

    level: int = LEVEL_OFF
    rate: int = 1000
    count: int = -1
    log_frequency: int = 0
    file: str = ""
    mode: str = MODE_TRITON
    #: each mode's settings as given, in order (repeated keys kept), values as the reference shows them
    mode_settings: dict[str, list[tuple[str, str]]] = field(default_factory=dict)

    @property
    def shown(self) -> list[tuple[str, str]]:
        """The current mode's settings the settings endpoints list after the standard ones."""
        return [
            (k, v) for k, v in self.mode_settings.get(self.mode, []) if k not in ("file", "log-frequency")
        ]

    def otel_setting(self, key: str) -> list[str]:
        return [v for k, v in self.mode_settings.get(MODE_OPENTELEMETRY, []) if k == key]


def split_setting(arg: str) -> tuple[str, str, str]:
    """``[<mode>,]<setting>=<value>`` -> (mode or "", setting, value), with the reference's texts."""
    comma = arg.find(",")
    mode = ""
    if comma > 0:
        try:
            mode = parse_mode(arg[:comma])
        except InvalidArgumentError as e:
            raise _bad("", e) from None
    elif comma == 0:
        raise _bad(
            "",
            InvalidArgumentError(
                "No trace mode specified. --trace-config option format is <trace mode>,<setting>=<value> "
                f"or <setting>=<value>. Got {arg}"
            ),
        )
    eq = arg.find("=", comma + 1)
    setting = arg[comma + 1 : eq] if eq >= 0 else ""
    value = arg[eq + 1 :] if eq >= 0 else ""
    if eq < 0 or not setting or not value:
        raise _bad(
            "",
            InvalidArgumentError(
                f"--trace-config option format is '<trace mode>,<setting>=<value>'. Got {arg}"
            ),
        )
    return mode, setting, value


def parse_trace_config(args: Sequence[str], environ: dict[str, str] | None = None) -> TraceConfig:
    """The settings of every ``--trace-config`` flag (InvalidArgumentError: the reference's text)."""
    env = os.environ if environ is None else environ
    cfg = TraceConfig()
    by_mode: dict[str, list[tuple[str, str]]] = {}
    for arg in args:
        mode, setting, value = split_setting(arg)
        by_mode.setdefault(mode, []).append((setting, value))
    disable = False
    for setting, value in by_mode.get("", []):
        try:
            if setting == "rate":
                cfg.rate = to_uint32(option_int(value))
            elif setting == "level":
                level = parse_level(value)
                disable |= level == LEVEL_OFF
                cfg.level |= level
            elif setting == "mode":
                cfg.mode = parse_mode(value)
            elif setting == "count":
                cfg.count = option_int(value)
        except InvalidArgumentError as e:
            raise _bad(f" {setting}", e) from None
    if cfg.mode == MODE_TRITON:
        for setting, value in by_mode.get(MODE_TRITON, []):
            if setting == "file":
                cfg.file = value
            elif setting == "log-frequency":
                try:
                    cfg.log_frequency = to_uint32(option_int(value))
                except InvalidArgumentError as e:
                    raise _bad(f" triton,{setting}", e) from None
    otel = by_mode.get(MODE_OPENTELEMETRY, [])
    if cfg.mode == MODE_OPENTELEMETRY:
        given = {k for k, _ in otel}
        for setting, value in otel:
            if setting.startswith("bsp_") and setting in {k for k, _, _ in BSP_DEFAULTS}:
                try:
                    option_int(value)
                except InvalidArgumentError as e:
                    raise _bad(f" opentelemetry,{setting}", e) from None
        otel = [(k, str(to_uint32(stoi(v))) if k in {b for b, _, _ in BSP_DEFAULTS} else v) for k, v in otel]
        for key, var, default in BSP_DEFAULTS:
            if key not in given:
                value = env.get(var, default)
                try:
                    otel.append((key, str(to_uint32(option_int(value)))))
                except InvalidArgumentError as e:
                    raise InvalidArgumentError(f'Bad option: "OTEL_{key.upper()}".\n{e.message}') from None
    cfg.mode_settings = {MODE_TRITON: by_mode.get(MODE_TRITON, []), MODE_OPENTELEMETRY: otel}
    if disable:
        cfg.level = LEVEL_OFF
    return cfg
