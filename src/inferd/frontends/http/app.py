"""KServe v2 HTTP routes: decode -> ``Core.submit`` -> encode. One error mapping (``_error``)."""

from __future__ import annotations

import asyncio
import functools
import logging
import re
from collections.abc import Awaitable, Callable, Coroutine
from importlib import resources
from typing import Any

import orjson

from inferd.core.request import parse_version
from inferd.engine.facade import Core
from inferd.engine.overrides import load_parameters
from inferd.errors import InferdError, InternalError, InvalidArgumentError, UnavailableError, UnsupportedError
from inferd.frontends.access import AccessPolicy
from inferd.frontends.http.bodies import apply_log_settings, cuda_region, system_region
from inferd.frontends.http.dialect import InferDialect
from inferd.frontends.http.errors import JSON as _JSON
from inferd.frontends.http.errors import TEXT as _TEXT
from inferd.frontends.http.errors import error_body, refused, send_error
from inferd.frontends.http.generate import GenerateRoutes
from inferd.frontends.http.header_cache import HeaderCache
from inferd.frontends.http.infer_call import (
    DECOUPLED_TEXT,
    TEXT_ERRORS,
    InferCall,
    LoggedInferCall,
    content_encoding,
    inflate,
)
from inferd.frontends.http.jsonparse import parse_json
from inferd.frontends.http.openai import OpenAIRoutes
from inferd.frontends.http.openai_schema import OpenAILimits
from inferd.frontends.http.protocol import HttpRequest, Responder
from inferd.frontends.http.routes import MODEL_RE as _MODEL_RE
from inferd.frontends.http.status import PATHS as STATUS_PATHS
from inferd.frontends.http.status import serve_status
from inferd.frontends.http.trace import received, trace_settings
from inferd.frontends.inflate import OFF_LOOP_MIN, WBITS
from inferd.frontends.request_log import LoggedResponder
from inferd.logs import LogSettings, RequestLogging
from inferd.shm.cuda import CudaSharedMemoryManager
from inferd.shm.system import SharedMemoryManager
from inferd.trace import Tracing

log = logging.getLogger("inferd.http")

_SHM_RE = re.compile(r"^/v2/(system|cuda)sharedmemory(?:/region/([^/]+))?/(status|register|unregister)$")
_REPO_RE = re.compile(r"^/v2/repository(?:/([^/]+))?/(?:(index)|models/([^/]+)/(load|unload))$")
_NOT_FOUND = b'{"error":"Not Found"}'
_DIGITS = frozenset("0123456789")


def _infer_target(path: str) -> tuple[str, str] | None:
    """(model, version) of ``/v2/models/{m}[/versions/{v}]/infer`` in its plain form, as ``_MODEL_RE``
    reads it, without the regex and its match object (every request; None: any other path, which
    the regex then reads)."""
    if not path.endswith("/infer"):
        return None
    rest = path[11:-6]  # between "/v2/models/" and "/infer"
    cut = rest.find("/")
    if cut < 0:
        return (rest, "") if rest else None
    name, tail = rest[:cut], rest[cut:]
    if name and tail.startswith("/versions/"):
        version = tail[10:]
        if version and _DIGITS.issuperset(version):
            return name, version
    return None


_NOT_ALLOWED = b'{"error":"Method Not Allowed"}'
_EMPTY = b""
_NOT_READY = b'{"error":"Model version not ready"}'
#: errors of /infer that the reference answers as text/plain (the others of decoding are JSON)


_error = send_error


@functools.cache
def _openapi() -> bytes:
    """This API's OpenAPI description (``openapi.json`` beside this module), read once."""
    return resources.files("inferd.frontends.http").joinpath("openapi.json").read_bytes()


def _unload_dependents(params: dict[str, Any]) -> bool:
    value = params.get("unload_dependents", False)
    if not isinstance(value, bool):
        raise InvalidArgumentError("'unload_dependents' must be a boolean")
    return value


class HttpApp:
    """The routes of the KServe v2 HTTP protocol over one core Server."""

    def __init__(
        self,
        core: Core,
        shm: SharedMemoryManager | None = None,
        cuda_shm: CudaSharedMemoryManager | None = None,
        max_input_size: int = 1 << 26,
        access: AccessPolicy | None = None,
        logs: LogSettings | None = None,
        tracing: Tracing | None = None,
        header_forward: re.Pattern[str] | None = None,
        openai_limits: OpenAILimits = OpenAILimits(),
    ) -> None:
        self.core = core
        #: --http-header-forward-pattern: matching headers reach the model as parameters
        self.header_forward = header_forward
        self.logs = logs
        #: whether this server logs each request (its ``--log-verbose``): one attribute read per request
        self.request_log = logs.requests if logs is not None else RequestLogging()
        #: the trace extension (a server with tracing off when not given)
        self.tracing = tracing if tracing is not None else Tracing()
        self.access = access if access is not None and access.enabled else None
        self.shm = shm if shm is not None else SharedMemoryManager()
        self.cuda_shm = cuda_shm if cuda_shm is not None else CudaSharedMemoryManager()
        self.headers = HeaderCache(shm=self.shm)
        self._generate = GenerateRoutes(core)
        self._openai = OpenAIRoutes(core, self.access, max_input_size, limits=openai_limits)
        #: bytes a body may inflate to (the HTTP protocol caps the body as sent)
        self.max_input_size = max_input_size
        #: inflations under way on worker threads (owned until they end)
        self._tasks: set[asyncio.Task[None]] = set()

    def __call__(self, req: HttpRequest, resp: Responder) -> None:
        path = req.path
        if path.startswith("/v2/models/") and req.method == "POST" and self.access is None:
            target = _infer_target(path)
            if target is not None:  # inference: its one log check in _infer
                self.infer(req, resp, target[0], target[1])
                return
            m = _MODEL_RE.match(path)
            if m is not None and m.group(3) == "infer":
                self.infer(req, resp, m.group(1), m.group(2) or "")
                return
        if self.request_log.on:  # --log-verbose 1: a line per request once answered (all it costs while off)
            resp = LoggedResponder(resp, req.method, path, req.query, self.request_log.details)
        self._route(req, resp)

    def _route(self, req: HttpRequest, resp: Responder) -> None:
        path = req.path
        if self.access is not None and refused(self.access, req, resp):
            return
        if path.startswith("/v2/models/"):
            if path == "/v2/models/stats":
                self._statistics(req, resp)
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
            self._get_only(req, resp, lambda: self._health(resp, self.core.live()), _TEXT)
        elif path == "/v2/health/ready":
            self._get_only(req, resp, lambda: self._health(resp, self.core.ready()), _TEXT)
        elif path == "/v2/openapi.json":
            self._get_only(req, resp, lambda: resp.send(200, _openapi(), _JSON))
        elif path == "/v2":
            if req.method != "GET":
                resp.send(405, _NOT_ALLOWED, _JSON)
            else:
                self._json(resp, self.core.metadata())
        elif path.startswith("/v2/repository"):
            self._repository(req, resp)
        elif path == "/v2/logging":
            self._logging(req, resp)
        elif path == "/v2/trace/setting":
            self._trace_settings(req, resp, "")
        elif path.startswith(("/v2/systemsharedmemory", "/v2/cudasharedmemory")):
            self._shared_memory(req, resp)
        elif path in STATUS_PATHS and serve_status(self.core, req, resp):
            return
        elif path.startswith("/v1/"):  # the OpenAI API: its own access check and error shape
            self._openai.handle(req, resp)
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

    def _spawn(self, work: Coroutine[Any, Any, None], resp: Responder) -> None:
        """Run ``work`` (which answers its request on ``resp``) on the loop, held until it ends. A
        failure it did not expect is logged and answered 500 (a request always gets its answer;
        an answer already sent is kept)."""
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(functools.partial(self._spawned_done, resp))

    def _spawned_done(self, resp: Responder, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        e = task.exception()
        if e is not None:
            log.error("answering a request failed", exc_info=e)
            send_error(resp, InternalError(f"internal error: {type(e).__name__}"))

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
        server = self.core
        if req.method == "GET" and action in (None, "ready", "config", "stats"):
            try:
                version = parse_version(version)
            except InferdError as e:
                _error(resp, e, _TEXT if action == "ready" else _JSON)
                return
        if action is None:
            self._get_only(req, resp, lambda: self._json(resp, server.model_metadata(name, version)))
        elif action == "ready":
            if req.method != "GET":
                resp.send(405, _NOT_ALLOWED, _TEXT)
            elif not server.model_ready(name, version):
                resp.send(400, _NOT_READY, _TEXT)
            else:
                check = server.ready_check(name, version)
                if check is None:
                    resp.send(200, _EMPTY, _TEXT)
                else:  # the model's own is_ready(): bounded by engine/readiness.py
                    self._spawn(self._ready_answer(resp, check), resp)
        elif action == "config":
            self._get_only(req, resp, lambda: self._json(resp, server.model_config(name, version)))
        elif action == "stats":
            self._statistics(req, resp, name, version)
        elif action in ("generate", "generate_stream"):
            self._generate_route(req, resp, name, version, action == "generate_stream")
        elif version:  # trace/setting: a model's, never a version's
            resp.send(404, _NOT_FOUND, _TEXT)
        else:
            self._trace_settings(req, resp, name)

    def _statistics(self, req: HttpRequest, resp: Responder, name: str = "", version: str = "") -> None:
        if req.method != "GET":
            resp.send(405, _NOT_ALLOWED, _JSON)
            return
        self._spawn(self._statistics_answer(resp, name, version), resp)

    async def _statistics_answer(self, resp: Responder, name: str, version: str) -> None:
        try:
            doc = await self.core.gather_statistics(name, version)
        except InferdError as e:
            _error(resp, e)
            return
        self._json(resp, doc)

    @staticmethod
    async def _ready_answer(resp: Responder, check: Callable[[], Awaitable[bool]]) -> None:
        if await check():
            resp.send(200, _EMPTY, _TEXT)
        else:
            resp.send(400, _NOT_READY, _TEXT)

    def _trace_settings(self, req: HttpRequest, resp: Responder, model: str) -> None:
        body = lambda: inflate(req.body, content_encoding(req), self.max_input_size)  # noqa: E731
        trace_settings(self.core, self.tracing, req, resp, model, body)

    def generate(self, req: HttpRequest, resp: Responder, name: str, version: str, streaming: bool) -> None:
        """``/generate`` (``streaming``: ``/generate_stream``) of a model: 405 unless POST."""
        self._generate_route(req, resp, name, version, streaming)

    def _generate_route(
        self, req: HttpRequest, resp: Responder, name: str, version: str, streaming: bool
    ) -> None:
        if req.method != "POST":
            resp.send(405, _NOT_ALLOWED, _JSON)
            return
        self._generate.handle(req, resp, name, version, streaming)

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
            body = inflate(req.body, content_encoding(req), self.max_input_size)
            doc: Any = {}
            if body.strip():
                doc = parse_json(body)
            if index:
                ready = bool(doc.get("ready", False)) if isinstance(doc, dict) else False
                self._json(resp, self.core.repository_index(ready))
                return
            if repo:
                raise UnsupportedError("'repository_name' specification is not supported")
            params = doc.get("parameters", {}) if isinstance(doc, dict) else {}
            if not isinstance(params, dict):
                raise InvalidArgumentError("'parameters' must be a JSON object")
            if action == "load":
                config, files = load_parameters(params, base64_files=True)
                call = self.core.load_model(model, config, files)
            else:
                call = self.core.unload_model(model, _unload_dependents(params))
        except InferdError as e:
            _error(resp, e)
            return
        self._spawn(self._when_done(call, resp), resp)

    async def _when_done(self, call: Awaitable[None], resp: Responder) -> None:
        """A load, an unload or a shared-memory change: answered when it is done (it may take a while,
        or reach every --workers process; the loop serves on)."""
        try:
            await call
        except InferdError as e:
            _error(resp, e)
            return
        resp.send(200, _EMPTY, _JSON)

    # -- logging ---------------------------------------------------------------------------------
    def _logging(self, req: HttpRequest, resp: Responder) -> None:
        """The logging extension: settings applied in the reference's order (and kept up to an error)."""
        if req.method not in ("GET", "POST"):
            resp.send(405, _NOT_ALLOWED, _JSON)
            return
        logs = self.logs
        try:
            if logs is None:
                raise UnavailableError("the server does not support dynamic logging")
            if req.method == "POST":
                doc = parse_json(inflate(req.body, content_encoding(req), self.max_input_size))
                if isinstance(doc, dict):
                    try:
                        apply_log_settings(logs, doc)
                    finally:  # what was applied, up to an error, in every --workers process
                        logs.changed()
            self._json(resp, logs.settings())
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
            mgr: SharedMemoryManager | CudaSharedMemoryManager = (
                self.shm if kind == "system" else self.cuda_shm
            )
            if action == "status":
                self._json(resp, mgr.status(region))
                return
            # applied in every serving process (--workers): answered when done
            if action == "unregister":
                change = mgr.unregister_everywhere(region)
            else:
                doc = parse_json(inflate(req.body, content_encoding(req), self.max_input_size))
                change = mgr.register_everywhere(
                    region, *(system_region if kind == "system" else cuda_region)(doc)
                )
            self._spawn(self._when_done(change, resp), resp)
        except InferdError as e:
            _error(resp, e)

    # -- inference -------------------------------------------------------------------------------
    def infer(
        self, req: HttpRequest, resp: Responder, name: str, version: str, dialect: InferDialect | None = None
    ) -> None:
        """One inference request; ``dialect``: a cloud front end's reading of it (http/dialect.py)."""
        at = received(resp) if self.tracing.on else None  # all that tracing costs while it is off
        if (
            dialect is None
            and "content-encoding" in req.headers
            and content_encoding(req) in WBITS
            and len(req.body) > OFF_LOOP_MIN
        ):
            self._spawn(self._inflate_then_infer(req, resp, name, version, at), resp)
            return
        self._infer(req, resp, name, version, None, at, dialect)

    async def _inflate_then_infer(
        self, req: HttpRequest, resp: Responder, name: str, version: str, at: tuple[int, int] | None
    ) -> None:
        """A large compressed body inflates on a worker thread, so the loop keeps serving meanwhile."""
        body: bytes | InferdError
        try:
            body = await asyncio.to_thread(inflate, req.body, content_encoding(req), self.max_input_size)
        except InferdError as e:
            body = e  # raised when the body is read, after the model lookup, as inline
        if not resp.closed:
            self._infer(req, resp, name, version, body, at)

    def _infer(
        self,
        req: HttpRequest,
        resp: Responder,
        name: str,
        version: str,
        body: bytes | InferdError | None,
        at: tuple[int, int] | None = None,
        dialect: InferDialect | None = None,
    ) -> None:
        if self.request_log.on:  # --log-verbose 1: a line once answered, with the request's id
            if not isinstance(resp, LoggedResponder):  # (it is when access rules apply)
                resp = LoggedResponder(resp, req.method, req.path, req.query, self.request_log.details)
            call: InferCall = LoggedInferCall(self, req, resp, body, at, dialect)
        else:
            call = InferCall(self, req, resp, body, at, dialect)
        try:
            if version:
                call.version = version = parse_version(version)
            stream = self.core.submit(name, version, call.decode, decoupled_error=DECOUPLED_TEXT)
        except InferdError as e:
            if dialect is not None and dialect.status_of is not None:  # a multi-model invoke
                resp.send(dialect.status_of(e), error_body(e), _JSON)
            else:
                text = not call.decoding or e.message.startswith(TEXT_ERRORS)
                _error(resp, e, _TEXT if text else _JSON)
            if call.trace is not None:  # sampled, then refused: never written
                call.trace.finish()
            return
        resp.on_close = stream.cancel_on_close
        stream.set_callback(call.answer)
