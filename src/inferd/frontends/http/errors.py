"""The HTTP front end's one error mapping: an InferdError as Triton's status and ``{"error": ...}``."""

from __future__ import annotations

import logging

import orjson

from inferd.errors import InferdError
from inferd.frontends.http.protocol import Responder
from inferd.logs import VERBOSE1

JSON = "application/json"
TEXT = "text/plain"


def error_body(e: InferdError) -> bytes:
    """``{"error": message}``, as every error answer (and a generate stream's error event) carries it."""
    return orjson.dumps({"error": e.message})


def send_error(resp: Responder, e: InferdError, content_type: str = JSON) -> None:
    """Answer with Triton's HTTP status for the error's code (``errors.ErrorCode``).

    The content type is the reference's per phase: JSON by default; text/plain for /infer's errors
    before its body is read, for its answers after the model ran, and for a few decoding errors.
    """
    if log.isEnabledFor(VERBOSE1):  # verbose level 1: every failed request, with its reason
        log.log(VERBOSE1, "HTTP %d: %s", e.code.http_status, e.message)
    resp.send(e.code.http_status, error_body(e), content_type)


log = logging.getLogger("inferd.http")
