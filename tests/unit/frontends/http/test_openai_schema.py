"""The OpenAI API's request bodies, error shape and stop sequences (frontends/http/openai_schema.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from inferd.errors import (
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    UnavailableError,
    UnsupportedError,
)
from inferd.frontends.http.openai_schema import (
    OpenAIError,
    OpenAILimits,
    StopMatcher,
    from_inferd,
    parse_body,
    parse_chat,
    parse_completions,
    parse_embeddings,
    render_chat,
)


def _error(fn: Any, *args: Any) -> OpenAIError:
    with pytest.raises(OpenAIError) as info:
        fn(*args)
    return info.value


def test_error_shape() -> None:
    e = OpenAIError(400, "bad", param="input", code="x")
    assert json.loads(e.body()) == {
        "error": {"message": "bad", "type": "invalid_request_error", "param": "input", "code": "x"}
    }


@pytest.mark.parametrize(
    ("error", "status", "type_", "code"),
    [
        (
            NotFoundError("Request for unknown model: 'm' is not found"),
            404,
            "invalid_request_error",
            "model_not_found",
        ),
        (InvalidArgumentError("wrong"), 400, "invalid_request_error", "invalid_arg"),
        (UnsupportedError("no"), 400, "invalid_request_error", "unsupported"),
        (UnavailableError("Server is stopping"), 503, "server_error", "unavailable"),
        (InternalError("model failed"), 500, "server_error", "internal_error"),
    ],
)
def test_core_errors_map_to_the_statuses_the_sdk_expects(
    error: Any, status: int, type_: str, code: str
) -> None:
    e = from_inferd(error)
    assert (e.status, e.type, e.code, e.message) == (status, type_, code, error.message)


def test_bodies_must_be_json_objects_with_a_model() -> None:
    assert "not valid JSON" in _error(parse_body, b"{").message
    assert _error(parse_body, b"[]").message == "the request body must be a JSON object"
    e = _error(parse_body, b'{"input": "x"}')
    assert (e.status, e.param) == (400, "model")
    assert _error(parse_body, b'{"model": 3}').param == "model"
    assert parse_body(b'{"model": "m", "input": "x"}') == {"model": "m", "input": "x"}


def test_embeddings_inputs_and_formats() -> None:
    b = parse_embeddings({"model": "m", "input": "one"})
    assert (b.texts, b.base64, b.dimensions) == (["one"], False, None)
    b = parse_embeddings({"model": "m", "input": ["a", ""], "encoding_format": "base64", "dimensions": 384})
    assert (b.texts, b.base64, b.dimensions) == (["a", ""], True, 384)
    cases: list[tuple[dict[str, Any], str]] = [
        ({"input": [1, 2, 3]}, "input"),  # token ids
        ({"input": [[1, 2]]}, "input"),
        ({"input": []}, "input"),
        ({"input": ["a", 1]}, "input"),
        ({}, "input"),
        ({"input": "a", "encoding_format": "int8"}, "encoding_format"),
        ({"input": "a", "dimensions": 0}, "dimensions"),
        ({"input": "a", "dimensions": "384"}, "dimensions"),
    ]
    for bad, param in cases:
        e = _error(parse_embeddings, {"model": "m", **bad})
        assert (e.status, e.param) == (400, param), bad
    assert "token ids" in _error(parse_embeddings, {"model": "m", "input": [1, 2]}).message


def test_completions_forward_sampling_fields_and_extra_scalars() -> None:
    b = parse_completions(
        {
            "model": "m",
            "prompt": ["a", "b"],
            "max_tokens": 5,
            "temperature": 0.5,
            "top_p": 1,
            "seed": 7,
            "user": "u",
            "stop": ["\n", ""],
            "stream": True,
            "stream_options": {"include_usage": True},
            "ignore_eos": True,  # not OpenAI's: a scalar reaches the model as it is
            "nested": {"a": 1},  # not a scalar: dropped
            "logprobs": None,
            "echo": False,
            "n": 1,
        }
    )
    assert (b.chat, b.prompts, b.stream, b.include_usage, b.stop) == (False, ["a", "b"], True, True, ["\n"])
    assert b.parameters == {
        "max_tokens": 5,
        "temperature": 0.5,
        "top_p": 1,
        "seed": 7,
        "user": "u",
        "ignore_eos": True,
    }
    assert parse_completions({"model": "m", "prompt": "x", "stop": "END"}).stop == ["END"]


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"n": 2}, "n"),
        ({"logprobs": 3}, "logprobs"),
        ({"echo": True}, "echo"),
        ({"best_of": 2}, "best_of"),
        ({"suffix": "x"}, "suffix"),
        ({"logit_bias": {"1": 2}}, "logit_bias"),
        ({"max_tokens": -1}, "max_tokens"),
        ({"max_tokens": 1.5}, "max_tokens"),
        ({"temperature": "hot"}, "temperature"),
        ({"seed": True}, "seed"),
        ({"stop": 3}, "stop"),
        ({"stream": "yes"}, "stream"),
        ({"stream_options": {"include_usage": True}}, "stream_options"),  # without stream
        ({"prompt": [1, 2]}, "prompt"),
    ],
)
def test_completions_refuse_what_they_cannot_honour(extra: dict[str, Any], param: str) -> None:
    e = _error(parse_completions, {"model": "m", "prompt": "x", **extra})
    assert (e.status, e.type, e.param) == (400, "invalid_request_error", param)


def test_chat_renders_the_conversation_as_one_prompt() -> None:
    b = parse_chat(
        {
            "model": "m",
            "messages": [
                {"role": "system", "content": "Be brief."},
                {
                    "role": "user",
                    "content": [{"type": "text", "text": "Hi "}, {"type": "text", "text": "there"}],
                },
            ],
            "max_completion_tokens": 9,
            "response_format": {"type": "text"},
            "tool_choice": "none",
        }
    )
    assert b.chat and b.prompts == ["system: Be brief.\nuser: Hi there\nassistant:"]
    assert b.parameters == {"max_tokens": 9}
    assert render_chat([{"role": "assistant", "content": ""}]) == "assistant: \nassistant:"


@pytest.mark.parametrize(
    ("messages", "param"),
    [
        ([], "messages"),
        ("hi", "messages"),
        (["hi"], "messages[0]"),
        ([{"role": "tool", "content": "x"}], "messages[0].role"),
        ([{"role": "user"}], "messages[0].content"),
        ([{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}], "messages[0].content[0]"),
    ],
)
def test_chat_refuses_malformed_messages(messages: Any, param: str) -> None:
    e = _error(parse_chat, {"model": "m", "messages": messages})
    assert (e.status, e.param) == (400, param)


def test_chat_refuses_tools_and_structured_output() -> None:
    msgs = [{"role": "user", "content": "x"}]
    assert (
        _error(parse_chat, {"model": "m", "messages": msgs, "tools": [{"type": "function"}]}).param == "tools"
    )
    e = _error(parse_chat, {"model": "m", "messages": msgs, "response_format": {"type": "json_object"}})
    assert e.param == "response_format"
    e = _error(parse_chat, {"model": "m", "messages": msgs, "max_tokens": 1, "max_completion_tokens": 2})
    assert e.param == "max_completion_tokens"


def _feed(stops: list[str], pieces: list[str]) -> tuple[str, bool]:
    m = StopMatcher(stops)
    out = []
    for p in pieces:
        text, stopped = m.feed(p)
        out.append(text)
        if stopped:
            return "".join(out), True
    return "".join(out) + m.flush(), False


def test_stop_sequences_cut_the_text_across_pieces() -> None:
    assert _feed([], ["a", "b"]) == ("ab", False)
    assert _feed(["END"], [" one", " two", " E", "N", "D three"]) == (" one two ", True)
    assert _feed(["END"], [" one", " EN", "x"]) == (" one ENx", False)  # held back, then let go
    assert _feed(["END"], [" one E"]) == (" one E", False)  # flushed at the end
    assert _feed(["xyz", "y"], ["axy"]) == ("ax", True)  # the earliest match wins
    m = StopMatcher(["abc"])
    assert m.feed("xa") == ("x", False)  # "a" may begin "abc"
    assert m.feed("b") == ("", False)
    assert m.feed("d") == ("abd", False)


@pytest.mark.parametrize(
    ("parse", "field", "limit_name", "flag"),
    [
        (parse_completions, "prompt", "prompts", "--openai-max-prompts"),
        (parse_embeddings, "input", "embedding_inputs", "--openai-max-embedding-inputs"),
        (parse_chat, "messages", "messages", "--openai-max-messages"),
        (parse_completions, "stop", "stop_sequences", "--openai-max-stop-sequences"),
    ],
)
def test_arrays_are_bounded(parse: Any, field: str, limit_name: str, flag: str) -> None:
    limits = OpenAILimits(**{limit_name: 3})
    entry: Any = {"role": "user", "content": "x"} if field == "messages" else "x"
    doc: dict[str, Any] = {"model": "m", "prompt": "p", "input": "i", "messages": [entry]}
    parse({**doc, field: [entry] * 3}, limits)  # at the limit: taken
    with pytest.raises(OpenAIError) as e:
        parse({**doc, field: [entry] * 4}, limits)
    assert (e.value.status, e.value.param) == (400, field)
    assert f"'{field}' has 4 entries: this server takes at most 3 in one request ({flag})" in str(e.value)


def test_the_default_limits_refuse_a_hundred_thousand_prompts() -> None:
    with pytest.raises(OpenAIError, match="at most 256"):
        parse_completions({"model": "m", "prompt": ["x"] * 100_000})
