"""The request bodies of two extensions' POSTs, read and checked with the reference's texts:
a system or CUDA shared-memory region's register body and the logging settings."""

from __future__ import annotations

import base64
import binascii
from typing import Any

from inferd.errors import InternalError, InvalidArgumentError, UnavailableError, UnsupportedError
from inferd.gpu.cuda import IPC_HANDLE_SIZE
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


def cuda_region(doc: Any) -> tuple[bytes, int, int]:
    """A CUDA region's (raw handle, device id, byte size) from its register body, checked as the
    reference does."""
    if not isinstance(doc, dict):
        raise InternalError("attempt to access JSON non-object as object")
    handle = doc.get("raw_handle")
    b64 = handle.get("b64") if isinstance(handle, dict) else None
    if not isinstance(b64, str):
        raise InvalidArgumentError("Shared memory register request has no 'raw_handle' field")
    try:
        raw = base64.b64decode(b64, validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    device, size = doc.get("device_id", 0), doc.get("byte_size", 0)
    for v in (device, size):
        if type(v) is not int or v < 0:
            raise InternalError("attempt to access JSON non-unsigned-integer as unsigned-integer")
    if len(raw) != IPC_HANDLE_SIZE:  # the reference's HTTP front end checks it; its gRPC one does not
        raise InvalidArgumentError("'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t")
    return raw, device, size


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
