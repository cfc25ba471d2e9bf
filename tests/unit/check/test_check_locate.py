"""check/locate.py: a problem's message (and the field its check is about) -> its place in the text."""

from __future__ import annotations

import pytest

from inferd.check.locate import field_words, locate
from inferd.check.positions import ConfigIndex

TEXT = """name: "m"
max_batch_size: 4
input [
  { name: "A" data_type: TYPE_FP32 dims: [ 0 ] },
  { name: "B" data_type: TYPE_FP32 dims: [ 2 ] reshape { shape: [ 3 ] } }
]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 4 ] } ]
dynamic_batching { preferred_batch_size: [ 8 ] }
instance_group [ { name: "gpu_group" kind: KIND_GPU }, { name: "seven" kind: KIND_GPU gpus: [ 7 ] } ]
ensemble_scheduling {
  step [
    { model_name: "first" input_map { key: "IN" value: "A" } output_map { key: "OUT" value: "T" } },
    { model_name: "second" input_map { key: "IN" value: "T" } }
  ]
}
"""


@pytest.fixture(scope="module")
def index() -> ConfigIndex:
    return ConfigIndex.build(TEXT)


def where(
    index: ConfigIndex, message: str, base: tuple[str | int, ...] | None = None
) -> tuple[int, int] | None:
    occ = locate(index, message, base)
    return None if occ is None else (occ.line, occ.column)


def test_field_words_quoted_then_keywords() -> None:
    assert field_words("'max_batch_size' must be non-negative value for m")[0] == "max_batch_size"
    words = field_words("dynamic batching preferred size must be <= max batch size for m")
    assert words.index("preferred_batch_size") < words.index("max_batch_size")


@pytest.mark.parametrize(
    ("message", "base", "expected"),
    [
        # validation messages, with the field their check is about
        ("'max_batch_size' must be non-negative value for m", ("max_batch_size",), (2, 1)),
        ("dynamic batching preferred size must be <= max batch size for m", ("dynamic_batching",), (8, 44)),
        (
            "model input 'A' dimension must be integer >= 1, or -1 to indicate a variable-size dimension for m",
            ("input", 0),
            (4, 44),
        ),
        ("model input 'B' has different size for dims and reshape for m", ("input", 1), (5, 48)),
        ("model input 'A' must specify 'format' for m", ("input", 0), (4, 5)),  # not written: the name
        (
            "instance group gpu_group of model m has kind KIND_GPU but no GPUs are available",
            ("instance_group", 0),
            (9, 38),
        ),
        (
            "instance group seven of model m specifies invalid or unsupported gpu id 7. GPUs with at least the "
            "minimum required CUDA compute compatibility of 6.000000 are: ",
            ("instance_group", 1),
            (9, 95),
        ),
        # ensembles: a step the message names, a tensor it quotes
        ("must specify 'output_map' in step 1 of ensemble 'm'", ("ensemble_scheduling",), (13, 5)),
        ("ensemble tensor 'T' is unused in ensemble 'm'", ("ensemble_scheduling",), (12, 86)),
        ("output 'OUT' for ensemble 'm' is not written", ("ensemble_scheduling",), (7, 12)),
        # no base: what the message names
        (
            "unable to load model 'm', configuration expects datatype TYPE_FP32 for output 'OUT', model provides TYPE_INT64",
            None,
            (7, 24),
        ),
        ("unexpected 'platform' and 'backend' pair, got:onnxruntime_onnx, python", None, None),
        ("autofill failed for model 'm': non-zero max_batch_size is specified", None, (2, 1)),
    ],
)
def test_locate(
    index: ConfigIndex, message: str, base: tuple[str | int, ...] | None, expected: tuple[int, int] | None
) -> None:
    assert where(index, message, base) == expected


def test_an_exact_field_is_its_own_place(index: ConfigIndex) -> None:
    key = ("ensemble_scheduling", 0, "step", 1, "input_map", 0, "key")
    assert where(index, "ensemble 'm' step 1: 'IN' is not an input of model 'second'", key) == (13, 40)


def test_a_base_not_in_the_text_falls_back_to_what_the_message_names(index: ConfigIndex) -> None:
    # auto-complete's output (not written) reported by the tensor its message names
    assert where(index, "model output 'OUT' is not served for m", ("sequence_batching",)) == (7, 12)
    # nothing at all: the caller prints 1:1
    assert where(index, "model configuration for 'm' must specify one or more 'version'", None) is None
