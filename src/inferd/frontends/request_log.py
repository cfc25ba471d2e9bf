"""One log line per request at ``--log-verbose 1`` and up (issue 28), written once it is answered.

The reference's level 1 shows each HTTP request's method and path as it arrives (``HTTP request: 2
/v2/models/add_sub/infer``, the method as its enum) and its gRPC handlers' steps. Here one line says
what the request was and how it ended:

    HTTP request: POST /v2/models/add_sub/infer 200 0.412 ms model=add_sub id=req-8
    gRPC request: ModelInfer OK 0.210 ms model=add_sub id=g-1

The status is the HTTP code or the gRPC status name; the latency runs from the request's first bytes
(HTTP) or its message (gRPC) to its answer; ``model`` and ``id`` when the request names them (``id``
last: a client's text, up to the end of the line). A request whose client went away first ends with
``client gone``. Level 2 also logs each request as it arrives (``HTTP request received: POST
/v2/models/add_sub/infer?q=1``, ``gRPC call received: /inference.GRPCInferenceService/ModelInfer``).

The front ends ask their server's ``LogSettings.requests.on`` once per request and take these
wrappers only when it is on (``details``: its ``requests.details``, level 2): nothing here runs while
it is off.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from inferd.frontends.http.routes import MODEL_RE
from inferd.logs import VERBOSE1, VERBOSE2

http_log = logging.getLogger("inferd.http")
grpc_log = logging.getLogger("inferd.grpc")
GRPC_SERVICE = "inference.GRPCInferenceService"
T = TypeVar("T")


class RequestLine:
    """What one request's line says; ``write`` logs it, once."""

    __slots__ = ("done", "kind", "logger", "model", "request_id", "start", "what")

    def __init__(self, logger: logging.Logger, kind: str, what: str, start: float | None = None) -> None:
        self.logger = logger
        self.kind = kind
        self.what = what
        self.start = time.monotonic() if start is None else start
        self.model = ""
        self.request_id = ""
        self.done = False

    def write(self, status: str) -> None:
        if self.done:
            return
        self.done = True
        ms = (time.monotonic() - self.start) * 1e3
        text = f"{self.kind} request: {self.what} {status} {ms:.3f} ms"
        if self.model:
            text += f" model={self.model}"
        if self.request_id:
            text += f" id={self.request_id}"
        self.logger.log(VERBOSE1, "%s", text)


# -- HTTP --------------------------------------------------------------------------------------------
class LoggedResponder:
    """An HTTP request's responder (``protocol.Responder``, or one that wraps it) that writes the
    request's line once its answer went out: ``send``, or the end of a chunked answer."""

    __slots__ = ("_conn", "_resp", "_status", "line")

    def __init__(self, resp: Any, method: str, path: str, query: str, details: bool = False) -> None:
        self._resp = resp
        self._conn = conn = getattr(resp, "_conn", None)  # the trace's HTTP_RECV_START reads it
        since = getattr(conn, "reading_since", None)  # the request's first bytes, while it is handled
        self.line = line = RequestLine(http_log, "HTTP", f"{method} {path}", since)
        m = MODEL_RE.match(path)
        if m is not None:
            line.model = m.group(1)
        self._status = 0
        if details:
            http_log.log(
                VERBOSE2, "HTTP request received: %s %s%s", method, path, f"?{query}" if query else ""
            )

    def send(
        self,
        status: int,
        body: Any,
        content_type: str = "application/json",
        extra_headers: Any = None,
    ) -> None:
        self._resp.send(status, body, content_type, extra_headers)
        self.line.write(str(status))

    def start_chunked(self, status: int, content_type: str, extra_headers: Any = None) -> None:
        self._status = status
        self._resp.start_chunked(status, content_type, extra_headers)

    def write_chunk(self, data: bytes) -> None:
        self._resp.write_chunk(data)

    def end_chunked(self) -> None:
        self._resp.end_chunked()
        self.line.write(str(self._status))

    @property
    def closed(self) -> bool:
        return bool(self._resp.closed)

    @property
    def must_wait(self) -> bool:
        return bool(self._resp.must_wait)

    async def drain(self) -> None:
        await self._resp.drain()

    @property
    def on_close(self) -> Callable[[], None] | None:
        return self._resp.on_close  # type: ignore[no-any-return]

    @on_close.setter
    def on_close(self, cb: Callable[[], None] | None) -> None:
        """What the connection calls when its client went away before the answer: the line too."""
        if cb is None:
            self._resp.on_close = None
            return
        line = self.line

        def gone() -> None:
            line.write("client gone")
            cb()

        self._resp.on_close = gone


# -- gRPC --------------------------------------------------------------------------------------------
def _infer_fields(payload: bytes) -> tuple[str, str]:
    """The model and request id a ModelInferRequest names ("" where it cannot be read)."""
    from inferd.frontends.grpc._pb import pb

    try:
        msg = pb.ModelInferRequest.FromString(payload)
    except Exception:
        return "", ""
    model = msg.model_name + (f":{msg.model_version}" if msg.model_version else "")
    return model, msg.id


def grpc_line(rpc: str, service: str = GRPC_SERVICE, details: bool = False) -> RequestLine:
    """The line of a gRPC call of ``rpc`` (with level 2's arrival line when ``details``)."""
    if details:
        grpc_log.log(VERBOSE2, "gRPC call received: /%s/%s", service, rpc)
    return RequestLine(grpc_log, "gRPC", rpc)


def _status_name(e: BaseException) -> str:
    """The gRPC status a call failed with (``RpcError``'s; any other exception: INTERNAL)."""
    code = getattr(e, "code", None)
    return str(getattr(code, "name", "INTERNAL"))


async def logged_unary(rpc: str, answer: Awaitable[T], details: bool = False) -> T:
    """A unary call awaited, its line written once it answered or failed."""
    line = grpc_line(rpc, details=details)
    try:
        out = await answer
    except asyncio.CancelledError:
        line.write("CANCELLED")
        raise
    except Exception as e:
        line.write(_status_name(e))
        raise
    line.write("OK")
    return out


def logged_health_check(
    check: Callable[[bytes, Any], bytes], payload: bytes, metadata: Any, details: bool = False
) -> bytes:
    """``grpc.health.v1.Health/Check`` called, its line written."""
    line = grpc_line("Check", "grpc.health.v1.Health", details)
    try:
        out = check(payload, metadata)
    except Exception as e:
        line.write(_status_name(e))
        raise
    line.write("OK")
    return out


def logged_model_infer(
    payload: bytes, answer: Callable[[bytes], None], fail: Callable[[Any], None], details: bool = False
) -> tuple[Callable[[bytes], None], Callable[[Any], None]]:
    """ModelInfer's callbacks, each writing the call's line after it answered."""
    line = grpc_line("ModelInfer", details=details)
    line.model, line.request_id = _infer_fields(payload)

    def answered(body: bytes) -> None:
        answer(body)
        line.write("OK")

    def failed(error: Any) -> None:
        fail(error)
        line.write(error.code.name)

    return answered, failed


def logged_stream_request(
    model: str, version: str, request_id: str, callback: Callable[[Any, bool], None]
) -> Callable[[Any, bool], None]:
    """A ModelStreamInfer request's response callback, writing its line after its final response."""
    line = RequestLine(grpc_log, "gRPC", "ModelStreamInfer")
    line.model = model + (f":{version}" if version else "")
    line.request_id = request_id
    status = ["OK"]

    def on_response(r: Any, final: bool) -> None:
        if r is not None and r.error is not None:
            status[0] = r.error.code.grpc_status_name
        callback(r, final)
        if final:
            line.write(status[0])

    return on_response
