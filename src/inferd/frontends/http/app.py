"""KServe v2 HTTP routes: decode -> core Server -> encode. One error mapping (``_error``)."""

from __future__ import annotations

import gzip
import logging
import re
import zlib
from typing import Any

import orjson

from inferd.core.model import Model
from inferd.core.request import InferRequest
from inferd.core.response import InferResponse
from inferd.core.server import Server
from inferd.errors import InferdError, InternalError, InvalidArgumentError, UnsupportedError
from inferd.frontends.http.codec import HeaderCache, OutputEncoding, encode_infer_response
from inferd.frontends.http.protocol import HttpRequest, Responder

log = logging.getLogger("inferd.http")

_MODEL_RE = re.compile(
    r"^/v2/models/([^/]+)(?:/versions/([0-9]+))?(?:/(infer|generate|generate_stream|ready|config|stats|trace/setting))?$"
)
_REPO_RE = re.compile(r"^/v2/repository(?:/([^/]+))?/(?:(index)|models/([^/]+)/(load|unload))$")
_JSON = "application/json"
_TEXT = "text/plain"
_NOT_FOUND = b'{"error":"Not Found"}'
_NOT_ALLOWED = b'{"error":"Method Not Allowed"}'
_EMPTY = b""


def _error_body(e: InferdError) -> bytes:
    return orjson.dumps({"error": e.message})


def _error(resp: Responder, e: InferdError, content_type: str = _JSON) -> None:
    resp.send(e.code.http_status, _error_body(e), content_type)


def _decompress(req: HttpRequest) -> bytes:
    enc = req.headers.get("content-encoding", "").strip().lower()
    if not enc or enc == "identity":
        return req.body
    try:
        if enc == "gzip":
            return gzip.decompress(req.body)
        if enc == "deflate":
            return zlib.decompress(req.body)
    except (OSError, zlib.error, EOFError) as e:
        raise InvalidArgumentError(f"failed to decompress the request body ({enc}): {e}") from e
    raise UnsupportedError(f"unsupported content-encoding '{enc}'")


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


class HttpApp:
    """The routes of the KServe v2 HTTP protocol over one core Server."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self._headers = HeaderCache()

    def __call__(self, req: HttpRequest, resp: Responder) -> None:
        path = req.path
        if path.startswith("/v2/models/"):
            if path == "/v2/models/stats":
                self._get_only(req, resp, lambda: self._json(resp, self.server.statistics()))
                return
            m = _MODEL_RE.match(path)
            if m is None:
                resp.send(404, _NOT_FOUND, _TEXT)
                return
            name, version, action = m.group(1), m.group(2) or "", m.group(3)
            if action == "infer":
                if req.method != "POST":
                    resp.send(405, _NOT_ALLOWED, _TEXT)
                    return
                self.infer(req, resp, name, version)
                return
            self._model_route(req, resp, name, version, action)
            return
        if path == "/v2/health/live":
            self._get_only(req, resp, lambda: self._health(resp, self.server.live()))
        elif path == "/v2/health/ready":
            self._get_only(req, resp, lambda: self._health(resp, self.server.ready()))
        elif path == "/v2":
            if req.method != "GET":
                resp.send(405, _NOT_ALLOWED, _JSON)
            else:
                self._json(resp, self.server.metadata())
        elif path.startswith("/v2/repository"):
            self._repository(req, resp)
        else:
            resp.send(404, _NOT_FOUND, _TEXT)

    # -- helpers ---------------------------------------------------------------------------------
    @staticmethod
    def _get_only(req: HttpRequest, resp: Responder, fn: Any) -> None:
        if req.method != "GET":
            resp.send(405, _NOT_ALLOWED, _TEXT)
            return
        try:
            fn()
        except InferdError as e:
            _error(resp, e)

    @staticmethod
    def _json(resp: Responder, doc: Any) -> None:
        resp.send(200, orjson.dumps(doc), _JSON)

    @staticmethod
    def _health(resp: Responder, ok: bool) -> None:
        resp.send(200 if ok else 400, _EMPTY, _TEXT)

    # -- model routes ----------------------------------------------------------------------------
    def _model_route(
        self, req: HttpRequest, resp: Responder, name: str, version: str, action: str | None
    ) -> None:
        server = self.server
        if action is None:
            self._get_only(req, resp, lambda: self._json(resp, server.model_metadata(name, version)))
        elif action == "ready":
            if req.method != "GET":
                resp.send(405, _NOT_ALLOWED, _TEXT)
            elif server.model_ready(name, version):
                resp.send(200, _EMPTY, _TEXT)
            else:
                resp.send(400, b'{"error":"Model version not ready"}', _TEXT)
        elif action == "config":
            self._get_only(req, resp, lambda: self._json(resp, server.model_config(name, version)))
        elif action == "stats":
            self._get_only(req, resp, lambda: self._json(resp, server.statistics(name, version)))
        else:  # generate, generate_stream, trace/setting: not served yet
            resp.send(404, _NOT_FOUND, _TEXT)

    def _repository(self, req: HttpRequest, resp: Responder) -> None:
        m = _REPO_RE.match(req.path)
        if m is None:
            resp.send(404, _NOT_FOUND, _TEXT)
            return
        if req.method != "POST":
            resp.send(405, _NOT_ALLOWED, _TEXT)
            return
        repo, index, model, action = m.groups()
        try:
            body = _decompress(req)
            doc: Any = {}
            if body.strip():
                try:
                    doc = orjson.loads(body)
                except orjson.JSONDecodeError as e:
                    raise InternalError(f"failed to parse the request JSON buffer: {e.msg} at {e.pos}") from e
            if index:
                ready = bool(doc.get("ready", False)) if isinstance(doc, dict) else False
                self._json(resp, self.server.repository_index(ready))
                return
            if repo:
                raise UnsupportedError("'repository_name' specification is not supported")
            if action == "load":
                self.server.load_model(model)
            else:
                self.server.unload_model(model)
            resp.send(200, _EMPTY, _JSON)
        except InferdError as e:
            _error(resp, e)

    # -- inference -------------------------------------------------------------------------------
    def infer(self, req: HttpRequest, resp: Responder, name: str, version: str) -> None:
        server = self.server
        try:
            model = server.get_model(name, version)
        except InferdError as e:
            _error(resp, e, _TEXT)
            return
        if model.decoupled:
            _error(
                resp,
                UnsupportedError("HTTP end point doesn't support models with decoupled transaction policy"),
                _TEXT,
            )
            return
        try:
            hl_text = req.headers.get("inference-header-content-length")
            header_length = None
            if hl_text is not None:
                try:
                    header_length = int(hl_text)
                except ValueError:
                    raise InvalidArgumentError(
                        f"Unable to parse inference header size, got: {hl_text}"
                    ) from None
            body = _decompress(req)
            request, enc, tpl = self._headers.decode(model, version, body, header_length)
            if tpl is not None and tpl.validated:
                stream = server.submit(request, model, validated=True)
            else:
                stream = server.submit(request, model)
                if tpl is not None:
                    tpl.batch_size = request.batch_size
                    tpl.validated = True
        except InferdError as e:
            _error(resp, e, _TEXT if e.code.http_status == 400 and "header size" in e.message else _JSON)
            return
        stream.set_callback(lambda r, final: self._finish(req, resp, model, request, enc, r))

    def _finish(
        self,
        req: HttpRequest,
        resp: Responder,
        model: Model,
        request: InferRequest,
        enc: OutputEncoding,
        r: InferResponse | None,
    ) -> None:
        if r is None:
            _error(resp, InternalError("model produced no response"), _TEXT)
            return
        if r.error is not None:
            _error(resp, r.error, _TEXT)
            return
        try:
            self.server.postprocess(request, r, model)
            head, parts, hlen = encode_infer_response(r, enc)
        except InferdError as e:
            _error(resp, e)
            return
        except Exception as e:
            log.exception("encoding the response of model '%s' failed", model.name)
            _error(resp, InternalError(f"failed to encode the response: {e}"))
            return
        body: list[bytes | memoryview] = [head, *parts]
        headers: list[tuple[str, str]] = []
        if hlen >= 0:
            headers.append(("Inference-Header-Content-Length", str(hlen)))
        body, encoding = _compress(req, body)
        if encoding is not None:
            headers.append(("Content-Encoding", encoding))
        ctype = "application/octet-stream" if hlen >= 0 else _JSON
        resp.send(
            200, body if len(body) > 1 else body[0] if isinstance(body[0], bytes) else body, ctype, headers
        )
