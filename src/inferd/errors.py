"""One error hierarchy and the one status table.

InferdError
 ├── UnknownError          UNKNOWN         HTTP 400  gRPC UNKNOWN
 ├── InternalError         INTERNAL        HTTP 500  gRPC INTERNAL
 ├── NotFoundError         NOT_FOUND       HTTP 404  gRPC NOT_FOUND
 ├── InvalidArgumentError  INVALID_ARG     HTTP 400  gRPC INVALID_ARGUMENT
 ├── UnavailableError      UNAVAILABLE     HTTP 503  gRPC UNAVAILABLE
 ├── UnsupportedError      UNSUPPORTED     HTTP 501  gRPC UNIMPLEMENTED
 ├── AlreadyExistsError    ALREADY_EXISTS  HTTP 400  gRPC ALREADY_EXISTS
 └── RequestCancelledError CANCELLED       HTTP 400  gRPC CANCELLED

The codes and their statuses are Triton's (``HttpCodeFromError`` / ``CodeToStatus``).
This module imports nothing from the rest of the package.
"""

from __future__ import annotations

import enum


class ErrorCode(enum.Enum):
    """A Triton error code with its HTTP status and gRPC status name."""

    UNKNOWN = (400, "UNKNOWN")
    INTERNAL = (500, "INTERNAL")
    NOT_FOUND = (404, "NOT_FOUND")
    INVALID_ARG = (400, "INVALID_ARGUMENT")
    UNAVAILABLE = (503, "UNAVAILABLE")
    UNSUPPORTED = (501, "UNIMPLEMENTED")
    ALREADY_EXISTS = (400, "ALREADY_EXISTS")
    CANCELLED = (400, "CANCELLED")

    @property
    def http_status(self) -> int:
        return self.value[0]

    @property
    def grpc_status_name(self) -> str:
        return self.value[1]


class InferdError(Exception):
    """Base of every error inferd reports to a client; ``code`` picks the status."""

    code: ErrorCode = ErrorCode.UNKNOWN

    def __init__(self, message: str, code: ErrorCode | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def __str__(self) -> str:
        return self.message


class UnknownError(InferdError):
    """Triton UNKNOWN."""

    code = ErrorCode.UNKNOWN


class InternalError(InferdError):
    """Triton INTERNAL (HTTP 500)."""

    code = ErrorCode.INTERNAL


class NotFoundError(InferdError):
    """Triton NOT_FOUND (HTTP 404)."""

    code = ErrorCode.NOT_FOUND


class InvalidArgumentError(InferdError):
    """Triton INVALID_ARG (HTTP 400)."""

    code = ErrorCode.INVALID_ARG


class UnavailableError(InferdError):
    """Triton UNAVAILABLE (HTTP 503)."""

    code = ErrorCode.UNAVAILABLE


class UnsupportedError(InferdError):
    """Triton UNSUPPORTED (HTTP 501)."""

    code = ErrorCode.UNSUPPORTED


class AlreadyExistsError(InferdError):
    """Triton ALREADY_EXISTS."""

    code = ErrorCode.ALREADY_EXISTS


class RequestCancelledError(InferdError):
    """Triton CANCELLED."""

    code = ErrorCode.CANCELLED


_BY_CODE: dict[ErrorCode, type[InferdError]] = {
    ErrorCode.UNKNOWN: UnknownError,
    ErrorCode.INTERNAL: InternalError,
    ErrorCode.NOT_FOUND: NotFoundError,
    ErrorCode.INVALID_ARG: InvalidArgumentError,
    ErrorCode.UNAVAILABLE: UnavailableError,
    ErrorCode.UNSUPPORTED: UnsupportedError,
    ErrorCode.ALREADY_EXISTS: AlreadyExistsError,
    ErrorCode.CANCELLED: RequestCancelledError,
}


def error_for_code(code: ErrorCode, message: str) -> InferdError:
    """The InferdError subclass instance for ``code``."""
    return _BY_CODE[code](message)
