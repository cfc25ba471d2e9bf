"""``--http-header-forward-pattern`` and ``--grpc-header-forward-pattern``: request headers (HTTP) or
metadata (gRPC) whose name matches reach the model as string parameters.

The reference matches with RE2, case-insensitively, and RE2 takes a leading global flag group such as
``(?-i)`` (case-sensitive after all); Python's ``re`` refuses a global flag it cannot apply to the
whole pattern, so a leading group becomes a scoped one, ``(?-i:...)``, meaning the same.
"""

from __future__ import annotations

import re

from inferd.errors import InvalidArgumentError

_LEADING_FLAGS = re.compile(r"^\(\?([a-zA-Z]*)-([a-zA-Z]+)\)")


def compile_forward_pattern(pattern: str, flag: str) -> re.Pattern[str] | None:
    """The compiled pattern (None when empty); InvalidArgumentError naming ``flag`` when invalid."""
    if not pattern:
        return None
    m = _LEADING_FLAGS.match(pattern)
    if m is not None:
        pattern = f"(?{m.group(1)}-{m.group(2)}:{pattern[m.end() :]})"
    try:
        return re.compile(pattern, re.IGNORECASE)
    except re.error as e:
        raise InvalidArgumentError(f"{flag}: invalid regular expression '{pattern}': {e}") from None


def forwarded(headers: dict[str, str], pattern: re.Pattern[str]) -> dict[str, str]:
    """The headers whose name matches, as parameters (names as the front end keeps them)."""
    return {k: v for k, v in headers.items() if pattern.search(k)}
