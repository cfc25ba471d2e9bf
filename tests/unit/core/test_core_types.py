"""The one datatype table: wire names, config names, numpy dtypes and TRITONSERVER codes."""

from __future__ import annotations

import numpy as np
import pytest
from tritonclient.grpc import model_config_pb2
from tritonclient.utils import np_to_triton_dtype, triton_to_np_dtype

from inferd.core import types
from inferd.core.types import BF16, BY_CONFIG, BY_CONFIG_VALUE, BY_TRITON_CODE, BY_WIRE, BYTES, from_numpy

# (wire, config, TRITONSERVER_DataType code, numpy dtype or None for BYTES, itemsize, JSON allowed)
TABLE = [
    ("BOOL", "TYPE_BOOL", 1, "bool", 1, True),
    ("UINT8", "TYPE_UINT8", 2, "uint8", 1, True),
    ("UINT16", "TYPE_UINT16", 3, "uint16", 2, True),
    ("UINT32", "TYPE_UINT32", 4, "uint32", 4, True),
    ("UINT64", "TYPE_UINT64", 5, "uint64", 8, True),
    ("INT8", "TYPE_INT8", 6, "int8", 1, True),
    ("INT16", "TYPE_INT16", 7, "int16", 2, True),
    ("INT32", "TYPE_INT32", 8, "int32", 4, True),
    ("INT64", "TYPE_INT64", 9, "int64", 8, True),
    ("FP16", "TYPE_FP16", 10, "float16", 2, False),
    ("FP32", "TYPE_FP32", 11, "float32", 4, True),
    ("FP64", "TYPE_FP64", 12, "float64", 8, True),
    ("BYTES", "TYPE_STRING", 13, "object", 0, True),
    ("BF16", "TYPE_BF16", 14, "uint16", 2, False),
]


def test_table_has_the_fourteen_wire_types() -> None:
    assert sorted(BY_WIRE) == sorted(row[0] for row in TABLE)
    assert len(BY_CONFIG) == len(BY_CONFIG_VALUE) == len(BY_TRITON_CODE) == 14


@pytest.mark.parametrize(("wire", "config", "code", "npdt", "itemsize", "json_ok"), TABLE)
def test_row(wire: str, config: str, code: int, npdt: str, itemsize: int, json_ok: bool) -> None:
    row = BY_WIRE[wire]
    assert row.wire == wire
    assert row.config == config
    assert row.triton_code == code
    assert row.numpy == np.dtype(npdt)
    assert row.itemsize == itemsize
    assert row.json_ok is json_ok
    assert BY_CONFIG[config] is row
    assert BY_TRITON_CODE[code] is row
    # the ModelConfig enum number is the protobuf's, not a copy
    assert row.config_value == model_config_pb2.DataType.Value(config)
    assert BY_CONFIG_VALUE[row.config_value] is row
    if row is not BYTES:
        assert row.itemsize == row.numpy.itemsize


def test_config_names_follow_wire_names_except_string() -> None:
    for row in BY_WIRE.values():
        expected = "TYPE_STRING" if row.wire == "BYTES" else f"TYPE_{row.wire}"
        assert row.config == expected


def test_named_rows() -> None:
    assert BYTES is BY_WIRE["BYTES"]
    assert BF16 is BY_WIRE["BF16"]


@pytest.mark.parametrize("wire", [row[0] for row in TABLE if row[0] not in ("BF16", "BYTES")])
def test_from_numpy_round_trip(wire: str) -> None:
    row = BY_WIRE[wire]
    assert from_numpy(row.numpy) is row


@pytest.mark.parametrize("wire", [row[0] for row in TABLE if row[0] != "BF16"])
def test_agrees_with_tritonclient(wire: str) -> None:
    row = BY_WIRE[wire]
    assert np.dtype(triton_to_np_dtype(wire)) == row.numpy
    assert np_to_triton_dtype(row.numpy) == wire


def test_bf16_is_not_chosen_for_uint16() -> None:
    assert from_numpy(np.dtype(np.uint16)) is BY_WIRE["UINT16"]


@pytest.mark.parametrize("dtype", [np.dtype("U3"), np.dtype("S5"), np.dtype(object)])
def test_text_dtypes_are_bytes(dtype: np.dtype[np.generic]) -> None:
    assert from_numpy(dtype) is BYTES


@pytest.mark.parametrize("dtype", [np.dtype(np.complex64), np.dtype("datetime64[s]"), np.dtype("V4")])
def test_unsupported_dtype(dtype: np.dtype[np.generic]) -> None:
    with pytest.raises(TypeError, match="unsupported numpy dtype"):
        from_numpy(dtype)


@pytest.mark.parametrize("wire", ["UINT16", "INT32", "UINT64", "FP16", "FP32", "FP64"])
def test_non_native_byte_order_maps_like_native(wire: str) -> None:
    # a model may return a big-endian array: Tensor.to_bytes swaps it to little-endian on the wire
    row = BY_WIRE[wire]
    assert types.from_numpy(row.numpy.newbyteorder(">")) is row
