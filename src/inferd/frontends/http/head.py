"""The request head of HTTP/1.1 as ``protocol.HttpConnection`` reads it: the limits one client is held
to (``HttpLimits``), their refusals (``Reject``: 413, 414, 431 with their texts), the request target's
origin form, and the method and header names clients send most, looked up before decoding."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True, frozen=True)
class HttpLimits:
    """What one client may make the server hold (``ServerOptions`` sets them; 0 turns a timeout off)."""

    max_body: int = 1 << 26
    max_url: int = 16384
    max_header_bytes: int = 65536
    max_headers: int = 100
    max_connections: int = 10000
    header_timeout_s: float = 30.0
    idle_timeout_s: float = 300.0


def origin_form(target: str) -> str:
    """An absolute-form request target (``http://host:port/path?query``, any scheme, any host) as
    the origin-form the routes read, as the reference serves it; any other target as it is."""
    scheme, sep, rest = target.partition("://")
    if not sep or not scheme.isascii() or not scheme.isalpha():
        return target
    cut = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=len(rest))
    return rest[cut:]


#: the methods as strings, by their bytes
METHODS = {m.encode(): m for m in ("GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS", "PATCH")}

#: the header names clients send most, as they spell them, lower-cased: looked up before decoding
NAMES = {
    name.encode(): name.lower()
    for common in (
        "Host",
        "User-Agent",
        "Accept",
        "Accept-Encoding",
        "Content-Type",
        "Content-Length",
        "Content-Encoding",
        "Connection",
        "Expect",
        "Transfer-Encoding",
        "Inference-Header-Content-Length",
        "Authorization",
        "Traceparent",
    )
    for name in (common, common.lower())
}


class Reject(Exception):
    """A request over a limit: answer ``status`` with ``message`` and close the connection."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def too_many(limit: int) -> str:
    return f"the request has more than {limit} header fields"


def too_large(size: int, limit: int) -> str:
    return (
        f"the request body of {size} bytes is larger than the limit of {limit} bytes; use "
        "--http-max-input-size to raise it"
    )
