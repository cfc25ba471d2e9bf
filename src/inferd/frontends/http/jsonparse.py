"""JSON bodies as the reference's rapidjson reads them, with its error texts and offsets.

orjson parses; when it refuses a body, the reference's message and offset are worked out here
(``_rapidjson_error`` walks the body as rapidjson would), so a client sees the reference's answer.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from inferd.errors import InternalError

_RAPIDJSON_TEXT = (
    ("zero-length", "The document is empty."),
    ("expected a JSON value", "Invalid value."),
    ("trailing characters", "The document root must not be followed by other values."),
    ("unexpected content after document", "The document root must not be followed by other values."),
    ("input data is empty", "The document is empty."),
    ("trailing comma", "Invalid value."),
    ("key must be a string", "Missing a name for object member."),
    ("expected a string key", "Missing a name for object member."),
    ("expected ':'", "Missing a colon after a name of object member."),
    ("expected ',' or '}'", "Missing a comma or '}' after an object member."),
    ("expected ',' or ']'", "Missing a comma or ']' after an array element."),
    ("EOF while parsing a string", "Missing a closing quotation mark in string."),
)


def _json_error(e: orjson.JSONDecodeError) -> InternalError:
    msg = e.msg
    for needle, text in _RAPIDJSON_TEXT:
        if needle in msg:
            msg = text
            break
    return InternalError(f"failed to parse the request JSON buffer: {msg} at {e.pos}")


def parse_json(buf: bytes) -> Any:
    """A JSON body as Triton's rapidjson reads it: up to the first NUL byte, NaN and Infinity
    accepted, and rapidjson's error message and offset (500) when it is no JSON."""
    nul = buf.find(b"\0")
    if nul >= 0:
        buf = buf[:nul]
    try:
        return orjson.loads(buf)
    except orjson.JSONDecodeError as e:
        found = _rapidjson_error(buf)
        if found is None:
            try:
                return json.loads(buf)  # what orjson refuses and rapidjson takes: NaN, Infinity
            except (ValueError, RecursionError):
                raise _json_error(e) from e
        raise InternalError(f"failed to parse the request JSON buffer: {found[0]} at {found[1]}") from e


class _RapidJsonError(Exception):
    def __init__(self, message: str, offset: int) -> None:
        super().__init__(message)
        self.message = message
        self.offset = offset


_WS = b" \t\n\r"
_ESCAPES = b'"\\/bfnrtu'


def _rapidjson_error(buf: bytes) -> tuple[str, int] | None:
    """(message, offset) of the first error rapidjson reports for ``buf``; None when it parses."""
    n = len(buf)

    def ws(i: int) -> int:
        while i < n and buf[i] in _WS:
            i += 1
        return i

    def literal(i: int, word: bytes) -> int:
        for k in range(1, len(word)):
            if i + k >= n or buf[i + k] != word[k]:
                raise _RapidJsonError("Invalid value.", i + k)
        return i + len(word)

    def string(i: int) -> int:
        i += 1
        while True:
            if i >= n:
                raise _RapidJsonError("Missing a closing quotation mark in string.", i)
            c = buf[i]
            if c == 0x22:
                return i + 1
            if c == 0x5C:
                if i + 1 >= n or buf[i + 1] not in _ESCAPES:
                    raise _RapidJsonError("Invalid escape character in string.", i)
                if buf[i + 1] == 0x75:  # a \u escape: four hex digits follow
                    hexa = buf[i + 2 : i + 6]
                    if len(hexa) < 4 or any(h not in b"0123456789abcdefABCDEF" for h in hexa):
                        raise _RapidJsonError("Incorrect hex digit after \\u escape in string.", i)
                    i += 6
                else:
                    i += 2
            elif c < 0x20:
                raise _RapidJsonError("Invalid escape character in string.", i)  # 2.51 says so
            else:
                i += 1

    def digits(i: int) -> int:
        while i < n and 0x30 <= buf[i] <= 0x39:
            i += 1
        return i

    def number(i: int) -> int:
        start = i
        if buf[i] == 0x2D:  # -
            i += 1
        if buf[i : i + 3] == b"NaN":
            return i + 3
        if buf[i : i + 8] == b"Infinity":
            return i + 8
        if i < n and buf[i] == 0x30:
            i += 1
        elif i < n and 0x31 <= buf[i] <= 0x39:
            i = digits(i)
        else:
            raise _RapidJsonError("Invalid value.", i)
        if i < n and buf[i] == 0x2E:  # .
            if i + 1 >= n or not 0x30 <= buf[i + 1] <= 0x39:
                raise _RapidJsonError("Miss fraction part in number.", i + 1)
            i = digits(i + 1)
        if i < n and buf[i] in b"eE":
            i += 1
            if i < n and buf[i] in b"+-":
                i += 1
            if i >= n or not 0x30 <= buf[i] <= 0x39:
                raise _RapidJsonError("Miss exponent in number.", i)
            i = digits(i)
        if float(buf[start:i]) in (float("inf"), float("-inf")):
            raise _RapidJsonError("Number too big to be stored in double.", start)
        return i

    def value(i: int) -> int:
        i = ws(i)
        if i >= n:
            raise _RapidJsonError("Invalid value.", i)
        c = buf[i]
        if c == 0x7B:  # {
            i = ws(i + 1)
            if i < n and buf[i] == 0x7D:
                return i + 1
            while True:
                if i >= n or buf[i] != 0x22:
                    raise _RapidJsonError("Missing a name for object member.", i)
                i = ws(string(i))
                if i >= n or buf[i] != 0x3A:
                    raise _RapidJsonError("Missing a colon after a name of object member.", i)
                i = ws(value(i + 1))
                if i < n and buf[i] == 0x2C:
                    i = ws(i + 1)
                elif i < n and buf[i] == 0x7D:
                    return i + 1
                else:
                    raise _RapidJsonError("Missing a comma or '}' after an object member.", i)
        if c == 0x5B:  # [
            i = ws(i + 1)
            if i < n and buf[i] == 0x5D:
                return i + 1
            while True:
                i = ws(value(i))
                if i < n and buf[i] == 0x2C:
                    i = ws(i + 1)
                elif i < n and buf[i] == 0x5D:
                    return i + 1
                else:
                    raise _RapidJsonError("Missing a comma or ']' after an array element.", i)
        if c == 0x22:
            return string(i)
        if c == 0x74:
            return literal(i, b"true")
        if c == 0x66:
            return literal(i, b"false")
        if c == 0x6E:
            return literal(i, b"null")
        if c == 0x2D or 0x30 <= c <= 0x39 or c in b"NI":
            return number(i)
        raise _RapidJsonError("Invalid value.", i)

    i = ws(0)
    try:
        if i >= n:
            raise _RapidJsonError("The document is empty.", i)
        i = ws(value(i))
        if i < n:
            raise _RapidJsonError("The document root must not be followed by other values.", i)
    except _RapidJsonError as e:
        return e.message, e.offset
    except RecursionError:
        return None
    return None
