"""Google Vertex AI's prediction container contract (``--allow-vertex-ai``), as Triton 2.51 serves it.

Its own port (``--vertex-ai-port``, else ``AIP_HTTP_PORT``, else 8080), served by the HTTP front end's
``HttpServer`` with this app. The routes are the two Vertex AI names (``vertex_ai_server.cc``):

- ``AIP_HEALTH_ROUTE``: the server's readiness (GET);
- ``AIP_PREDICT_ROUTE`` (POST): an inference of the default model (``--vertex-ai-default-model``, or
  the repository's only model) with KServe v2 bodies in Vertex AI's dialect (``http/dialect.py``:
  the binary header's size in ``application/vnd.vertex-ai-triton.binary+json;json-header-size=N``,
  no compression); with ``X-Vertex-Ai-Triton-Redirect: <path>`` the request goes to that HTTP API
  route instead (``v2/models/m/infer``, ``v2/models/m`` metadata, ``.../ready``, ``.../config``,
  ``.../stats``, ``v2``, ``v2/health/live|ready``, ``v2/models/stats``, ``v2/repository/...``, the
  shared-memory routes, ``metrics``), read routes answered as if asked with GET;
- anything else: 400 with an empty body.

Both routes are matched as the reference matches them (the whole path against the variable read as
a regular expression). ``--http-restricted-api`` does not apply here (the reference builds this
server without it); API keys do, each redirect by its route's category.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from inferd.engine.facade import Core
from inferd.errors import InvalidArgumentError
from inferd.frontends.access import AccessPolicy, Category
from inferd.frontends.http.app import HttpApp
from inferd.frontends.http.dialect import VERTEX
from inferd.frontends.http.errors import TEXT, denied
from inferd.frontends.http.protocol import HttpRequest, Responder
from inferd.frontends.http.routes import MODEL_RE
from inferd.frontends.request_log import LoggedResponder

__all__ = ["REDIRECT_HEADER", "VertexApp", "VertexRoutes", "default_model"]

REDIRECT_HEADER = "x-vertex-ai-triton-redirect"
_NOT_ALLOWED = b'{"error":"Method Not Allowed"}'
_SERVER_RE = re.compile(r"/v2(?:/health/(live|ready))?")
_SHM_RE = re.compile(r"/v2/(?:system|cuda)sharedmemory(?:/region/([^/]+))?/(status|register|unregister)")
_REPO_RE = re.compile(r"/v2/repository(?:/([^/]+))?/(index|models/([^/]+)/(load|unload))")
#: the model routes a redirect reaches (generate, trace settings: not through a redirect)
_MODEL_KINDS = ("", "ready", "infer", "config", "stats")


def _route(text: str) -> re.Pattern[str]:
    """A route variable as the reference matches it: a regular expression (a literal when it is none)."""
    try:
        return re.compile(text)
    except re.error:
        return re.compile(re.escape(text))


@dataclass(frozen=True, slots=True)
class VertexRoutes:
    """``AIP_PREDICT_ROUTE`` and ``AIP_HEALTH_ROUTE``, required (the reference's texts)."""

    predict: str
    health: str

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> VertexRoutes:
        predict = environ.get("AIP_PREDICT_ROUTE", "")
        health = environ.get("AIP_HEALTH_ROUTE", "")
        if not predict:  # (the reference's text names API_PREDICT_ROUTE)
            raise InvalidArgumentError("API_PREDICT_ROUTE is not defined for Vertex AI endpoint")
        if not health:
            raise InvalidArgumentError("AIP_HEALTH_ROUTE is not defined for Vertex AI endpoint")
        return cls(predict, health)


def default_model(core: Core, name: str) -> str:
    """The model the predict route serves: ``name`` if it is READY, else the only READY model
    when ``name`` is empty (InvalidArgumentError with the reference's texts otherwise)."""
    ready = [e["name"] for e in core.repository_index(True)]
    if not name:
        if len(ready) != 1:
            raise InvalidArgumentError(
                "Expect the model repository contains only a single model if default model is not specified"
            )
        return str(ready[0])
    if name not in ready:
        raise InvalidArgumentError(f"Expect the default model '{name}' is loaded")
    return name


class VertexApp:
    """The Vertex AI routes over ``app`` (an ``HttpApp`` with this port's access rules)."""

    def __init__(
        self,
        app: HttpApp,
        routes: VertexRoutes,
        model: str,
        metrics: Callable[[], Awaitable[bytes]],
        access: AccessPolicy | None = None,
    ) -> None:
        self.app = app
        self.model = model
        self.metrics = metrics
        self.access = access if access is not None and access.enabled else None
        self._predict = _route(routes.predict)
        self._health = _route(routes.health)
        self._tasks: set[asyncio.Task[None]] = set()

    def __call__(self, req: HttpRequest, resp: Responder) -> None:
        path = req.path
        if self._health.fullmatch(path):
            if self.app.request_log.on:
                resp = LoggedResponder(resp, req.method, path, req.query, self.app.request_log.details)
            if self.access is not None and denied(self.access, Category.HEALTH, req, resp):
                return
            if req.method != "GET":
                resp.send(405, _NOT_ALLOWED, TEXT)
            else:
                resp.send(200 if self.app.core.ready() else 400, b"", TEXT)
            return
        if not self._predict.fullmatch(path):
            resp.send(400, b"", TEXT)
            return
        target = req.headers.get(REDIRECT_HEADER)
        if target is None:  # the default model
            if self.access is not None and denied(self.access, Category.INFERENCE, req, resp):
                return
            if req.method != "POST":
                resp.send(405, _NOT_ALLOWED, TEXT)
            else:
                self.app.infer(req, resp, self.model, "", VERTEX)
            return
        if req.method != "POST":
            resp.send(405, b"", TEXT)
            return
        self._redirect(req, resp, "/" + target)

    def _redirect(self, req: HttpRequest, resp: Responder, path: str) -> None:
        """The HTTP API route ``path`` names, if a redirect may reach it (else 400)."""
        if path == "/metrics":
            if self.app.request_log.on:
                resp = LoggedResponder(resp, "GET", path, "", self.app.request_log.details)
            if self.access is not None and denied(self.access, Category.STATISTICS, req, resp):
                return
            task = asyncio.get_running_loop().create_task(self._send_metrics(resp))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            return
        method = "POST"
        m = MODEL_RE.fullmatch(path)
        if path == "/v2/models/stats":
            method = "GET"
        elif m is not None and (m.group(3) or "") in _MODEL_KINDS:
            kind = m.group(3) or ""
            if kind == "infer":
                if self.access is not None and denied(self.access, Category.INFERENCE, req, resp):
                    return
                self.app.infer(req, resp, m.group(1), m.group(2) or "", VERTEX)
                return
            method = "GET"
        elif path == "/v2" or _SERVER_RE.fullmatch(path):
            method = "GET"
        elif (shm := _SHM_RE.fullmatch(path)) is not None:
            if shm.group(2) == "status":
                method = "GET"
        elif _REPO_RE.fullmatch(path) is None:
            resp.send(400, b"", TEXT)
            return
        self.app(HttpRequest(method, path, "", req.headers, req.body), resp)

    async def _send_metrics(self, resp: Responder) -> None:
        resp.send(200, await self.metrics(), TEXT)
