"""The OpenAI-compatible API on the HTTP port: ``/v1/models``, ``/v1/embeddings``, ``/v1/completions``,
``/v1/chat/completions`` (whole, or streamed as server-sent events ending with ``data: [DONE]``).

Any model whose tensors map to the API serves it (``openai_mapping.py``): an embedder, or a text model
whose responses carry text (a decoupled one streams them as they come). Every inference goes through
``Core.submit``; a batch of texts larger than the model's ``max_batch_size`` becomes several requests.
The connection handling, limits and access rules are the HTTP API's (categories: ``metadata`` for the
model list, ``inference`` for the rest); errors are OpenAI's shape (``openai_schema.OpenAIError``). A
client that goes away cancels its requests (``ResponseStream.cancel``); so does a stop sequence, once
reached. A streamed answer starts with the first response, so a request the model refuses at once gets
its status (400, 404, 500...) rather than an error inside a 200 stream.
"""

from __future__ import annotations

import asyncio
import base64
import codecs
import contextlib
import logging
import time
import uuid
import zlib
from collections.abc import AsyncGenerator, Callable
from functools import partial
from typing import Any, cast
from urllib.parse import unquote

import numpy as np
import orjson

from inferd.core.request import InferRequest
from inferd.core.response import InferResponse, ResponseStream
from inferd.engine.facade import Core
from inferd.engine.model import Model
from inferd.errors import InferdError
from inferd.frontends.access import AccessPolicy, Category, Denial
from inferd.frontends.http.openai_mapping import EMBEDDINGS, TEXT, Mapping, mapping_for
from inferd.frontends.http.openai_schema import (
    SERVER_ERROR,
    EmbeddingsBody,
    OpenAIError,
    OpenAILimits,
    StopMatcher,
    TextBody,
    from_inferd,
    invalid,
    parse_body,
    parse_chat,
    parse_completions,
    parse_embeddings,
)
from inferd.frontends.http.protocol import HttpRequest, Responder
from inferd.frontends.inflate import WBITS, TooLarge
from inferd.frontends.inflate import inflate as bounded_inflate

log = logging.getLogger("inferd.http")

JSON = "application/json"
SSE = "text/event-stream; charset=utf-8"
_DONE = b"data: [DONE]\n\n"
_POST_ROUTES = ("/v1/embeddings", "/v1/completions", "/v1/chat/completions")


def route_category(path: str) -> Category:
    """The access category of an OpenAI route: the model list is metadata, the rest inference."""
    return Category.METADATA if path.startswith("/v1/models") else Category.INFERENCE


def send_error(resp: Responder, e: OpenAIError, headers: list[tuple[str, str]] | None = None) -> None:
    resp.send(e.status, e.body(), JSON, headers)


class OpenAIRoutes:
    """The ``/v1`` routes over one core (``HttpApp`` hands it every path under ``/v1/``)."""

    def __init__(
        self,
        core: Core,
        access: AccessPolicy | None = None,
        max_input_size: int = 1 << 26,
        clock: Callable[[], float] = time.time,
        limits: OpenAILimits = OpenAILimits(),
    ) -> None:
        self.core = core
        #: how many prompts, messages, inputs and stop sequences one request may hold
        self.limits = limits
        self.access = access if access is not None and access.enabled else None
        self.max_input_size = max_input_size
        self.clock = clock
        #: what /v1/models says of every model ("created": when the server started)
        self.started = int(clock())
        #: the pumps of open event streams (owned: a strong reference until they end)
        self._tasks: set[asyncio.Task[None]] = set()

    def handle(self, req: HttpRequest, resp: Responder) -> None:
        """Answer one request whose path starts with ``/v1/``."""
        path = req.path.rstrip("/")
        models = path == "/v1/models" or path.startswith("/v1/models/")
        try:
            if self.access is not None and (models or path in _POST_ROUTES):  # no such route: 404 for anyone
                self._check_access(req, path)
            if models:
                if req.method != "GET":
                    raise _not_allowed(req)
                if path == "/v1/models":
                    self._list_models(resp)
                else:
                    self._model(resp, unquote(path[len("/v1/models/") :]))
            elif path in _POST_ROUTES:
                if req.method != "POST":
                    raise _not_allowed(req)
                doc = parse_body(self._body(req))
                if path == "/v1/embeddings":
                    self._embeddings(resp, parse_embeddings(doc, self.limits))
                else:
                    parse = parse_chat if path == "/v1/chat/completions" else parse_completions
                    body = parse(doc, self.limits)
                    self._text(resp, body)
            else:
                raise OpenAIError(404, f"Invalid URL ({req.method} {req.path})", code="unknown_url")
        except OpenAIError as e:
            headers = [("WWW-Authenticate", 'Bearer realm="inferd"')] if e.status == 401 else None
            send_error(resp, e, headers)
        except InferdError as e:
            send_error(resp, from_inferd(e))
        except Exception:  # a bug of ours: answer, log, keep serving
            log.exception("OpenAI API: %s %s failed", req.method, req.path)
            send_error(resp, OpenAIError(500, "internal server error", SERVER_ERROR))

    # -- access and bodies -------------------------------------------------------------------------
    def _check_access(self, req: HttpRequest, path: str) -> None:
        assert self.access is not None
        category = route_category(path)
        denied = self.access.check(category, req.headers)
        if denied is None:
            return
        why, header = denied
        if why is Denial.RESTRICTED:
            raise OpenAIError(403, f"This API is restricted, expecting header '{header}'", code="restricted")
        if why is Denial.UNAUTHENTICATED:
            raise OpenAIError(
                401, "this API needs an API key: 'Authorization: Bearer <key>'", code="invalid_api_key"
            )
        raise OpenAIError(
            403, f"the API key does not grant the '{category.value}' APIs", code="insufficient_permissions"
        )

    def _body(self, req: HttpRequest) -> bytes:
        encoding = req.headers.get("content-encoding", "").strip().lower()
        if not encoding or encoding == "identity":
            return req.body
        if encoding not in WBITS:
            raise invalid(f"unsupported Content-Encoding '{encoding}' (gzip, deflate or identity)")
        try:
            body, ended = bounded_inflate(req.body, encoding, self.max_input_size)
        except zlib.error as e:
            raise invalid(f"failed to decompress the request body ({encoding}): {e}") from None
        except TooLarge:
            raise OpenAIError(
                413, f"the request body inflates to more than {self.max_input_size} bytes"
            ) from None
        if not ended:
            raise invalid(f"failed to decompress the request body ({encoding}): the data ends early")
        return body

    # -- models -----------------------------------------------------------------------------------
    def _model_doc(self, name: str) -> dict[str, Any]:
        return {"id": name, "object": "model", "created": self.started, "owned_by": "inferd"}

    def _list_models(self, resp: Responder) -> None:
        names = sorted({m["name"] for m in self.core.repository_index(True) if m.get("state") == "READY"})
        doc = {"object": "list", "data": [self._model_doc(n) for n in names]}
        resp.send(200, orjson.dumps(doc), JSON)

    def _model(self, resp: Responder, name: str) -> None:
        if not self.core.model_ready(name):
            raise OpenAIError(
                404,
                f"The model '{name}' does not exist or is not ready",
                param="model",
                code="model_not_found",
            )
        resp.send(200, orjson.dumps(self._model_doc(name)), JSON)

    # -- embeddings -------------------------------------------------------------------------------
    def _embeddings(self, resp: Responder, body: EmbeddingsBody) -> None:
        m = mapping_for(self.core.get_model(body.model), EMBEDDINGS)
        if body.dimensions is not None and m.dimensions is not None and body.dimensions != m.dimensions:
            raise _dimensions(body, m.dimensions)
        texts = body.texts
        step = m.max_texts or len(texts)
        parts = [texts[i : i + step] for i in range(0, len(texts), step)]
        gather = _Embeddings(resp, body, m, [len(p) for p in parts])
        for i, part in enumerate(parts):
            try:
                stream = self.core.submit(body.model, "", partial(_decode, EMBEDDINGS, part, None))
            except BaseException:  # answered by handle(): the parts queued already are let go
                gather.done = True
                gather.cancel()
                raise
            gather.streams.append(stream)
            stream.set_callback(_guarded(partial(gather.on_response, i), resp, gather.streams))
        resp.on_close = gather.cancel

    # -- completions and chat ---------------------------------------------------------------------
    def _text(self, resp: Responder, body: TextBody) -> None:
        mapping = mapping_for(self.core.get_model(body.model), TEXT)  # refused before anything is queued
        streams: list[ResponseStream] = []
        for prompt in body.prompts:
            try:
                streams.append(
                    self.core.submit(body.model, "", partial(_decode, TEXT, [prompt], body.parameters))
                )
            except BaseException:
                for s in streams:
                    s.cancel("an earlier prompt of the request was refused")
                raise
        answer = _Answer(body, mapping, self.clock())
        if body.stream:
            task = asyncio.get_running_loop().create_task(_pump(answer, streams, resp))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            resp.on_close = partial(_cancel_all, streams, task)
        else:
            collect = _Collect(answer, streams, resp)
            for i, s in enumerate(streams):
                s.set_callback(_guarded(partial(collect.on_response, i), resp, streams))
            resp.on_close = partial(_cancel_all, streams, None)


def _not_allowed(req: HttpRequest) -> OpenAIError:
    return OpenAIError(405, f"Method {req.method} is not allowed for {req.path}", code="method_not_allowed")


def _dimensions(body: EmbeddingsBody, size: int) -> OpenAIError:
    return invalid(
        f"model '{body.model}' makes {size}-dimensional embeddings and cannot honour dimensions={body.dimensions}",
        "dimensions",
    )


def _decode(task: str, texts: list[str], parameters: dict[str, Any] | None, model: Model) -> InferRequest:
    """The core's decoder: the request for ``texts`` as this model version maps them."""
    return mapping_for(model, task).request(model, texts, parameters)


Callback = Callable[[InferResponse | None, bool], None]


def _guarded(callback: Callback, resp: Responder, streams: list[ResponseStream]) -> Callback:
    """``callback`` for a stream, answering 500 (and logging) should it raise: a bug of ours must not
    leave the client waiting."""

    def call(r: InferResponse | None, final: bool) -> None:
        try:
            callback(r, final)
        except Exception:
            log.exception("answering an OpenAI API request failed")
            _cancel_open(streams, "the server failed to answer")
            send_error(resp, OpenAIError(500, "internal server error", SERVER_ERROR))

    return call


def _cancel_open(streams: list[ResponseStream], reason: str) -> None:
    """Cancel the requests of ``streams`` that have not ended."""
    for s in streams:
        if not s.done:
            s.cancel(reason)


def _cancel_all(streams: list[ResponseStream], task: asyncio.Task[None] | None) -> None:
    """The client went away: cancel every request of its answer (and stop pumping events)."""
    for s in streams:
        s.cancel_on_close()
    if task is not None:
        task.cancel()


class _Embeddings:
    """Gathers the embeddings of one request's parts; answers once every part answered (or one failed)."""

    __slots__ = ("body", "counts", "done", "mapping", "resp", "results", "streams", "tokens")

    def __init__(self, resp: Responder, body: EmbeddingsBody, mapping: Mapping, counts: list[int]) -> None:
        self.resp = resp
        self.body = body
        self.mapping = mapping
        self.counts = counts
        self.streams: list[ResponseStream] = []
        self.results: list[np.ndarray[Any, Any] | None] = [None] * len(counts)
        self.tokens = 0
        self.done = False

    def cancel(self) -> None:
        for s in self.streams:
            s.cancel_on_close()

    def fail(self, e: OpenAIError) -> None:
        if not self.done:
            self.done = True
            _cancel_open(self.streams, "another part of the request failed")
            send_error(self.resp, e)

    def on_response(self, i: int, r: InferResponse | None, final: bool) -> None:
        if self.done:
            return
        try:
            if r is not None and self.results[i] is None:
                if r.error is not None:
                    raise from_inferd(r.error)
                self.results[i] = self.mapping.embeddings(r, self.counts[i])
                self.tokens += self.mapping.count(r, self.mapping.prompt_tokens) or 0
            if final and self.results[i] is None:
                raise OpenAIError(500, f"model '{self.body.model}' produced no response", SERVER_ERROR)
        except OpenAIError as e:
            self.fail(e)
            return
        if all(x is not None for x in self.results):
            self.done = True
            self._answer()

    def _answer(self) -> None:
        rows = np.concatenate(cast(list[np.ndarray[Any, Any]], self.results))
        body = self.body
        if body.dimensions is not None and rows.shape[1] != body.dimensions:
            send_error(self.resp, _dimensions(body, rows.shape[1]))
            return
        data: list[dict[str, Any]] = []
        for i, row in enumerate(rows):
            emb: Any = base64.b64encode(row.tobytes()).decode("ascii") if body.base64 else row
            data.append({"object": "embedding", "index": i, "embedding": emb})
        doc = {
            "object": "list",
            "data": data,
            "model": body.model,
            "usage": {"prompt_tokens": self.tokens, "total_tokens": self.tokens},
        }
        self.resp.send(200, orjson.dumps(doc, option=orjson.OPT_SERIALIZE_NUMPY), JSON)


class _Choice:
    """One prompt's text as its responses come: UTF-8 decoded across pieces, cut at a stop sequence,
    with the usage and finish reason the model reported last."""

    __slots__ = ("completion_tokens", "decoder", "finish", "mapping", "matcher", "prompt_tokens", "stopped")

    def __init__(self, mapping: Mapping, stop: list[str]) -> None:
        self.mapping = mapping
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.matcher = StopMatcher(stop)
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.finish: str | None = None
        self.stopped = False

    def take(self, r: InferResponse) -> str:
        """The text of ``r`` that may go out now."""
        m = self.mapping
        pt, ct = m.count(r, m.prompt_tokens), m.count(r, m.completion_tokens)
        if pt is not None:
            self.prompt_tokens = pt
        if ct is not None:
            self.completion_tokens = ct
        finish = m.finish(r)
        if finish:
            self.finish = finish
        out, self.stopped = self.matcher.feed(self.decoder.decode(m.text(r)))
        return out

    def end(self) -> str:
        """What was held back, once the model's responses ended."""
        out, stopped = self.matcher.feed(self.decoder.decode(b"", True))
        if stopped:
            self.stopped = True
            return out
        return out + self.matcher.flush()

    @property
    def finish_reason(self) -> str:
        return "stop" if self.stopped else self.finish or "stop"


class _Answer:
    """What every chunk or answer of one text request shares: its id, time, model and kind."""

    __slots__ = ("body", "created", "id", "mapping", "object")

    def __init__(self, body: TextBody, mapping: Mapping, now: float) -> None:
        self.body = body
        self.mapping = mapping
        self.created = int(now)
        self.id = ("chatcmpl-" if body.chat else "cmpl-") + uuid.uuid4().hex
        self.object = "chat.completion" if body.chat else "text_completion"

    def doc(self, choices: list[dict[str, Any]], chunk: bool = False) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": self.object + ".chunk" if chunk and self.body.chat else self.object,
            "created": self.created,
            "model": self.body.model,
            "system_fingerprint": None,
            "choices": choices,
        }

    def choice(self, index: int, text: str, finish: str | None, role: bool = False) -> dict[str, Any]:
        """A choice of a whole answer (``finish`` set) or of a chunk (``delta`` for chat)."""
        if not self.body.chat:
            return {"index": index, "text": text, "logprobs": None, "finish_reason": finish}
        return {
            "index": index,
            "delta": ({"role": "assistant", "content": text} if role else {"content": text} if text else {}),
            "logprobs": None,
            "finish_reason": finish,
        }

    def event(self, index: int, text: str, finish: str | None = None, role: bool = False) -> bytes:
        return b"data: " + orjson.dumps(self.doc([self.choice(index, text, finish, role)], True)) + b"\n\n"


def _usage(choices: list[_Choice]) -> dict[str, int]:
    prompt = sum(c.prompt_tokens for c in choices)
    completion = sum(c.completion_tokens for c in choices)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


class _Collect:
    """A whole (non-streamed) completion: the text of each prompt, answered once all ended."""

    __slots__ = ("answer", "choices", "done", "ended", "resp", "streams", "texts")

    def __init__(self, answer: _Answer, streams: list[ResponseStream], resp: Responder) -> None:
        self.answer = answer
        self.streams = streams
        self.resp = resp
        self.choices = [_Choice(answer.mapping, answer.body.stop) for _ in streams]
        self.texts: list[list[str]] = [[] for _ in streams]
        self.ended = [False] * len(streams)
        self.done = False

    def on_response(self, i: int, r: InferResponse | None, final: bool) -> None:
        if self.done or self.ended[i]:
            return
        choice = self.choices[i]
        if r is not None:
            if r.error is not None:
                self.done = True
                _cancel_open(self.streams, "another prompt of the request failed")
                send_error(self.resp, from_inferd(r.error))
                return
            self.texts[i].append(choice.take(r))
            if choice.stopped:
                self.streams[i].cancel("a stop sequence was reached")
                final = True
        if not final:
            return
        self.texts[i].append(choice.end())
        self.ended[i] = True
        if not all(self.ended):
            return
        self.done = True
        a = self.answer
        if a.body.chat:
            choices = [
                {
                    "index": i,
                    "message": {"role": "assistant", "content": "".join(t)},
                    "logprobs": None,
                    "finish_reason": c.finish_reason,
                }
                for i, (c, t) in enumerate(zip(self.choices, self.texts, strict=True))
            ]
        else:
            choices = [
                a.choice(i, "".join(t), c.finish_reason)
                for i, (c, t) in enumerate(zip(self.choices, self.texts, strict=True))
            ]
        doc = a.doc(choices)
        doc["usage"] = _usage(self.choices)
        self.resp.send(200, orjson.dumps(doc), JSON)


async def _pump(answer: _Answer, streams: list[ResponseStream], resp: Responder) -> None:
    """A streamed completion: each prompt's responses as chunks, in order of the prompts, then the
    usage chunk (``stream_options.include_usage``) and ``[DONE]``. While the client reads slower than
    the model writes, responses wait in their stream, not encoded."""
    try:
        await _events(answer, streams, resp)
    except Exception:  # a bug of ours: answer, log, keep serving
        log.exception("streaming an OpenAI completion failed")
        _cancel_open(streams, "the server failed to stream the answer")
        send_error(resp, OpenAIError(500, "internal server error", SERVER_ERROR))
        resp.end_chunked()


async def _events(answer: _Answer, streams: list[ResponseStream], resp: Responder) -> None:
    chat = answer.body.chat
    started = False
    choices: list[_Choice] = []
    for index, stream in enumerate(streams):
        choice = _Choice(answer.mapping, answer.body.stop)
        choices.append(choice)
        role_sent = False
        responses = cast(AsyncGenerator[tuple[InferResponse | None, bool], None], stream.__aiter__())
        async with contextlib.aclosing(responses):
            async for r, final in responses:
                if r is not None:
                    if r.error is not None:
                        _cancel_open(streams, "another prompt of the request failed")
                        e = from_inferd(r.error)
                        if not started:
                            send_error(resp, e)
                        else:  # the status went out already: an error event ends the stream
                            resp.write_chunk(b"data: " + e.body() + b"\n\n")
                            resp.end_chunked()
                        return
                    text = choice.take(r)
                    if not started:
                        resp.start_chunked(200, SSE, [("Cache-Control", "no-cache")])
                        started = True
                    if chat and not role_sent:
                        resp.write_chunk(answer.event(index, "", role=True))
                        role_sent = True
                    if text:
                        resp.write_chunk(answer.event(index, text))
                    if choice.stopped:
                        stream.cancel("a stop sequence was reached")
                        break
                if final:
                    break
                if resp.must_wait:
                    await resp.drain()
                    if resp.closed:
                        return
        tail = "" if choice.stopped else choice.end()
        if not started:
            resp.start_chunked(200, SSE, [("Cache-Control", "no-cache")])
            started = True
        if chat and not role_sent:
            resp.write_chunk(answer.event(index, "", role=True))
        if tail:
            resp.write_chunk(answer.event(index, tail))
        resp.write_chunk(answer.event(index, "", choice.finish_reason))
    if answer.body.include_usage:
        doc = answer.doc([], True)
        doc["usage"] = _usage(choices)
        resp.write_chunk(b"data: " + orjson.dumps(doc) + b"\n\n")
    resp.write_chunk(_DONE)
    resp.end_chunked()
