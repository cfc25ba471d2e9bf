"""One inference over HTTP: InferCall reads the body (inflated within the limit, the binary header's
length as Triton reads it), submits it to the core and writes the answer (compressed when the client
accepts it); LoggedInferCall adds the --log-verbose 1 request line. HttpApp (app.py) routes to it."""

from __future__ import annotations

import gzip
import logging
import re
import time
import zlib
from typing import TYPE_CHECKING

from inferd.core.request import InferRequest
from inferd.core.response import InferResponse
from inferd.engine.model import Model
from inferd.errors import InferdError, InternalError, InvalidArgumentError, UnsupportedError
from inferd.frontends.forward import forwarded
from inferd.frontends.http.dialect import InferDialect
from inferd.frontends.http.encode import OutputEncoding, encode_infer_body, encode_infer_response
from inferd.frontends.http.errors import JSON as _JSON
from inferd.frontends.http.errors import TEXT as _TEXT
from inferd.frontends.http.errors import error_body, send_error
from inferd.frontends.http.protocol import HttpRequest, Responder
from inferd.frontends.http.trace import TracedResponder, start_trace
from inferd.frontends.inflate import WBITS, TooLarge
from inferd.frontends.inflate import inflate as bounded_inflate
from inferd.trace import Trace

if TYPE_CHECKING:
    from inferd.frontends.http.app import HttpApp

log = logging.getLogger("inferd.http")

_LEADING_INT = re.compile(r"\s*([+-]?[0-9]+)")
_INT64_MAX = 2**63 - 1
TEXT_ERRORS = ("inference header size should be", "Unsupported compression type", "incomplete string data")
DECOUPLED_TEXT = "HTTP end point doesn't support models with decoupled transaction policy"

_error = send_error


def inflate(body: bytes, encoding: str, limit: int) -> bytes:
    """A gzip or deflate body, never more than ``limit`` bytes of it (in bounded memory: a body that
    inflates past the limit is refused after ``limit`` + 1 bytes, however far it would go)."""
    if not encoding or encoding == "identity":
        return body
    if encoding not in WBITS:
        raise UnsupportedError("Unsupported compression type")
    try:
        out, ended = bounded_inflate(body, encoding, limit)
    except zlib.error as e:
        raise InvalidArgumentError(f"failed to decompress the request body ({encoding}): {e}") from e
    except TooLarge:
        raise InvalidArgumentError(
            f"Decompressed data size exceeds the maximum allowed value of {limit} bytes. Use "
            "--http-max-input-size to increase the limit."
        ) from None
    if not ended:
        raise InvalidArgumentError(
            f"failed to decompress the request body ({encoding}): the compressed data ends early"
        )
    return out


def content_encoding(req: HttpRequest) -> str:
    return req.headers.get("content-encoding", "").strip().lower()


def _header_length(text: str) -> int:
    """Inference-Header-Content-Length as Triton reads it (atoi: leading digits, else 0); more digits
    than an int64 holds read as the largest int64."""
    m = _LEADING_INT.match(text)
    if m is None:
        return 0
    digits = m.group(1)
    if len(digits.lstrip("+-").lstrip("0")) > 19:
        return -_INT64_MAX if digits.startswith("-") else _INT64_MAX
    return max(-_INT64_MAX, min(_INT64_MAX, int(digits)))


def _compress(
    req: HttpRequest, parts: list[bytes | memoryview]
) -> tuple[list[bytes | memoryview], str | None]:
    accept = req.headers.get("accept-encoding")
    if not accept:
        return parts, None
    accept = accept.lower()
    if "gzip" in accept:
        return [gzip.compress(b"".join(parts), compresslevel=6)], "gzip"
    if "deflate" in accept:
        return [zlib.compress(b"".join(parts))], "deflate"
    return parts, None


class InferCall:
    """One /infer request: decodes its body once the core found the model, answers its response."""

    __slots__ = (
        "app",
        "at",
        "body",
        "decoding",
        "dialect",
        "enc",
        "req",
        "request",
        "resp",
        "trace",
        "version",
    )

    def __init__(
        self,
        app: HttpApp,
        req: HttpRequest,
        resp: Responder,
        body: bytes | InferdError | None,
        at: tuple[int, int] | None = None,
        dialect: InferDialect | None = None,
    ) -> None:
        self.app = app
        self.dialect = dialect
        self.at = at  # when it was received, while tracing is on
        self.trace: Trace | None = None
        self.body = body  # the body inflated already (or why it could not be), None: not yet
        self.req = req
        self.resp = resp
        self.decoding = False
        self.version = ""
        self.request: InferRequest | None = None
        self.enc: OutputEncoding | None = None

    def decode(self, model: Model) -> InferRequest:
        """The core's ``Decoder``: the body read as the model's request (errors from here on are JSON)."""
        req = self.req
        headers = req.headers
        dialect = self.dialect
        if dialect is not None:  # a cloud front end: the size in the Content-Type, no compression
            header_length = dialect.header_length(headers.get("content-type"), len(req.body))
            self.decoding = True
            return self._read(model, req.body, header_length)
        self.decoding = True
        hl_text = headers.get("inference-header-content-length")
        if hl_text is None:
            header_length = None
        elif hl_text.isdigit() and hl_text.isascii() and len(hl_text) < 19:
            header_length = int(hl_text)  # what a client sends; the rest as Triton's atoi reads it
        else:
            header_length = _header_length(hl_text)
        body = self.body
        if body is None:
            body = req.body
            if "content-encoding" in headers:
                body = inflate(body, content_encoding(req), self.app.max_input_size)
        elif isinstance(body, InferdError):
            raise body
        return self._read(model, body, header_length)

    def _read(self, model: Model, body: bytes, header_length: int | None) -> InferRequest:
        req = self.req
        self.request, self.enc = request, _ = self.app.headers.decode(
            model, self.version, body, header_length
        )
        forward = self.app.header_forward
        if forward is not None:  # a new dict: a cached header's parameters are shared with its template
            request.parameters = {**request.parameters, **forwarded(req.headers, forward)}
        if self.at is not None:
            self.trace = trace = start_trace(self.app.tracing, model.name, request, req, self.at)
            if trace is not None:
                self.resp = TracedResponder(self.resp, trace)  # type: ignore[assignment]
        return request

    def answer(self, r: InferResponse | None, final: bool) -> None:
        """The stream's callback: the response encoded, or its error (text/plain, as the reference)."""
        resp = self.resp
        if self.trace is not None:  # (Trace.stamp, inline)
            self.trace.stamps += ("INFER_RESPONSE_COMPLETE", time.monotonic_ns())
        dialect = self.dialect
        if r is None or r.error is not None:
            e = (
                r.error
                if r is not None and r.error is not None
                else InternalError("model produced no response")
            )
            if dialect is not None and dialect.status_of is not None:  # a multi-model invoke
                resp.send(dialect.status_of(e), error_body(e), _TEXT)
            else:
                _error(resp, e, _TEXT)
            return
        assert self.enc is not None
        req = self.req
        compress = dialect is None and "accept-encoding" in req.headers
        try:
            if compress:
                head, parts, hlen = encode_infer_response(r, self.enc, self.request)
                body: bytes | list[bytes | memoryview] = [head, *parts]
            else:
                body, hlen = encode_infer_body(r, self.enc, self.request)
        except InferdError as e:
            _error(resp, e, _TEXT)  # after the model ran, as the reference answers its errors
            return
        except Exception as e:
            log.exception("encoding the response of model '%s' failed", r.model_name)
            _error(resp, InternalError(f"failed to encode the response: {e}"))
            return
        content_type = _JSON
        headers = b""
        if hlen >= 0:
            if dialect is None:
                content_type, headers = (
                    "application/octet-stream",
                    b"\r\nInference-Header-Content-Length: %d" % hlen,
                )
            else:
                content_type, headers = dialect.binary_headers(hlen)
        if compress:
            assert isinstance(body, list)
            body, encoding = _compress(req, body)
            if encoding is not None:
                headers += b"\r\nContent-Encoding: %b" % encoding.encode()
            if len(body) == 1 and isinstance(body[0], bytes):
                body = body[0]
        resp.send(200, body, content_type, headers)


class LoggedInferCall(InferCall):
    """An /infer request while requests are logged (its responder a ``LoggedResponder``): its line
    gets the request's id."""

    __slots__ = ()

    def decode(self, model: Model) -> InferRequest:
        line = self.resp.line  # type: ignore[attr-defined]  # (before a trace wraps the responder)
        request = super().decode(model)
        line.request_id = request.id
        return request
