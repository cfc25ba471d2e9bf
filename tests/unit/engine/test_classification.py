"""The classification extension: top-N ``value:index[:label]`` strings."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from inferd.core.tensor import Tensor
from inferd.core.types import BY_WIRE, BYTES
from inferd.engine.classification import classify
from inferd.errors import InvalidArgumentError


def _classify(values: npt.ArrayLike, n: int, labels: tuple[str, ...] = (), batched: bool = False) -> Tensor:
    arr = np.asarray(values, dtype=np.float32)
    return classify(Tensor.from_array("OUTPUT0", arr), n, labels, batched)


def test_top_n_as_the_reference() -> None:
    out = _classify([1, 3, 2, 0.5], 2)
    assert out.name == "OUTPUT0"
    assert out.datatype is BYTES
    assert out.shape == (2,)
    assert out.array.tolist() == [b"3.000000:1", b"2.000000:2"]  # reference answer "cls"


def test_n_larger_than_the_classes() -> None:
    out = _classify([1, 3], 5)
    assert out.shape == (2,)
    assert out.array.tolist() == [b"3.000000:1", b"1.000000:0"]  # reference answer "cls_big"


def test_batched_shape_is_batch_by_n() -> None:
    row = np.arange(1, 17, dtype=np.float32) * 2
    out = _classify(row.reshape(1, 16), 2, batched=True)
    assert out.shape == (1, 2)
    assert out.array.tolist() == [[b"32.000000:15", b"30.000000:14"]]  # reference answer "cls_batch"


def test_each_batch_row_is_ranked_alone() -> None:
    out = _classify([[0.1, 0.9, 0.5], [7.0, -1.0, 8.0]], 2, batched=True)
    assert out.shape == (2, 2)
    assert out.array.tolist() == [[b"0.900000:1", b"0.500000:2"], [b"8.000000:2", b"7.000000:0"]]


def test_unbatched_multi_dimensional_output_is_flattened() -> None:
    out = _classify([[1, 5], [3, 2]], 3)
    assert out.shape == (3,)
    assert out.array.tolist() == [b"5.000000:1", b"3.000000:2", b"2.000000:3"]


def test_labels() -> None:
    labels = ("apple", "banana", "cherry", "date")
    out = _classify([1, 3.3, 0.5, 2.4], 2, labels)
    assert out.array.tolist() == [b"3.300000:1:banana", b"2.400000:3:date"]


def test_labels_shorter_than_the_classes() -> None:
    out = _classify([1, 3, 2], 3, ("zero",))
    assert out.array.tolist() == [b"3.000000:1", b"2.000000:2", b"1.000000:0:zero"]


def test_ties_keep_index_order() -> None:
    out = _classify([2, 5, 5, 2], 4)
    assert out.array.tolist() == [b"5.000000:1", b"5.000000:2", b"2.000000:0", b"2.000000:3"]


@pytest.mark.parametrize(
    ("dtype", "expected"),
    [
        (np.int32, [b"-1:1", b"-4:0"]),  # integers print as integers (the reference: "9:1")
        (np.int64, [b"-1:1", b"-4:0"]),
        (np.uint8, [b"255:1", b"252:0"]),
        (np.float64, [b"-1.000000:1", b"-4.000000:0"]),
    ],
)
def test_value_formats(dtype: type, expected: list[bytes]) -> None:
    values: np.ndarray[Any, Any] = np.array([-4, -1], dtype=np.int64).astype(dtype)
    out = classify(Tensor.from_array("Y", values), 2, (), False)
    assert out.array.tolist() == expected


def test_large_double_prints_in_full() -> None:
    out = classify(Tensor.from_array("Y", np.array([0.5, 1e10])), 1, (), False)
    assert out.array.tolist() == [b"10000000000.000000:1"]


@pytest.mark.parametrize("wire", ["BOOL", "FP16", "BF16", "BYTES"])
def test_unsupported_types(wire: str, reference_errors: dict[str, int | None]) -> None:
    arr = np.array([b"a"], dtype=np.object_) if wire == "BYTES" else np.zeros(2, BY_WIRE[wire].numpy)
    with pytest.raises(InvalidArgumentError) as info:
        classify(Tensor("Y", BY_WIRE[wire], arr.shape, array=arr), 1, (), False)
    assert info.value.message == f"class result not available for output due to unsupported type '{wire}'"
    if wire == "BOOL":
        assert reference_errors[info.value.message] == 400


def test_small_values_round_like_printf() -> None:
    out = _classify([0.0000004, 1e-7], 1)
    assert out.array.tolist() == [b"0.000000:0"]
