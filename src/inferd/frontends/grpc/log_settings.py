"""The logging extension on gRPC: the LogSettings RPC (as ``trace.py`` holds TraceSetting's)."""

from __future__ import annotations

from typing import Any

from inferd.errors import InvalidArgumentError, UnavailableError, UnsupportedError
from inferd.frontends.grpc._pb import pb
from inferd.logs import FORMATS as LOG_FORMATS
from inferd.logs import LogSettings


def log_settings(logs: LogSettings | None, request: pb.LogSettingsRequest) -> pb.LogSettingsResponse:
    """LogSettings: each setting applied in the reference's order, with its checks; the settings."""
    if logs is None:
        raise UnavailableError("the server does not support dynamic logging")
    settings = request.settings
    if "log_file" in settings:
        raise UnsupportedError("log file location can not be updated through network protocol")
    try:
        _apply_log_settings(logs, settings)
    finally:  # what was applied, up to an error, in every --workers process
        logs.changed()
    resp = pb.LogSettingsResponse()
    for key, current in logs.settings().items():
        field = (
            "bool_param"
            if isinstance(current, bool)
            else "uint32_param"
            if isinstance(current, int)
            else "string_param"
        )
        setattr(resp.settings[key], field, current)
    return resp


def _apply_log_settings(logs: LogSettings, settings: Any) -> None:
    """A LogSettings request's settings onto ``logs``, in the reference's order and with its checks."""
    for key in ("log_info", "log_warning", "log_error"):
        if key in settings:
            value = settings[key]
            if value.WhichOneof("parameter_choice") != "bool_param":
                raise InvalidArgumentError(f"expect boolean for '{key}'")
            logs.set_severities(**{key.removeprefix("log_"): value.bool_param})
    if "log_verbose_level" in settings:
        value = settings["log_verbose_level"]
        if value.WhichOneof("parameter_choice") != "uint32_param":
            raise InvalidArgumentError("expect int32 for 'log_verbose_level'")
        logs.set_verbose(value.uint32_param)
    if "log_format" in settings:
        value = settings["log_format"]
        if value.WhichOneof("parameter_choice") != "string_param":
            raise InvalidArgumentError("expect string for 'log_format'")
        if value.string_param not in LOG_FORMATS:
            raise InvalidArgumentError(f"invalid argument for log_format, got: {value.string_param}")
        logs.set_format(value.string_param)
