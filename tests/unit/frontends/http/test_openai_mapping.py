"""Which tensors of a model the OpenAI API uses (frontends/http/openai_mapping.py): declared or defaulted,
the requests built for texts, and what is read back from responses."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from inferd.core.response import InferResponse
from inferd.core.tensor import Tensor
from inferd.engine.model import Model
from inferd.engine.validate import validate_request
from inferd.frontends.http.openai_mapping import EMBEDDINGS, TEXT, mapping_for
from inferd.frontends.http.openai_schema import OpenAIError

EMBEDDER = """
name: "embedder"
backend: "python"
max_batch_size: 4
input [ { name: "TEXT" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "EMB" data_type: TYPE_FP32 dims: [ 3 ] } ]
"""
FLAT_EMBEDDER = """
name: "flat_embedder"
backend: "python"
max_batch_size: 0
input [ { name: "TEXT" data_type: TYPE_STRING dims: [ -1 ] } ]
output [ { name: "EMB" data_type: TYPE_FP16 dims: [ -1, 2 ] } ]
"""
WRITER = """
name: "writer"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "PROMPT" data_type: TYPE_STRING dims: [ 1 ] } ]
output [
  { name: "OUT" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "WHY" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "P" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "C" data_type: TYPE_INT64 dims: [ 1 ] }
]
parameters { key: "openai_output" value { string_value: "OUT" } }
parameters { key: "openai_task" value { string_value: "text" } }
parameters { key: "openai_finish_reason" value { string_value: "WHY" } }
parameters { key: "openai_prompt_tokens" value { string_value: "P" } }
parameters { key: "openai_completion_tokens" value { string_value: "C" } }
"""
ECHO_TEXT = """
name: "echo_text"
backend: "python"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_STRING dims: [ 1 ] } ]
"""
ADD_SUB = """
name: "add_sub"
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""


def _io(name: str, inputs: str, outputs: str, params: str = "", mbs: int = 0) -> str:
    return f'name: "{name}"\nbackend: "python"\nmax_batch_size: {mbs}\ninput [ {inputs} ]\noutput [ {outputs} ]\n{params}'


_B = "data_type: TYPE_STRING dims: [ 1 ]"
_F = "data_type: TYPE_FP32 dims: [ 3 ]"


@pytest.fixture
def models(make_core: Callable[..., Any]) -> dict[str, Model]:
    core = make_core(EMBEDDER, FLAT_EMBEDDER, WRITER, ECHO_TEXT, ADD_SUB)
    return dict(core.models)


def test_the_default_mapping_needs_no_declaration(models: dict[str, Model]) -> None:
    m = mapping_for(models["embedder"], EMBEDDINGS)
    assert (m.task, m.input, m.output, m.max_texts, m.batched, m.dimensions) == (
        EMBEDDINGS,
        "TEXT",
        "EMB",
        4,
        True,
        3,
    )
    assert (m.prompt_tokens, m.completion_tokens, m.finish_reason) == (None, None, None)
    t = mapping_for(models["echo_text"], TEXT)
    assert (t.task, t.input, t.output, t.max_texts) == (TEXT, "IN", "OUT", 1)
    flat = mapping_for(models["flat_embedder"], EMBEDDINGS)
    assert (flat.max_texts, flat.batched, flat.dimensions) == (0, True, 2)


def test_a_declared_mapping(models: dict[str, Model]) -> None:
    m = mapping_for(models["writer"], TEXT)
    assert (m.input, m.output, m.finish_reason, m.prompt_tokens, m.completion_tokens) == (
        "PROMPT",
        "OUT",
        "WHY",
        "P",
        "C",
    )
    assert [o.name for o in m.outputs] == ["OUT", "P", "C", "WHY"]
    assert mapping_for(models["writer"], TEXT) is m  # computed once per model version


def test_requests_are_shaped_as_the_input_allows(models: dict[str, Model]) -> None:
    for name, texts, shape in [
        ("embedder", ["a", "bé", ""], (3, 1)),  # batch dimension, then dims [1]
        ("flat_embedder", ["a", "b"], (2,)),  # the input's own variable dimension
        ("writer", ["prompt"], (1,)),  # one text, dims [1]
        ("echo_text", ["p"], (1, 1)),
    ]:
        model = models[name]
        task = TEXT if name in ("writer", "echo_text") else EMBEDDINGS
        request = mapping_for(model, task).request(model, texts, {"max_tokens": 3})
        (tensor,) = request.inputs.values()
        assert tensor.shape == shape, name
        assert tensor.array.reshape(-1).tolist() == [t.encode() for t in texts]
        assert request.parameters == {"max_tokens": 3}
        validate_request(request, model)  # what the core checks passes


def test_the_wrong_endpoint_says_which_to_use(models: dict[str, Model]) -> None:
    with pytest.raises(OpenAIError) as info:
        mapping_for(models["writer"], EMBEDDINGS)
    assert (info.value.status, info.value.code) == (400, "wrong_model_type")
    assert "use /v1/completions or /v1/chat/completions" in info.value.message
    with pytest.raises(OpenAIError, match="is an embedding model: use /v1/embeddings"):
        mapping_for(models["embedder"], TEXT)


@pytest.mark.parametrize(
    ("config", "why"),
    [
        (ADD_SUB, "it has 0 BYTES inputs"),
        (
            _io("two_out", f'{{ name: "I" {_B} }}', f'{{ name: "A" {_B} }}, {{ name: "B" {_B} }}'),
            "it needs one",
        ),
        (
            _io(
                "two_in",
                f'{{ name: "I" {_B} }}, {{ name: "J" {_B} }}',
                f'{{ name: "A" {_F} }}',
            ),
            "it has 2 BYTES inputs: name the one to use in the config parameter openai_input",
        ),
        (
            _io(
                "missing",
                f'{{ name: "I" {_B} }}',
                f'{{ name: "A" {_F} }}',
                'parameters { key: "openai_output" value { string_value: "NOPE" } }',
            ),
            "its parameter openai_output names 'NOPE', which is no output of it",
        ),
        (
            _io(
                "wrong_type",
                f'{{ name: "I" {_B} }}',
                f'{{ name: "A" {_F} }}',
                'parameters { key: "openai_task" value { string_value: "text" } }',
            ),
            "it has 0 BYTES outputs",
        ),
        (
            _io(
                "bad_task",
                f'{{ name: "I" {_B} }}',
                f'{{ name: "A" {_F} }}',
                'parameters { key: "openai_task" value { string_value: "chat" } }',
            ),
            "its parameter openai_task is 'chat'",
        ),
        (
            _io(
                "bad_count",
                f'{{ name: "I" {_B} }}',
                f'{{ name: "A" {_F} }}, {{ name: "N" {_B} }}',
                'parameters { key: "openai_output" value { string_value: "A" } }\n'
                'parameters { key: "openai_prompt_tokens" value { string_value: "N" } }',
            ),
            "its output 'N' (openai_prompt_tokens) is BYTES, not INT8",
        ),
        (
            _io("wide", '{ name: "I" data_type: TYPE_STRING dims: [ 2 ] }', f'{{ name: "A" {_F} }}'),
            "has dims [2]",
        ),
    ],
)
def test_models_that_cannot_map_say_why(make_core: Callable[..., Any], config: str, why: str) -> None:
    (model,) = make_core(config).models.values()
    with pytest.raises(OpenAIError) as info:
        mapping_for(model, EMBEDDINGS)
    e = info.value
    assert (e.status, e.param, e.code) == (400, "model", "model_not_supported")
    assert e.message.startswith(f"model '{model.name}' cannot be served through the OpenAI API: ")
    assert why in e.message


def test_reading_responses(models: dict[str, Model]) -> None:
    emb = mapping_for(models["embedder"], EMBEDDINGS)
    r = InferResponse("embedder", "1", outputs=[Tensor.from_array("EMB", np.arange(6, dtype=np.float64))])
    got = emb.embeddings(r, 2)
    assert got.dtype == np.float32 and got.tolist() == [[0, 1, 2], [3, 4, 5]]
    with pytest.raises(OpenAIError) as info:
        emb.embeddings(r, 4)
    assert info.value.status == 500 and "with shape [6] for 4 text(s)" in info.value.message
    with pytest.raises(OpenAIError, match="answered without output 'EMB'"):
        emb.embeddings(InferResponse("embedder", "1"), 1)

    w = mapping_for(models["writer"], TEXT)
    r = InferResponse(
        "writer",
        "1",
        outputs=[
            Tensor.from_array("OUT", np.array([b"he", b"llo"], dtype=np.object_)),
            Tensor.from_array("C", np.array([4], dtype=np.int64)),
            Tensor.from_array("WHY", np.array([b"length"], dtype=np.object_)),
        ],
    )
    assert w.text(r) == b"hello"
    assert (w.count(r, w.completion_tokens), w.count(r, w.prompt_tokens), w.finish(r)) == (4, None, "length")
    assert w.text(InferResponse("writer", "1")) == b"" and w.finish(InferResponse("writer", "1")) is None
