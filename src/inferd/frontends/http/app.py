"""KServe v2 HTTP routes: decode -> core Server -> encode. One error mapping (``_error``)."""

from __future__ import annotations

import base64
import binascii
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
from inferd.frontends.http.codec import HeaderCache, OutputEncoding, encode_infer_response, parse_json
from inferd.frontends.http.generate import GenerateRoutes
from inferd.frontends.http.protocol import HttpRequest, Responder
from inferd.shm.system import CudaSharedMemoryManager, SharedMemoryManager

log = logging.getLogger("inferd.http")

_MODEL_RE = re.compile(
    r"^/v2/models/([^/]+)(?:/versions/([0-9]+))?(?:/(infer|generate|generate_stream|ready|config|stats|trace/setting))?$"
)
_SHM_RE = re.compile(r"^/v2/(system|cuda)sharedmemory(?:/region/([^/]+))?/(status|register|unregister)$")
_REPO_RE = re.compile(r"^/v2/repository(?:/([^/]+))?/(?:(index)|models/([^/]+)/(load|unload))$")
_JSON = "application/json"
_TEXT = "text/plain"
_NOT_FOUND = b'{"error":"Not Found"}'
_NOT_ALLOWED = b'{"error":"Method Not Allowed"}'
_EMPTY = b""
_LEADING_INT = re.compile(r"\s*([+-]?[0-9]+)")
#: errors of /infer that the reference answers as text/plain (the others of decoding are JSON)
_TEXT_ERRORS = ("inference header size should be", "Unsupported compression type", "incomplete string data")
_MAX_VERSION = 2**63 - 1


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
    raise UnsupportedError("Unsupported compression type")


def _header_length(text: str) -> int:
    """Inference-Header-Content-Length as Triton reads it (atoi: leading digits, else 0)."""
    m = _LEADING_INT.match(text)
    return int(m.group(1)) if m else 0


def _version_error(version: str) -> InferdError | None:
    """A version path segment too large for an int64, as Triton refuses it."""
    if version and len(version) > 18 and int(version) > _MAX_VERSION:
        return InvalidArgumentError(
            f"failed to get model version from specified version string '{version}' (details: stol), "
            "version should be an integral value > 0"
        )
    return None


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

    def __init__(
        self,
        server: Server,
        shm: SharedMemoryManager | None = None,
        cuda_shm: CudaSharedMemoryManager | None = None,
    ) -> None:
        self.server = server
        self.shm = shm if shm is not None else SharedMemoryManager()
        self.cuda_shm = cuda_shm if cuda_shm is not None else CudaSharedMemoryManager()
        self._headers = HeaderCache(shm=self.shm)
        self._generate = GenerateRoutes(server)

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
            self._get_only(req, resp, lambda: self._health(resp, self.server.live()), _TEXT)
        elif path == "/v2/health/ready":
            self._get_only(req, resp, lambda: self._health(resp, self.server.ready()), _TEXT)
        elif path == "/v2":
            if req.method != "GET":
                resp.send(405, _NOT_ALLOWED, _JSON)
            else:
                self._json(resp, self.server.metadata())
        elif path.startswith("/v2/repository"):
            self._repository(req, resp)
        elif path.startswith(("/v2/systemsharedmemory", "/v2/cudasharedmemory")):
            self._shared_memory(req, resp)
        else:
            resp.send(404, _NOT_FOUND, _TEXT)

    # -- helpers ---------------------------------------------------------------------------------
    @staticmethod
    def _get_only(req: HttpRequest, resp: Responder, fn: Any, not_allowed_type: str = _JSON) -> None:
        if req.method != "GET":
            resp.send(405, _NOT_ALLOWED, not_allowed_type)
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
        bad_version = _version_error(version)
        if bad_version is not None and req.method == "GET" and action in (None, "ready", "config", "stats"):
            _error(resp, bad_version, _TEXT if action == "ready" else _JSON)
            return
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
        elif action in ("generate", "generate_stream"):
            self._generate_route(req, resp, name, version, action == "generate_stream")
        else:  # trace/setting: not served yet
            resp.send(404, _NOT_FOUND, _TEXT)

    def _generate_route(
        self, req: HttpRequest, resp: Responder, name: str, version: str, streaming: bool
    ) -> None:
        if req.method != "POST":
            resp.send(405, _NOT_ALLOWED, _JSON)
            return
        try:
            bad_version = _version_error(version)
            if bad_version is not None:
                raise bad_version
            model = self.server.get_model(name, version)
        except InferdError as e:
            _error(resp, e)
            return
        self._generate.handle(req, resp, model, version, streaming)

    def _repository(self, req: HttpRequest, resp: Responder) -> None:
        m = _REPO_RE.match(req.path)
        if m is None:
            resp.send(404, _NOT_FOUND, _TEXT)
            return
        if req.method != "POST":
            resp.send(405, _NOT_ALLOWED, _JSON)
            return
        repo, index, model, action = m.groups()
        try:
            body = _decompress(req)
            doc: Any = {}
            if body.strip():
                doc = parse_json(body)
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

    # -- shared memory ---------------------------------------------------------------------------
    def _shared_memory(self, req: HttpRequest, resp: Responder) -> None:
        m = _SHM_RE.match(req.path)
        if m is None:
            resp.send(404, _NOT_FOUND, _TEXT)
            return
        kind, region, action = m.group(1), m.group(2) or "", m.group(3)
        if (action == "status") != (req.method == "GET") or req.method not in ("GET", "POST"):
            resp.send(405, _NOT_ALLOWED, _TEXT)
            return
        if action == "register" and not region:
            resp.send(404, _NOT_FOUND, _TEXT)
            return
        try:
            if action == "status":
                mgr: SharedMemoryManager | CudaSharedMemoryManager = (
                    self.shm if kind == "system" else self.cuda_shm
                )
                self._json(resp, mgr.status(region))
                return
            if action == "unregister":
                (self.shm if kind == "system" else self.cuda_shm).unregister(region)
            else:
                doc = parse_json(_decompress(req))
                if kind == "system":
                    self._register_system(region, doc)
                else:
                    self._register_cuda(region, doc)
            resp.send(200, _EMPTY, _JSON)
        except InferdError as e:
            _error(resp, e)

    def _register_system(self, region: str, doc: Any) -> None:
        if not isinstance(doc, dict):
            raise InternalError("attempt to access JSON non-object as object")
        if "byte_size" not in doc:  # the reference asks for byte_size first
            raise InvalidArgumentError("Shared memory register request has no 'byte_size' field")
        if "key" not in doc:
            raise InvalidArgumentError("Shared memory register request has no 'key' field")
        key, offset, size = doc["key"], doc.get("offset", 0), doc["byte_size"]
        if not isinstance(key, str):
            raise InternalError("attempt to access JSON non-string as string")
        for v in (offset, size):
            if type(v) is not int or v < 0:
                raise InternalError("attempt to access JSON non-unsigned-integer as unsigned-integer")
        self.shm.register(region, key, offset, size)

    def _register_cuda(self, region: str, doc: Any) -> None:
        if not isinstance(doc, dict):
            raise InternalError("attempt to access JSON non-object as object")
        handle = doc.get("raw_handle")
        b64 = handle.get("b64") if isinstance(handle, dict) else None
        if not isinstance(b64, str):
            raise InvalidArgumentError("Shared memory register request has no 'raw_handle' field")
        try:
            raw = base64.b64decode(b64, validate=True)
        except (binascii.Error, ValueError):
            raw = b""
        device, size = doc.get("device_id", 0), doc.get("byte_size", 0)
        for v in (device, size):
            if type(v) is not int or v < 0:
                raise InternalError("attempt to access JSON non-unsigned-integer as unsigned-integer")
        self.cuda_shm.register(region, raw, device, size)

    # -- inference -------------------------------------------------------------------------------
    def infer(self, req: HttpRequest, resp: Responder, name: str, version: str) -> None:
        server = self.server
        try:
            bad_version = _version_error(version)
            if bad_version is not None:
                raise bad_version
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
            header_length = None if hl_text is None else _header_length(hl_text)
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
            _error(resp, e, _TEXT if e.message.startswith(_TEXT_ERRORS) else _JSON)
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
            head, parts, hlen = encode_infer_response(r, enc, request)
        except InferdError as e:
            _error(resp, e, _TEXT)  # after the model ran, as the reference answers its errors
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
