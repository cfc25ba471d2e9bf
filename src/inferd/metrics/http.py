"""The metrics endpoint: ``GET /metrics`` on its own port, served by inferd's HTTP protocol."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable

from inferd.engine.server import ServerCore
from inferd.frontends.access import AccessPolicy
from inferd.frontends.http.errors import refused
from inferd.frontends.http.protocol import HttpRequest, Responder
from inferd.frontends.http.server import HttpServer
from inferd.frontends.http.status import PATHS as STATUS_PATHS
from inferd.frontends.http.status import serve_status
from inferd.metrics.collector import render

#: what the reference answers with
CONTENT_TYPE = "text/plain; charset=utf-8"


class MetricsApp:
    """``GET /metrics``: Prometheus text (and the status page, under the HTTP port's access rules:
    it names every model, its state and why it failed); other methods 405, other paths 404.
    ``/metrics`` itself stays open, as the reference's."""

    def __init__(
        self,
        core: ServerCore,
        gather: Callable[[], Awaitable[bytes]] | None = None,
        access: AccessPolicy | None = None,
    ) -> None:
        self.core = core
        self.access = access if access is not None and access.enabled else None
        #: the whole server's text when this process is one of several (``--workers``)
        self.gather = gather
        self._tasks: set[asyncio.Task[None]] = set()

    def __call__(self, req: HttpRequest, resp: Responder) -> None:
        if req.path in STATUS_PATHS and self.access is not None and refused(self.access, req, resp):
            return
        if serve_status(self.core, req, resp):  # the live status page, here too
            return
        if req.path != "/metrics":
            resp.send(404, b'{"error":"Not Found"}', "text/plain")
        elif req.method != "GET":
            resp.send(405, b'{"error":"Method Not Allowed"}', "text/plain")
        elif self.gather is None:
            resp.send(200, render(self.core), CONTENT_TYPE)
        else:
            task = asyncio.get_running_loop().create_task(self._gathered(resp, self.gather))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    @staticmethod
    async def _gathered(resp: Responder, gather: Callable[[], Awaitable[bytes]]) -> None:
        resp.send(200, await gather(), CONTENT_TYPE)


def metrics_server(
    core: ServerCore,
    host: str,
    port: int,
    tls: ssl.SSLContext | None = None,
    gather: Callable[[], Awaitable[bytes]] | None = None,
    reuse_port: bool = False,
    access: AccessPolicy | None = None,
) -> HttpServer:
    """An HttpServer serving ``/metrics`` for ``core`` (over TLS with ``tls``; the whole server's
    text from ``gather`` when given; the port shared by several processes with ``reuse_port``; the
    status page under ``access``, the HTTP port's rules)."""
    return HttpServer(MetricsApp(core, gather, access), host, port, ssl=tls, reuse_port=reuse_port)
