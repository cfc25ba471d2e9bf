"""How a model's tensors map to the OpenAI API: declared in its config, or the default for common shapes.

A model serves ``/v1/embeddings`` or the text endpoints (``/v1/completions``, ``/v1/chat/completions``)
through one text input and one output. Its config may say which (``parameters``, string values):

- ``openai_task``: ``embeddings`` or ``text``;
- ``openai_input``: the text input (BYTES: one UTF-8 text an element);
- ``openai_output``: the embedding output (FP32, FP16 or FP64; one row per text), or the text output
  (BYTES: each response's text is appended to what came before, so a decoupled model streams deltas);
- ``openai_prompt_tokens``, ``openai_completion_tokens``: integer outputs counting tokens for ``usage``
  (an embedder's per text, summed; a text model's so far, the last value read);
- ``openai_finish_reason``: a BYTES output with ``stop`` or ``length`` (read from the last response).

Without them: one BYTES input and one floating-point output is an embedder, one BYTES input and one BYTES
output a text generator. Texts go in as the input's shape allows: ``[n, 1...]`` rows for a batching model
(at most ``max_batch_size`` per request: a longer batch is split into several requests), ``[n, 1...]``
for a non-batching one whose first dimension is variable, else one text per request.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from inferd.core.request import InferRequest, RequestedOutput
from inferd.core.response import InferResponse
from inferd.core.tensor import Tensor, TensorSpec
from inferd.core.types import BY_WIRE, BYTES
from inferd.engine.model import Model
from inferd.frontends.http.openai_schema import OpenAIError, invalid

EMBEDDINGS = "embeddings"
TEXT = "text"
_FLOATS = (BY_WIRE["FP32"], BY_WIRE["FP16"], BY_WIRE["FP64"])
_INTEGERS = tuple(
    BY_WIRE[t] for t in ("INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64")
)
_PARAM_KEYS = (
    "openai_task",
    "openai_input",
    "openai_output",
    "openai_prompt_tokens",
    "openai_completion_tokens",
    "openai_finish_reason",
)


@dataclass(frozen=True, slots=True)
class Mapping:
    """One model version's OpenAI mapping (``mapping_for``)."""

    model: str
    task: str
    input: str
    #: the input's dims after the batch dimension, all 1 or -1 (a text an element)
    input_dims: tuple[int, ...]
    #: texts per request: 0 = as many as come, else at most this many
    max_texts: int
    #: whether the request's texts go in as a leading dimension (else one text, all-1 shape)
    batched: bool
    output: str
    #: embedding length where the config fixes it (else known only from a response)
    dimensions: int | None
    prompt_tokens: str | None = None
    completion_tokens: str | None = None
    finish_reason: str | None = None

    @property
    def outputs(self) -> list[RequestedOutput]:
        names = (self.output, self.prompt_tokens, self.completion_tokens, self.finish_reason)
        return [RequestedOutput(n) for n in names if n]

    def request(
        self, model: Model, texts: list[str], parameters: dict[str, Any] | None = None
    ) -> InferRequest:
        """The inference request for ``texts`` (as many as ``max_texts`` allows)."""
        arr = np.empty(len(texts), dtype=np.object_)
        arr[:] = [t.encode("utf-8", "surrogatepass") for t in texts]
        ones = tuple(1 for _ in self.input_dims)
        if not self.batched:
            shape = ones
        elif model.max_batch_size > 0:  # [n, 1...]: the batch dimension, then the input's dims
            shape = (len(texts), *ones)
        else:  # the input's own first dimension is variable
            shape = (len(texts), *ones[1:])
        outputs = self.outputs
        return InferRequest(
            model_name=model.name,
            inputs={self.input: Tensor(self.input, BYTES, shape, array=arr.reshape(shape))},
            parameters=dict(parameters) if parameters else {},
            outputs=outputs,
            output_names=frozenset(o.name for o in outputs),
        )

    # -- reading responses -------------------------------------------------------------------------
    def embeddings(self, response: InferResponse, count: int) -> np.ndarray[Any, Any]:
        """``count`` embeddings (float32 rows) from one response."""
        out = _output(response, self.output)
        arr = out.array
        if arr.size == 0 or arr.size % count:
            raise OpenAIError(
                500,
                f"model '{self.model}' answered '{self.output}' with shape {list(out.shape)} for {count} text(s)",
                "server_error",
            )
        return np.ascontiguousarray(arr.reshape(count, -1), dtype=np.float32)

    def text(self, response: InferResponse) -> bytes:
        """The text of one response (every element, joined); b"" when it has none."""
        for t in response.outputs:
            if t.name == self.output:
                return b"".join(_as_bytes(v) for v in t.array.reshape(-1))
        return b""

    def count(self, response: InferResponse, name: str | None) -> int | None:
        """The sum of integer output ``name`` (None: not declared or not in this response)."""
        if name is None:
            return None
        for t in response.outputs:
            if t.name == name:
                return int(t.array.sum())
        return None

    def finish(self, response: InferResponse) -> str | None:
        if self.finish_reason is None:
            return None
        text = self.text_of(response, self.finish_reason)
        return text or None

    @staticmethod
    def text_of(response: InferResponse, name: str) -> str:
        for t in response.outputs:
            if t.name == name:
                return b"".join(_as_bytes(v) for v in t.array.reshape(-1)).decode("utf-8", "replace")
        return ""


def _as_bytes(v: Any) -> bytes:
    if isinstance(v, bytes):
        return v
    if isinstance(v, (bytearray, memoryview)):
        return bytes(v)
    return str(v).encode()


def _output(response: InferResponse, name: str) -> Tensor:
    for t in response.outputs:
        if t.name == name:
            return t
    raise OpenAIError(500, f"model '{response.model_name}' answered without output '{name}'", "server_error")


_cache: weakref.WeakKeyDictionary[Model, Mapping | OpenAIError] = weakref.WeakKeyDictionary()


def mapping_for(model: Model, task: str) -> Mapping:
    """The mapping of ``model`` for an endpoint of ``task`` (computed once per model version); an
    OpenAIError (400) says why a model cannot serve it."""
    found = _cache.get(model)
    if found is None:
        try:
            found = _derive(model)
        except OpenAIError as e:
            found = e
        _cache[model] = found
    if isinstance(found, OpenAIError):
        raise found
    if found.task != task:
        where = "/v1/embeddings" if found.task == EMBEDDINGS else "/v1/completions or /v1/chat/completions"
        what = "an embedding model" if found.task == EMBEDDINGS else "a text generation model"
        raise invalid(f"model '{model.name}' is {what}: use {where}", "model", "wrong_model_type")
    return found


def _derive(model: Model) -> Mapping:
    params = {k: v.string_value for k, v in model.config.parameters.items() if k in _PARAM_KEYS}
    name = model.name
    task = params.get("openai_task", "")
    if task and task not in (EMBEDDINGS, TEXT):
        raise _unmapped(name, f"its parameter openai_task is '{task}' (expected 'embeddings' or 'text')")
    inp = _pick(model, model.inputs, params.get("openai_input"), (BYTES,), "input", "openai_input")
    if not task:  # the task of the output: the declared one, else the only text or floating-point one
        outs = [s for s in model.outputs.values() if s.datatype is BYTES or s.datatype in _FLOATS]
        if params.get("openai_output"):
            outs = [
                _pick(
                    model,
                    model.outputs,
                    params["openai_output"],
                    (BYTES, *_FLOATS),
                    "output",
                    "openai_output",
                )
            ]
        if len(outs) != 1:
            raise _unmapped(
                name, "it needs one BYTES input and one floating-point (embeddings) or BYTES (text) output"
            )
        task = TEXT if outs[0].datatype is BYTES else EMBEDDINGS
    kinds = (BYTES,) if task == TEXT else _FLOATS
    out = _pick(model, model.outputs, params.get("openai_output"), kinds, "output", "openai_output")
    dims = tuple(inp.dims)
    if any(d not in (1, -1) for d in dims) or (model.max_batch_size > 0 and not dims):
        raise _unmapped(
            name, f"its input '{inp.name}' has dims {list(dims)}: one text an element needs 1 or -1"
        )
    mbs = model.max_batch_size
    if mbs > 0:
        batched, max_texts = True, mbs
    elif dims and dims[0] == -1:
        batched, max_texts = True, 0
    else:
        batched, max_texts = False, 1
    if task == TEXT:  # one prompt a request, whatever the model could take
        max_texts = 1
    # an embedding's length, where the config fixes it (a non-batching model's first dimension is the texts')
    row_dims = out.dims[1:] if batched and mbs == 0 else out.dims
    dimensions = None
    if task == EMBEDDINGS and row_dims and all(d > 0 for d in row_dims):
        dimensions = int(np.prod(row_dims))
    extras = {}
    for key, kinds_ in (
        ("openai_prompt_tokens", _INTEGERS),
        ("openai_completion_tokens", _INTEGERS),
        ("openai_finish_reason", (BYTES,)),
    ):
        if params.get(key):
            extras[key] = _pick(model, model.outputs, params[key], kinds_, "output", key).name
    return Mapping(
        model=name,
        task=task,
        input=inp.name,
        input_dims=dims,
        max_texts=max_texts,
        batched=batched,
        output=out.name,
        dimensions=dimensions,
        prompt_tokens=extras.get("openai_prompt_tokens"),
        completion_tokens=extras.get("openai_completion_tokens"),
        finish_reason=extras.get("openai_finish_reason"),
    )


def _pick(
    model: Model,
    specs: dict[str, TensorSpec],
    declared: str | None,
    kinds: tuple[Any, ...],
    what: str,
    key: str,
) -> TensorSpec:
    """The tensor ``declared`` names (checked), else the only one of ``kinds``."""
    if declared:
        spec = specs.get(declared)
        if spec is None:
            raise _unmapped(model.name, f"its parameter {key} names '{declared}', which is no {what} of it")
        if spec.datatype not in kinds:
            wanted = " or ".join(k.wire for k in kinds)
            raise _unmapped(
                model.name, f"its {what} '{declared}' ({key}) is {spec.datatype.wire}, not {wanted}"
            )
        return spec
    found = [s for s in specs.values() if s.datatype in kinds]
    if len(found) != 1:
        wanted = " or ".join(k.wire for k in kinds)
        raise _unmapped(
            model.name,
            f"it has {len(found)} {wanted} {what}s: name the one to use in the config parameter {key}",
        )
    return found[0]


def _unmapped(name: str, why: str) -> OpenAIError:
    return invalid(
        f"model '{name}' cannot be served through the OpenAI API: {why} (see the openai_* config parameters)",
        "model",
        "model_not_supported",
    )
