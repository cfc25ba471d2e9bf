"""The HTTP front end's one error mapping: an InferdError as Triton's status and ``{"error": ...}``."""

from __future__ import annotations

import logging

import orjson

from inferd.errors import InferdError
from inferd.frontends.access import AccessPolicy, Category, Denial
from inferd.frontends.http.protocol import HttpRequest, Responder
from inferd.frontends.http.routes import route_category
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


def refused(access: AccessPolicy, req: HttpRequest, resp: Responder) -> bool:
    """Whether ``access`` refuses ``req``, which is then answered: 403 as the reference for a
    restriction, 401 / 403 for API keys. A path that is no route is let through (404 for anyone).
    Every port serving the HTTP routes or the status page asks here."""
    category = route_category(req.path)
    if category is None:
        return False
    return denied(access, category, req, resp)


def denied(access: AccessPolicy, category: Category, req: HttpRequest, resp: Responder) -> bool:
    """Whether ``access`` refuses ``req`` the APIs of ``category``, which is then answered (as
    ``refused``): for ports whose routes are not the HTTP API's (SageMaker, Vertex AI)."""
    why_not = access.check(category, req.headers)
    if why_not is None:
        return False
    why, header = why_not
    if why is Denial.RESTRICTED:  # the reference's answer
        body = orjson.dumps({"error": f"This API is restricted, expecting header '{header}'"})
        resp.send(403, body, TEXT)
    elif why is Denial.UNAUTHENTICATED:
        body = orjson.dumps({"error": "this API needs an API key: 'Authorization: Bearer <key>'"})
        resp.send(401, body, JSON, [("WWW-Authenticate", 'Bearer realm="inferd"')])
    else:
        body = orjson.dumps({"error": f"the API key does not grant the '{category.value}' APIs"})
        resp.send(403, body, JSON)
    return True


log = logging.getLogger("inferd.http")
