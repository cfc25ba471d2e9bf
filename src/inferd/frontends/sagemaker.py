"""Amazon SageMaker's container contract (``--allow-sagemaker``), as Triton 2.51 serves it.

Its own port (``--sagemaker-port``, 8080), served by the HTTP front end's ``HttpServer`` with this
app, inference through ``HttpApp.infer`` in SageMaker's dialect (``http/dialect.py``: the binary
header's size in the Content-Type, no compression). The routes are ``sagemaker_server.cc``'s, with
its statuses and bodies:

- ``GET /ping``: the server's readiness, or its liveness with ``SAGEMAKER_TRITON_PING_MODE=live``
  (what a multi-model endpoint uses: no model is loaded when SageMaker first pings);
- ``POST /invocations``: the model ``SAGEMAKER_TRITON_DEFAULT_MODEL_NAME`` names (the ``serve``
  entry point sets it to a single-model endpoint's only model); what it runs is
  ``SAGEMAKER_TRITON_INFERENCE_TYPE``: ``infer`` (the default, KServe v2 bodies), ``generate`` or
  ``generate_stream`` (the generate extension's flat JSON, later Triton releases' addition);
- multi-model endpoints (``/models...``, ``frontends/sagemaker_mme.py``);
- beyond the reference, ``POST /endpoints/<name>/invocations``: the runtime API's path, so that
  boto3's ``sagemaker-runtime`` client pointed at the container (``endpoint_url``) invokes it as
  SageMaker would; ``X-Amzn-SageMaker-Target-Model`` names a multi-model endpoint's model there;
- anything else: 400 with an empty body.

``--http-restricted-api`` does not apply here (the reference builds this server without it); API
keys do, by category (health, inference, model-repository).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping

from inferd.engine.facade import Core
from inferd.errors import InvalidArgumentError
from inferd.frontends.access import AccessPolicy, Category
from inferd.frontends.http.app import HttpApp
from inferd.frontends.http.dialect import SAGEMAKER
from inferd.frontends.http.errors import TEXT, denied
from inferd.frontends.http.protocol import HttpRequest, Responder
from inferd.frontends.request_log import LoggedResponder
from inferd.frontends.sagemaker_mme import TARGET_HEADER, MultiModels

__all__ = ["INFERENCE_TYPES", "SageMakerApp", "SageMakerSettings"]

log = logging.getLogger("inferd.sagemaker")

INFERENCE_TYPES = ("infer", "generate", "generate_stream")
#: the reference's placeholder when no default model is named (a request for it is "unknown model")
UNSPECIFIED_MODEL = "unspecified_SAGEMAKER_TRITON_DEFAULT_MODEL_NAME"
_MODELS_RE = re.compile(r"/models(?:/)?([^/]+)?(/invoke)?")
_RUNTIME_RE = re.compile(r"/endpoints/[^/]+/invocations")
_NOT_ALLOWED = b'{"error":"Method Not Allowed"}'


class SageMakerSettings:
    """What the environment sets, read once at start as the reference reads it."""

    def __init__(self, environ: Mapping[str, str] = os.environ) -> None:
        self.ping_mode = environ.get("SAGEMAKER_TRITON_PING_MODE", "ready")
        self.default_model = environ.get("SAGEMAKER_TRITON_DEFAULT_MODEL_NAME", UNSPECIFIED_MODEL)
        self.inference_type = environ.get("SAGEMAKER_TRITON_INFERENCE_TYPE", "infer")
        if self.inference_type not in INFERENCE_TYPES:
            raise InvalidArgumentError(
                f"Invalid SAGEMAKER_TRITON_INFERENCE_TYPE '{self.inference_type}': must be one of: "
                + ", ".join(INFERENCE_TYPES)
            )


class SageMakerApp:
    """The SageMaker routes over ``app``'s inference (an ``HttpApp`` with this port's access)."""

    def __init__(
        self,
        core: Core,
        app: HttpApp,
        multi_models: MultiModels,
        settings: SageMakerSettings,
        access: AccessPolicy | None = None,
    ) -> None:
        self.core = core
        self.app = app
        self.multi = multi_models
        self.settings = settings
        self.access = access if access is not None and access.enabled else None
        self._live = settings.ping_mode == "live"

    def __call__(self, req: HttpRequest, resp: Responder) -> None:
        path = req.path
        if path == "/invocations":
            self._invocations(req, resp)
            return
        if self.app.request_log.on:
            resp = LoggedResponder(resp, req.method, path, req.query, self.app.request_log.details)
        if path == "/ping":
            if self._refused(Category.HEALTH, req, resp):
                return
            if req.method != "GET":
                resp.send(405, _NOT_ALLOWED, TEXT)
                return
            ok = self.core.live() if self._live else self.core.ready()
            resp.send(200 if ok else 400, b"", TEXT)
            return
        m = _MODELS_RE.fullmatch(path)
        if m is not None:
            self._models(req, resp, m.group(1) or "", m.group(2) or "")
        elif _RUNTIME_RE.fullmatch(path):
            self._runtime(req, resp)
        else:
            resp.send(400, b"", TEXT)

    def _refused(self, category: Category, req: HttpRequest, resp: Responder) -> bool:
        return self.access is not None and denied(self.access, category, req, resp)

    def _invocations(self, req: HttpRequest, resp: Responder) -> None:
        if self._refused(Category.INFERENCE, req, resp):
            return
        kind = self.settings.inference_type
        name = self.settings.default_model
        if kind != "infer":
            if self.app.request_log.on:
                resp = LoggedResponder(resp, req.method, req.path, req.query, self.app.request_log.details)
            self.app.generate(req, resp, name, "", kind == "generate_stream")
        elif req.method != "POST":
            resp.send(405, _NOT_ALLOWED, TEXT)
        else:
            self.app.infer(req, resp, name, "", SAGEMAKER)

    def _runtime(self, req: HttpRequest, resp: Responder) -> None:
        """InvokeEndpoint as boto3 sends it: ``/invocations``, or with a target model its load's invoke."""
        target = req.headers.get(TARGET_HEADER)
        if target is None:
            self._invocations(req, resp)
            return
        if self._refused(Category.INFERENCE, req, resp):
            return
        digest = self.multi.digest_of(target)
        if digest is None:
            resp.send(404, b"", TEXT)
        else:
            self.multi.invoke(req, resp, digest)

    def _models(self, req: HttpRequest, resp: Responder, name: str, action: str) -> None:
        method = req.method
        if method == "GET":
            if self._refused(Category.MODEL_REPOSITORY, req, resp):
                return
            if name:
                self.multi.describe(resp, name)
            else:
                self.multi.list(resp)
        elif method == "POST" and action:
            if self._refused(Category.INFERENCE, req, resp):
                return
            self.multi.invoke(req, resp, name)
        elif method == "POST":  # a load (the name in the path is not read, as the reference)
            if self._refused(Category.MODEL_REPOSITORY, req, resp):
                return
            self.multi.load(req, resp)
        elif method == "DELETE":
            if self._refused(Category.MODEL_REPOSITORY, req, resp):
                return
            self.multi.unload(req, resp, name)
        else:
            resp.send(400, b"", TEXT)
