"""The /v1 routes over a fake core (frontends/http/openai.py): what reaches the core, the answers whole and
streamed, errors in OpenAI's shape, cancellation, access control."""

from __future__ import annotations

import asyncio
import base64
import gzip
import json
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from http_wire import Answer, Client, request
from test_openai_mapping import ADD_SUB, EMBEDDER, WRITER

from inferd.core.request import InferRequest
from inferd.core.response import InferResponse, ResponseStream
from inferd.core.tensor import Tensor
from inferd.errors import InternalError, InvalidArgumentError
from inferd.frontends.access import AccessPolicy, Category, parse_restrictions
from inferd.frontends.http.app import HttpApp
from inferd.frontends.http.openai import SSE, _Answer, _pump
from inferd.frontends.http.openai_mapping import TEXT, mapping_for
from inferd.frontends.http.openai_schema import parse_completions

WAIT_ROUNDS = 10_000  # loop turns a test lets pass for an answer (no sleeps: the fake core answers at once)


def vector(text: bytes) -> list[float]:
    """The fake embedder's embedding of ``text``."""
    return [float(len(text)), float(text[:1] == b"b"), 0.5]


def embed(request: InferRequest) -> InferResponse:
    rows = request.inputs["TEXT"].array.reshape(-1)
    emb = np.array([vector(t) for t in rows], dtype=np.float32)
    return InferResponse(request.model_name, "1", request.id, [Tensor.from_array("EMB", emb)])


@pytest.fixture
def core(make_core: Callable[..., Any]) -> Any:
    c = make_core(EMBEDDER, WRITER, ADD_SUB)
    c.answer = embed
    return c


class Session:
    """One client connection to an HttpApp over ``core``, driven on a running loop."""

    def __init__(self, core: Any, access: AccessPolicy | None = None) -> None:
        self.client = Client(HttpApp(core, access=access))

    async def ask(
        self, method: str, path: str, body: Any = b"", headers: dict[str, str] | None = None, n: int = 1
    ) -> list[Answer]:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.client.send(request(method, path, raw, headers))
        return await self.answers(n)

    async def answers(self, n: int = 1) -> list[Answer]:
        """Lets the loop run until ``n`` whole answers were written (fails after WAIT_ROUNDS turns)."""
        for _ in range(WAIT_ROUNDS):
            got = await self.client.answers(1)
            if len(got) >= n:
                return got
        raise AssertionError(f"fewer than {n} answers: {bytes(self.client.transport.data)[:500]!r}")


def run(core: Any, method: str, path: str, body: Any = b"", headers: dict[str, str] | None = None) -> Answer:
    async def main() -> Answer:
        return (await Session(core).ask(method, path, body, headers))[0]

    return asyncio.run(main())


def error(a: Answer) -> dict[str, Any]:
    doc = json.loads(a.body)
    assert set(doc) == {"error"} and set(doc["error"]) == {"message", "type", "param", "code"}, doc
    assert a.headers["content-type"] == "application/json"
    err: dict[str, Any] = doc["error"]
    return err


def events(body: bytes) -> list[Any]:
    out: list[Any] = []
    assert body.endswith(b"\n\n"), body
    for block in body.split(b"\n\n")[:-1]:
        assert block.startswith(b"data: "), block
        data = block[6:]
        out.append("[DONE]" if data == b"[DONE]" else json.loads(data))
    return out


# -- models -------------------------------------------------------------------------------------------
def test_models_lists_and_retrieves_the_ready_models(core: Any) -> None:
    a = run(core, "GET", "/v1/models")
    assert a.status == 200
    doc = json.loads(a.body)
    assert doc["object"] == "list"
    assert [m["id"] for m in doc["data"]] == ["add_sub", "embedder", "writer"]
    assert {m["object"] for m in doc["data"]} == {"model"} and {m["owned_by"] for m in doc["data"]} == {
        "inferd"
    }
    one = json.loads(run(core, "GET", "/v1/models/writer").body)
    assert one["id"] == "writer" and one["object"] == "model"
    a = run(core, "GET", "/v1/models/nope")
    assert a.status == 404 and error(a)["code"] == "model_not_found"
    a = run(core, "POST", "/v1/models")
    assert a.status == 405 and error(a)["code"] == "method_not_allowed"
    a = run(core, "GET", "/v1/embeddings")
    assert a.status == 405
    a = run(core, "GET", "/v1/files")
    assert a.status == 404 and error(a)["message"] == "Invalid URL (GET /v1/files)"
    assert core.calls == []  # nothing reached the scheduler


# -- embeddings ---------------------------------------------------------------------------------------
def test_embeddings_float_and_base64(core: Any) -> None:
    texts = ["a", "bb", "ccc"]
    a = run(core, "POST", "/v1/embeddings", {"model": "embedder", "input": texts, "encoding_format": "float"})
    assert a.status == 200, a.body
    doc = json.loads(a.body)
    assert doc["object"] == "list" and doc["model"] == "embedder"
    assert doc["usage"] == {"prompt_tokens": 0, "total_tokens": 0}
    assert [d["index"] for d in doc["data"]] == [0, 1, 2] and {d["object"] for d in doc["data"]} == {
        "embedding"
    }
    assert [d["embedding"] for d in doc["data"]] == [vector(t.encode()) for t in texts]
    b64 = json.loads(
        run(
            core, "POST", "/v1/embeddings", {"model": "embedder", "input": "bb", "encoding_format": "base64"}
        ).body
    )
    raw = base64.b64decode(b64["data"][0]["embedding"])
    assert np.frombuffer(raw, "<f4").tolist() == vector(b"bb")
    (name, version, decoupled_error) = core.calls[0]
    assert (name, version, decoupled_error) == ("embedder", "", None)
    assert core.requests[0].inputs["TEXT"].shape == (3, 1)


def test_a_batch_over_max_batch_size_goes_as_several_requests_in_order(core: Any) -> None:
    texts = [f"t{i}" * (i + 1) for i in range(10)]
    a = run(core, "POST", "/v1/embeddings", {"model": "embedder", "input": texts, "encoding_format": "float"})
    data = json.loads(a.body)["data"]
    assert [d["embedding"][0] for d in data] == [float(len(t)) for t in texts]
    assert [r.inputs["TEXT"].shape for r in core.requests] == [(4, 1), (4, 1), (2, 1)]


def test_embeddings_errors(core: Any) -> None:
    a = run(core, "POST", "/v1/embeddings", {"model": "nope", "input": "x"})
    assert a.status == 404 and error(a) == {
        "message": "Request for unknown model: 'nope' is not found",
        "type": "invalid_request_error",
        "param": "model",
        "code": "model_not_found",
    }
    a = run(core, "POST", "/v1/embeddings", {"model": "writer", "input": "x"})
    assert a.status == 400 and error(a)["code"] == "wrong_model_type"
    a = run(core, "POST", "/v1/embeddings", {"model": "add_sub", "input": "x"})
    assert a.status == 400 and error(a)["code"] == "model_not_supported"
    a = run(core, "POST", "/v1/embeddings", {"model": "embedder", "input": "x", "dimensions": 2})
    assert a.status == 400 and error(a)["param"] == "dimensions"
    assert "makes 3-dimensional embeddings and cannot honour dimensions=2" in error(a)["message"]
    a = run(core, "POST", "/v1/embeddings", b'{"model": "embedder", "input": ')
    assert a.status == 400 and "not valid JSON" in error(a)["message"]
    assert core.calls == []

    def failing(request: InferRequest) -> InferResponse:
        return InferResponse(request.model_name, "1", error=InternalError("the model broke"))

    core.answer = failing
    a = run(core, "POST", "/v1/embeddings", {"model": "embedder", "input": "x"})
    assert a.status == 500 and error(a)["message"] == "the model broke" and error(a)["type"] == "server_error"
    core.answer = lambda r: InferResponse(r.model_name, "1", error=InvalidArgumentError("too long"))
    assert run(core, "POST", "/v1/embeddings", {"model": "embedder", "input": "x"}).status == 400


def test_a_bug_while_answering_is_a_500_and_logged(core: Any, caplog: pytest.LogCaptureFixture) -> None:
    core.answer = lambda r: InferResponse(
        r.model_name,
        "1",
        outputs=[Tensor.from_array("EMB", np.array([b"not a number"] * 3, dtype=np.object_))],
    )
    a = run(core, "POST", "/v1/embeddings", {"model": "embedder", "input": "x"})
    assert a.status == 500 and error(a) == {
        "message": "internal server error",
        "type": "server_error",
        "param": None,
        "code": None,
    }
    assert "answering an OpenAI API request failed" in caplog.text


def test_one_failed_part_fails_the_batch_and_cancels_the_rest(core: Any) -> None:
    async def main() -> None:
        core.hold = True
        session = Session(core)
        session.client.send(
            request("POST", "/v1/embeddings", json.dumps({"model": "embedder", "input": ["x"] * 9}).encode())
        )
        for _ in range(WAIT_ROUNDS):
            await asyncio.sleep(0)
            if len(core.streams) == 3:
                break
        first, second, third = core.streams
        first.send(embed(core.requests[0]), True)
        second.send(InferResponse("embedder", "1", error=InternalError("part two failed")), True)
        (a,) = await session.answers()
        assert a.status == 500 and error(a)["message"] == "part two failed"
        assert third.cancelled and not first.cancelled

    asyncio.run(main())


def test_a_gzip_body(core: Any) -> None:
    body = gzip.compress(json.dumps({"model": "embedder", "input": "a", "encoding_format": "float"}).encode())
    a = run(core, "POST", "/v1/embeddings", body, {"Content-Encoding": "gzip"})
    assert a.status == 200 and json.loads(a.body)["data"][0]["embedding"] == vector(b"a")
    a = run(core, "POST", "/v1/embeddings", body, {"Content-Encoding": "br"})
    assert a.status == 400 and "unsupported Content-Encoding 'br'" in error(a)["message"]


# -- completions and chat -----------------------------------------------------------------------------
def piece(text: str, completion: int, finish: str | None = None, prompt: int = 2) -> InferResponse:
    outputs = [
        Tensor.from_array("OUT", np.array([text.encode()], dtype=np.object_)),
        Tensor.from_array("P", np.array([prompt], dtype=np.int32)),
        Tensor.from_array("C", np.array([completion], dtype=np.int64)),
    ]
    if finish is not None:
        outputs.append(Tensor.from_array("WHY", np.array([finish.encode()], dtype=np.object_)))
    return InferResponse("writer", "1", outputs=outputs)


async def _send_when_submitted(core: Any, items: list[list[tuple[InferResponse | None, bool]]]) -> None:
    """Sends ``items[i]`` on the i-th request's stream once the front end submitted it."""
    for _ in range(WAIT_ROUNDS):
        if len(core.streams) >= len(items):
            break
        await asyncio.sleep(0)
    for stream, responses in zip(core.streams, items, strict=True):
        for r, final in responses:
            stream.send(r, final)


def text_call(core: Any, path: str, body: dict[str, Any], items: list[list[Any]]) -> Answer:
    async def main() -> Answer:
        core.hold = True
        session = Session(core)
        session.client.send(request("POST", path, json.dumps(body).encode()))
        await _send_when_submitted(core, items)
        return (await session.answers())[0]

    return asyncio.run(main())


HELLO = [(piece("Hel", 1), False), (piece("lo", 2), False), (piece(" you", 3, "length"), True)]


def test_a_whole_completion_joins_the_pieces(core: Any) -> None:
    a = text_call(
        core, "/v1/completions", {"model": "writer", "prompt": "hi", "max_tokens": 3, "seed": 1}, [HELLO]
    )
    assert a.status == 200, a.body
    doc = json.loads(a.body)
    assert doc["object"] == "text_completion" and doc["id"].startswith("cmpl-") and doc["model"] == "writer"
    assert doc["choices"] == [{"index": 0, "text": "Hello you", "logprobs": None, "finish_reason": "length"}]
    assert doc["usage"] == {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5}
    (r,) = core.requests
    assert r.inputs["PROMPT"].array.tolist() == [b"hi"] and r.parameters == {"max_tokens": 3, "seed": 1}
    assert [o.name for o in r.outputs or []] == ["OUT", "P", "C", "WHY"]


def test_a_whole_chat_completion_and_several_prompts(core: Any) -> None:
    msgs = [{"role": "user", "content": "hi"}]
    a = text_call(core, "/v1/chat/completions", {"model": "writer", "messages": msgs}, [HELLO])
    doc = json.loads(a.body)
    assert doc["object"] == "chat.completion" and doc["id"].startswith("chatcmpl-")
    assert doc["choices"] == [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "Hello you"},
            "logprobs": None,
            "finish_reason": "length",
        }
    ]
    assert core.requests[0].inputs["PROMPT"].array.tolist() == [b"user: hi\nassistant:"]
    core.requests.clear()
    core.streams.clear()
    two: list[list[Any]] = [[(piece("one", 1), True)], [(piece("two", 1), False), (None, True)]]
    doc = json.loads(text_call(core, "/v1/completions", {"model": "writer", "prompt": ["a", "b"]}, two).body)
    assert [(c["index"], c["text"], c["finish_reason"]) for c in doc["choices"]] == [
        (0, "one", "stop"),
        (1, "two", "stop"),
    ]
    assert doc["usage"] == {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6}


def test_a_stop_sequence_cuts_the_text_and_cancels_the_request(core: Any) -> None:
    items = [[(piece("one. tw", 1), False), (piece("o", 2), False)]]  # no final flag: cancelled instead
    a = text_call(core, "/v1/completions", {"model": "writer", "prompt": "x", "stop": [". "]}, items)
    doc = json.loads(a.body)
    assert doc["choices"][0]["text"] == "one" and doc["choices"][0]["finish_reason"] == "stop"
    assert core.streams[0].cancel_reason == "a stop sequence was reached"


def test_text_errors(core: Any) -> None:
    a = text_call(core, "/v1/completions", {"model": "writer", "prompt": "x", "n": 2}, [])
    assert a.status == 400 and error(a)["param"] == "n"
    a = text_call(core, "/v1/completions", {"model": "embedder", "prompt": "x"}, [])
    assert a.status == 400 and error(a)["code"] == "wrong_model_type"
    assert core.calls == []
    failed = [[(InferResponse("writer", "1", error=InvalidArgumentError("bad prompt")), True)]]
    a = text_call(core, "/v1/completions", {"model": "writer", "prompt": "x"}, failed)
    assert a.status == 400 and error(a)["message"] == "bad prompt"


# -- streaming ----------------------------------------------------------------------------------------
def test_a_streamed_chat_completion(core: Any) -> None:
    body = {
        "model": "writer",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    a = text_call(core, "/v1/chat/completions", body, [HELLO])
    assert (a.status, a.headers["content-type"]) == (200, SSE)
    evs = events(a.body)
    assert evs[-1] == "[DONE]"
    chunks = evs[:-1]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"} and len({c["id"] for c in chunks}) == 1
    assert [c["choices"][0]["delta"] for c in chunks[:-1]] == [
        {"role": "assistant", "content": ""},
        {"content": "Hel"},
        {"content": "lo"},
        {"content": " you"},
        {},
    ]
    assert [c["choices"][0]["finish_reason"] for c in chunks[:-1]] == [None] * 4 + ["length"]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == {
        "prompt_tokens": 2,
        "completion_tokens": 3,
        "total_tokens": 5,
    }


def test_a_streamed_completion_of_two_prompts_with_a_stop_sequence(core: Any) -> None:
    body = {"model": "writer", "prompt": ["a", "b"], "stream": True, "stop": "STOP"}
    items: list[list[Any]] = [
        [(piece("x ST", 1), False), (piece("OP y", 2), False)],
        [(piece("two", 1), False), (None, True)],
    ]
    evs = events(text_call(core, "/v1/completions", body, items).body)
    assert evs[-1] == "[DONE]"
    got = [
        (c["choices"][0]["index"], c["choices"][0]["text"], c["choices"][0]["finish_reason"])
        for c in evs[:-1]
    ]
    assert got == [(0, "x ", None), (0, "", "stop"), (1, "two", None), (1, "", "stop")]
    assert {c["object"] for c in evs[:-1]} == {"text_completion"}
    assert core.streams[0].cancelled and not core.streams[1].cancelled


def test_an_error_before_the_first_chunk_is_a_status(core: Any) -> None:
    body = {"model": "writer", "prompt": "x", "stream": True}
    failed = [[(InferResponse("writer", "1", error=InternalError("no")), True)]]
    a = text_call(core, "/v1/completions", body, failed)
    assert a.status == 500 and error(a)["message"] == "no"


def test_an_error_after_the_first_chunk_is_an_error_event(core: Any) -> None:
    body = {"model": "writer", "prompt": "x", "stream": True}
    items = [[(piece("a", 1), False), (InferResponse("writer", "1", error=InternalError("broke")), False)]]
    a = text_call(core, "/v1/completions", body, items)
    assert a.status == 200
    evs = events(a.body)
    assert evs[0]["choices"][0]["text"] == "a"
    assert evs[-1] == {
        "error": {"message": "broke", "type": "server_error", "param": None, "code": "internal_error"}
    }
    assert core.streams[0].cancelled


def test_a_client_that_goes_away_cancels_its_requests(core: Any) -> None:
    async def main() -> None:
        core.hold = True
        session = Session(core)
        body = {"model": "writer", "prompt": ["a", "b"], "stream": True}
        session.client.send(request("POST", "/v1/completions", json.dumps(body).encode()))
        await _send_when_submitted(core, [[(piece("a", 1), False)], []])
        for _ in range(WAIT_ROUNDS):
            if b"data: " in session.client.transport.data:
                break
            await asyncio.sleep(0)
        session.client.conn.connection_lost(None)
        assert all(s.cancelled for s in core.streams)
        # a whole (non-streamed) answer too
        session = Session(core)
        session.client.send(
            request("POST", "/v1/embeddings", json.dumps({"model": "embedder", "input": "x"}).encode())
        )
        for _ in range(WAIT_ROUNDS):
            if len(core.streams) == 3:
                break
            await asyncio.sleep(0)
        session.client.conn.connection_lost(None)
        assert core.streams[2].cancel_reason == "the client closed the connection"

    asyncio.run(main())


class SlowResponder:
    """A responder whose client reads slowly until ``drained`` is set."""

    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.status = 0
        self.ended = False
        self.must_wait = False
        self.closed = False
        self.draining = asyncio.Event()
        self.drained = asyncio.Event()

    def start_chunked(self, status: int, content_type: str, extra_headers: Any = None) -> None:
        self.status = status

    def write_chunk(self, data: bytes) -> None:
        self.chunks.append(data)

    def end_chunked(self) -> None:
        self.ended = True

    def send(self, *args: Any) -> None:
        raise AssertionError("a stream is chunked")

    async def drain(self) -> None:
        self.draining.set()
        await self.drained.wait()
        self.must_wait = False


def test_the_pump_waits_while_the_client_reads_slowly(make_core: Callable[..., Any]) -> None:
    async def main() -> None:
        model = make_core(WRITER).models["writer"]
        body = parse_completions({"model": "writer", "prompt": "x", "stream": True})
        answer = _Answer(body, mapping_for(model, TEXT), 0.0)
        stream = ResponseStream(asyncio.get_running_loop())
        resp = SlowResponder()
        task = asyncio.ensure_future(_pump(answer, [stream], resp))  # type: ignore[arg-type]
        resp.must_wait = True
        stream.send(piece("a", 1))
        stream.send(piece("b", 2))
        await asyncio.wait_for(resp.draining.wait(), 30)
        assert len(resp.chunks) == 1  # "b" waits in the stream, not encoded
        resp.drained.set()
        stream.send(piece("c", 3, "stop"), True)
        await asyncio.wait_for(task, 30)
        texts = [json.loads(c[6:])["choices"][0]["text"] for c in resp.chunks[:-1]]
        assert texts == ["a", "b", "c", ""] and resp.chunks[-1] == b"data: [DONE]\n\n" and resp.ended

    asyncio.run(main())


# -- access -------------------------------------------------------------------------------------------
def test_api_keys_and_restrictions_answer_in_openai_shape(core: Any) -> None:
    policy = AccessPolicy(
        keys={"all-key": frozenset(Category), "meta-key": frozenset({Category.METADATA})},
        exempt=frozenset({Category.HEALTH}),
    )

    async def main() -> None:
        s = Session(core, policy)
        body = {"model": "embedder", "input": "x"}
        (a,) = await s.ask("POST", "/v1/embeddings", body)
        assert a.status == 401 and error(a)["code"] == "invalid_api_key"
        assert a.headers["www-authenticate"] == 'Bearer realm="inferd"'
        s = Session(core, policy)
        (a,) = await s.ask("GET", "/v1/files")  # no such route: 404 for anyone
        assert a.status == 404 and error(a)["code"] == "unknown_url"
        s = Session(core, policy)
        (a,) = await s.ask("POST", "/v1/embeddings", body, {"Authorization": "Bearer meta-key"})
        assert a.status == 403 and "does not grant the 'inference' APIs" in error(a)["message"]
        s = Session(core, policy)
        (a,) = await s.ask("GET", "/v1/models", b"", {"Authorization": "Bearer meta-key"})
        assert a.status == 200
        s = Session(core, policy)
        (a,) = await s.ask("POST", "/v1/embeddings", body, {"Authorization": "Bearer all-key"})
        assert a.status == 200
        restricted = AccessPolicy(
            restrictions=parse_restrictions(["inference:x-admin=yes"], "http-restricted-api")
        )
        s = Session(core, restricted)
        (a,) = await s.ask("POST", "/v1/embeddings", body)
        assert a.status == 403 and error(a)["message"] == "This API is restricted, expecting header 'x-admin'"
        s = Session(core, restricted)
        (a,) = await s.ask("POST", "/v1/embeddings", body, {"x-admin": "yes"})
        assert a.status == 200

    asyncio.run(main())
