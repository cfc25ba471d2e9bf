"""The metrics endpoint: ``GET /metrics`` on its own port, served by inferd's HTTP protocol."""

from __future__ import annotations

import ssl

from inferd.core.server import ServerCore
from inferd.frontends.http.protocol import HttpRequest, HttpServer, Responder
from inferd.frontends.http.status import serve_status
from inferd.metrics.collector import render

#: what the reference answers with
CONTENT_TYPE = "text/plain; charset=utf-8"


class MetricsApp:
    """``GET /metrics``: Prometheus text (and the status page); other methods 405, other paths 404."""

    def __init__(self, core: ServerCore) -> None:
        self.core = core

    def __call__(self, req: HttpRequest, resp: Responder) -> None:
        if serve_status(self.core, req, resp):  # the live status page, here too
            return
        if req.path != "/metrics":
            resp.send(404, b'{"error":"Not Found"}', "text/plain")
        elif req.method != "GET":
            resp.send(405, b'{"error":"Method Not Allowed"}', "text/plain")
        else:
            resp.send(200, render(self.core), CONTENT_TYPE)


def metrics_server(core: ServerCore, host: str, port: int, tls: ssl.SSLContext | None = None) -> HttpServer:
    """An HttpServer serving ``/metrics`` for ``core`` (over TLS with ``tls``)."""
    return HttpServer(MetricsApp(core), host, port, ssl=tls)
