"""The live status page (beyond the reference): ``GET /`` is the page, ``GET /v2/status`` its data.

Served on the HTTP port (under the statistics access category) and on the metrics port, unless
``--allow-status-page=false``. The page is one static file in the package (``status.html``: no
build step, no CDN); it reads ``/v2/status`` (``engine/status.py``) every second.
"""

from __future__ import annotations

import functools
from importlib import resources

import orjson

from inferd.engine.facade import Core
from inferd.frontends.http.protocol import HttpRequest, Responder

PATHS = ("/", "/v2/status")
_HTML = "text/html; charset=utf-8"


@functools.cache
def page() -> bytes:
    return resources.files("inferd.frontends.http").joinpath("status.html").read_bytes()


def serve_status(core: Core, req: HttpRequest, resp: Responder) -> bool:
    """Answer ``req`` if it asks for the status page or its data; False when it is not ours."""
    if req.path not in PATHS or (req.path == "/" and req.method != "GET"):
        return False  # not ours: what the reference answers (404 for / but GET)
    doc = core.status()
    if doc is None:  # --allow-status-page=false: as any unknown path
        return False
    if req.method != "GET":
        resp.send(405, b'{"error":"Method Not Allowed"}', "application/json")
    elif req.path == "/":
        resp.send(200, page(), _HTML)
    else:
        resp.send(200, orjson.dumps(doc), "application/json")
    return True
