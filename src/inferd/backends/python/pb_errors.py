"""The errors a Python model sees (``pb_utils.TritonError``, ``pb_utils.TritonModelException``).

Their own module so that ``dlpack.py`` raises what ``pb_utils`` exports; ``pb_utils`` re-exports both.
"""

from __future__ import annotations


class TritonError:
    """An error a model returns in a response (or raises as TritonModelException)."""

    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7

    def __init__(self, message: str, code: int = INTERNAL) -> None:
        self._message = message
        self._code = code

    def code(self) -> int:
        return self._code

    def message(self) -> str:
        return self._message

    def __repr__(self) -> str:
        return f"TritonError({self._message!r}, {self._code})"


class TritonModelException(Exception):
    """Raised by a model to fail initialize/execute with its message."""
