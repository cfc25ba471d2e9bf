"""The request bodies of two extensions' POSTs, read and checked with the reference's texts:
a system shared-memory region's register body and the logging settings."""

from __future__ import annotations

from typing import Any

from inferd.errors import InternalError, InvalidArgumentError, UnavailableError, UnsupportedError
from inferd.logs import FORMATS as LOG_FORMATS
from inferd.logs import LogSettings


def system_region(doc: Any) -> tuple[str, int, int]:
    """A system region's (key, offset, byte_size) from its register body, checked as the reference does."""
    if not isinstance(doc, dict):
        raise InternalError("attempt to access JSON non-object as object")
    if "byte_size" not in doc:  # the reference asks for byte_size first
        raise InvalidArgumentError("Shared memory register request has no 'byte_size' field")
    if "key" not in doc:
        raise InvalidArgumentError("Shared memory register request has no 'key' field")
    key, offset, size = doc["key"], doc.get("offset", 0), doc["byte_size"]
    if not isinstance(key, str):
        raise InternalError("attempt to access JSON non-string as string")
    for v in (offset, size):
        if type(v) is not int or v < 0:
            raise InternalError("attempt to access JSON non-unsigned-integer as unsigned-integer")
    return key, offset, size


def apply_log_settings(logs: LogSettings, doc: dict[str, Any]) -> None:
    """A logging POST body onto ``logs`` (``null`` leaves a setting as it is), with TritonJson's texts."""
    if doc.get("log_file") is not None:
        raise UnsupportedError("log file location can not be updated through network protocol")
    for key in ("log_info", "log_warning", "log_error"):
        value = doc.get(key)
        if value is not None:
            if type(value) is not bool:
                raise InternalError("attempt to access JSON non-boolean as boolean")
            logs.set_severities(**{key.removeprefix("log_"): value})
    level = doc.get("log_verbose_level")
    if level is not None:
        if type(level) is not int or level < 0:
            raise InternalError("attempt to access JSON non-unsigned-integer as unsigned-integer")
        logs.set_verbose(level)
    fmt = doc.get("log_format")
    if fmt is not None:
        if not isinstance(fmt, str):
            raise InternalError("attempt to access JSON non-string as string")
        if fmt not in LOG_FORMATS:
            raise UnavailableError(f"invalid argument for --log_format, got: {fmt}")
        logs.set_format(fmt)
