"""The OpenAI API's bodies: requests read and checked, the error shape, stop sequences.

Pure: no core, no HTTP. ``openai.py`` routes, ``openai_mapping.py`` turns these into inference
requests. A request that cannot be served is an ``OpenAIError`` naming the field (``param``) at fault,
answered ``{"error": {"message", "type", "param", "code"}}`` with the status the official SDKs map to
their exceptions (400 BadRequestError, 401 AuthenticationError, 403 PermissionDeniedError, 404
NotFoundError, 5xx InternalServerError).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import orjson

from inferd.errors import ErrorCode, InferdError

INVALID_REQUEST = "invalid_request_error"
SERVER_ERROR = "server_error"

#: request fields forwarded to the model as request parameters, with the JSON types they may have
#: (``max_completion_tokens``, chat's newer name, arrives as ``max_tokens``)
SAMPLING_FIELDS: dict[str, tuple[type, ...]] = {
    "max_tokens": (int,),
    "temperature": (int, float),
    "top_p": (int, float),
    "seed": (int,),
    "presence_penalty": (int, float),
    "frequency_penalty": (int, float),
    "user": (str,),
}
#: fields read by the front end itself (never forwarded)
_OWN_FIELDS = frozenset(
    {"model", "prompt", "messages", "stream", "stream_options", "stop", "n", "max_completion_tokens"}
)
#: fields whose non-default values the front end cannot honour: (default values, why)
_REFUSED: dict[str, tuple[tuple[Any, ...], str]] = {
    "logprobs": ((None, False), "log probabilities are not supported"),
    "top_logprobs": ((None, 0), "log probabilities are not supported"),
    "echo": ((None, False), "echo is not supported"),
    "best_of": ((None, 1), "best_of is not supported"),
    "suffix": ((None, ""), "suffix is not supported"),
    "tools": ((None, []), "tools are not supported"),
    "tool_choice": ((None, "none", "auto"), "tools are not supported"),
    "functions": ((None, []), "functions are not supported"),
    "function_call": ((None, "none", "auto"), "functions are not supported"),
    "logit_bias": ((None, {}), "logit_bias is not supported"),
    "audio": ((None,), "audio output is not supported"),
    "modalities": ((None, ["text"]), "only the text modality is supported"),
}
_CHAT_ROLES = frozenset({"system", "developer", "user", "assistant"})


class OpenAIError(Exception):
    """An answer in the OpenAI error shape: ``status`` and ``{"error": {message, type, param, code}}``."""

    def __init__(
        self,
        status: int,
        message: str,
        type_: str = INVALID_REQUEST,
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type_
        self.param = param
        self.code = code

    def body(self) -> bytes:
        return orjson.dumps(
            {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}
        )


def invalid(message: str, param: str | None = None, code: str | None = None) -> OpenAIError:
    """A 400 invalid_request_error."""
    return OpenAIError(400, message, INVALID_REQUEST, param, code)


def from_inferd(e: InferdError, model: str = "") -> OpenAIError:
    """A core or model error in OpenAI's terms: an unknown model is 404 ``model_not_found``, what the
    request got wrong 400, a model or server that cannot answer now 503, a model's failure 500."""
    code = e.code
    if code is ErrorCode.NOT_FOUND:
        return OpenAIError(404, e.message, INVALID_REQUEST, "model", "model_not_found")
    if code is ErrorCode.UNAVAILABLE:
        return OpenAIError(503, e.message, SERVER_ERROR, None, "unavailable")
    if code is ErrorCode.INTERNAL:
        return OpenAIError(500, e.message, SERVER_ERROR, None, "internal_error")
    return OpenAIError(400, e.message, INVALID_REQUEST, None, code.name.lower())


# -- request bodies ------------------------------------------------------------------------------
def parse_body(body: bytes) -> dict[str, Any]:
    """The JSON object of a request body, and its ``model``."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as e:
        raise invalid(f"the request body is not valid JSON: {e}") from None
    if not isinstance(doc, dict):
        raise invalid("the request body must be a JSON object")
    model = doc.get("model")
    if not isinstance(model, str) or not model:
        raise invalid("'model' is required: the name of a served model", "model")
    return doc


@dataclass(frozen=True, slots=True)
class OpenAILimits:
    """How much one request may ask for: each entry multiplies the work one body makes (a prompt is
    a model request, a stop sequence is matched against every token). Over a limit: 400 naming it."""

    prompts: int = 256
    messages: int = 2048
    embedding_inputs: int = 2048  # OpenAI's own limit for an embeddings input array
    stop_sequences: int = 16


#: the option each limit comes from, named in its error
_LIMIT_FLAGS = {
    "prompt": ("prompts", "--openai-max-prompts"),
    "input": ("embedding_inputs", "--openai-max-embedding-inputs"),
    "messages": ("messages", "--openai-max-messages"),
    "stop": ("stop_sequences", "--openai-max-stop-sequences"),
}


def _bounded(value: Any, param: str, limits: OpenAILimits) -> None:
    """Refuse an array longer than its limit, before anything is done with its entries."""
    if isinstance(value, list):
        field_name, flag = _LIMIT_FLAGS[param]
        limit: int = getattr(limits, field_name)
        if len(value) > limit:
            raise invalid(
                f"'{param}' has {len(value)} entries: this server takes at most {limit} in one request "
                f"({flag})",
                param,
            )


def _texts(value: Any, param: str, limits: OpenAILimits) -> list[str]:
    """A string or a non-empty list of strings (token ids are refused: the model tokenizes)."""
    if isinstance(value, str):
        return [value]
    _bounded(value, param, limits)
    if isinstance(value, list) and value:
        if all(isinstance(v, str) for v in value):
            return value
        if all(isinstance(v, (int, list)) for v in value):
            raise invalid(f"'{param}' as token ids is not supported: send text", param)
    if isinstance(value, list):
        raise invalid(f"'{param}' must be a string or a non-empty array of strings", param)
    raise invalid(f"'{param}' is required: a string or an array of strings", param)


@dataclass(slots=True)
class EmbeddingsBody:
    """``POST /v1/embeddings``."""

    model: str
    texts: list[str]
    base64: bool
    dimensions: int | None


def parse_embeddings(doc: dict[str, Any], limits: OpenAILimits = OpenAILimits()) -> EmbeddingsBody:
    texts = _texts(doc.get("input"), "input", limits)
    fmt = doc.get("encoding_format")
    if fmt is not None and fmt not in ("float", "base64"):
        raise invalid("'encoding_format' must be 'float' or 'base64'", "encoding_format")
    dims = doc.get("dimensions")
    if dims is not None and (type(dims) is not int or dims < 1):
        raise invalid("'dimensions' must be a positive integer", "dimensions")
    return EmbeddingsBody(doc["model"], texts, fmt == "base64", dims)


@dataclass(slots=True)
class TextBody:
    """``POST /v1/completions`` and ``/v1/chat/completions``: prompts (one choice each) and how to answer."""

    model: str
    chat: bool
    prompts: list[str]
    stream: bool = False
    include_usage: bool = False
    stop: list[str] = field(default_factory=list)
    #: what the model gets as request parameters
    parameters: dict[str, Any] = field(default_factory=dict)


def parse_completions(doc: dict[str, Any], limits: OpenAILimits = OpenAILimits()) -> TextBody:
    body = TextBody(doc["model"], False, _texts(doc.get("prompt"), "prompt", limits))
    _common(doc, body, limits)
    return body


def parse_chat(doc: dict[str, Any], limits: OpenAILimits = OpenAILimits()) -> TextBody:
    messages = doc.get("messages")
    _bounded(messages, "messages", limits)
    body = TextBody(doc["model"], True, [render_chat(messages)])
    fmt = doc.get("response_format")
    if fmt is not None and not (isinstance(fmt, dict) and fmt.get("type") == "text"):
        raise invalid("only the 'text' response_format is supported", "response_format")
    _common(doc, body, limits)
    return body


def render_chat(messages: Any) -> str:
    """A conversation as the one prompt a text model reads: ``<role>: <content>`` a line, then
    ``assistant:`` (the model's turn)."""
    if not isinstance(messages, list) or not messages:
        raise invalid("'messages' must be a non-empty array of messages", "messages")
    lines = []
    for i, m in enumerate(messages):
        param = f"messages[{i}]"
        if not isinstance(m, dict):
            raise invalid(f"'{param}' must be an object with 'role' and 'content'", param)
        role = m.get("role")
        if role not in _CHAT_ROLES:
            raise invalid(
                f"'{param}.role' must be one of 'system', 'developer', 'user', 'assistant' (got {role!r})",
                f"{param}.role",
            )
        lines.append(f"{role}: {_content(m.get('content'), f'{param}.content')}")
    lines.append("assistant:")
    return "\n".join(lines)


def _content(content: Any, param: str) -> str:
    """A message's text: a string, or an array of text parts (other parts are refused)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for j, part in enumerate(content):
            if (
                not isinstance(part, dict)
                or part.get("type") != "text"
                or not isinstance(part.get("text"), str)
            ):
                raise invalid(f"'{param}[{j}]': only text content parts are supported", f"{param}[{j}]")
            parts.append(part["text"])
        return "".join(parts)
    raise invalid(f"'{param}' must be a string or an array of text parts", param)


def _common(doc: dict[str, Any], body: TextBody, limits: OpenAILimits) -> None:
    """What completions and chat share: streaming, n, stop, refused features, forwarded parameters."""
    stream = doc.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise invalid("'stream' must be a boolean", "stream")
    body.stream = bool(stream)
    options = doc.get("stream_options")
    if options is not None:
        if not isinstance(options, dict):
            raise invalid("'stream_options' must be an object", "stream_options")
        if not body.stream:
            raise invalid("'stream_options' is only allowed with 'stream': true", "stream_options")
        include = options.get("include_usage", False)
        if not isinstance(include, bool):
            raise invalid("'stream_options.include_usage' must be a boolean", "stream_options.include_usage")
        body.include_usage = include
    n = doc.get("n")
    if n is not None and n != 1:
        raise invalid("only n=1 is supported (one choice per prompt)", "n")
    stop = doc.get("stop")
    _bounded(stop, "stop", limits)
    body.stop = _stop(stop)
    for name, (defaults, why) in _REFUSED.items():
        value = doc.get(name)
        if value is not None and not any(value == d and type(value) is type(d) for d in defaults):
            raise invalid(f"'{name}': {why}", name)
    if "max_completion_tokens" in doc and doc["max_completion_tokens"] is not None:
        if doc.get("max_tokens") is not None:
            raise invalid("give 'max_completion_tokens' or 'max_tokens', not both", "max_completion_tokens")
        doc = {**doc, "max_tokens": doc["max_completion_tokens"]}
    params = body.parameters
    for name, value in doc.items():
        if name in _OWN_FIELDS or name in _REFUSED or value is None:
            continue
        kinds = SAMPLING_FIELDS.get(name)
        if kinds is not None:
            if type(value) not in kinds or (isinstance(value, float) and not math.isfinite(value)):
                what = "an integer" if kinds == (int,) else "a string" if kinds == (str,) else "a number"
                raise invalid(f"'{name}' must be {what}", name)
            if name == "max_tokens" and value < 0:
                raise invalid("'max_tokens' must not be negative", name)
            params[name] = value
        elif isinstance(value, (str, bool, int, float)):  # other scalars reach the model too
            params[name] = value


def _stop(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value] if value else []
    if isinstance(value, list) and all(isinstance(s, str) for s in value):
        return [s for s in value if s]
    raise invalid("'stop' must be a string or an array of strings", "stop")


# -- stop sequences ------------------------------------------------------------------------------
class StopMatcher:
    """Cuts a text streamed in pieces at the first stop sequence. Text that may be the start of a
    stop sequence is held back until the next piece tells (or ``flush`` at the end)."""

    __slots__ = ("_pending", "_stops")

    def __init__(self, stops: list[str]) -> None:
        self._stops = stops
        self._pending = ""

    def feed(self, piece: str) -> tuple[str, bool]:
        """(text that may go out now, whether a stop sequence was reached: nothing follows then)."""
        if not self._stops:
            return piece, False
        text = self._pending + piece
        found = [i for i in (text.find(s) for s in self._stops) if i >= 0]
        if found:
            self._pending = ""
            return text[: min(found)], True
        keep = 0
        for s in self._stops:  # the longest end of the text that begins a stop sequence
            for n in range(min(len(s) - 1, len(text)), keep, -1):
                if text.endswith(s[:n]):
                    keep = n
                    break
        self._pending = text[len(text) - keep :] if keep else ""
        return text[: len(text) - keep], False

    def flush(self) -> str:
        """What was held back (the text ended without a stop sequence)."""
        out, self._pending = self._pending, ""
        return out
