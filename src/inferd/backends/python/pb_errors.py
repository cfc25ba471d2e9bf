"""The errors a Python model sees (``pb_utils.TritonError``, ``pb_utils.TritonModelException``).

Their own module so that ``dlpack.py`` and the other ``pb_*`` modules raise what ``pb_utils``
exports; ``pb_utils`` re-exports both.
"""

from __future__ import annotations

import enum
from typing import Any

#: TritonError's codes, an enum named as the reference's (``<__ErrorCode.INTERNAL: 1>``); plain
#: integers are accepted too, as inferd always did
ErrorCode: Any = enum.IntEnum(  # type: ignore[misc]
    "__ErrorCode",
    [
        ("UNKNOWN", 0),
        ("INTERNAL", 1),
        ("NOT_FOUND", 2),
        ("INVALID_ARG", 3),
        ("UNAVAILABLE", 4),
        ("UNSUPPORTED", 5),
        ("ALREADY_EXISTS", 6),
        ("CANCELLED", 7),
    ],
    module="c_python_backend_utils",
)


class TritonError:
    """An error a model returns in a response (or raises as TritonModelException)."""

    UNKNOWN = ErrorCode.UNKNOWN
    INTERNAL = ErrorCode.INTERNAL
    NOT_FOUND = ErrorCode.NOT_FOUND
    INVALID_ARG = ErrorCode.INVALID_ARG
    UNAVAILABLE = ErrorCode.UNAVAILABLE
    UNSUPPORTED = ErrorCode.UNSUPPORTED
    ALREADY_EXISTS = ErrorCode.ALREADY_EXISTS
    CANCELLED = ErrorCode.CANCELLED

    __slots__ = ("_code", "_message")

    def __init__(self, message: str, code: int = ErrorCode.INTERNAL) -> None:
        if not isinstance(message, str) or not isinstance(code, int):
            from inferd.backends.python.pb_args import incompatible

            raise incompatible(
                "__init__",
                "c_python_backend_utils.TritonError(message: str, code: "
                "c_python_backend_utils.TritonError.__ErrorCode = <__ErrorCode.INTERNAL: 1>)",
                (message, code),
                {},
                constructor=True,
            )
        self._message = message
        self._code = ErrorCode(code) if 0 <= code <= 7 else code  # another integer: answered INTERNAL

    def code(self) -> Any:
        return self._code

    def message(self) -> str:
        return self._message

    def __repr__(self) -> str:
        return f"TritonError({self._message!r}, {int(self._code)})"


setattr(TritonError, "__ErrorCode", ErrorCode)


class TritonModelException(Exception):
    """Raised by a model to fail initialize/execute with its message; what pb_utils raises too."""
