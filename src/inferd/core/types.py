"""The one datatype table: config ``TYPE_*`` <-> wire name <-> numpy dtype <-> TRITONSERVER code."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class DataType:
    """One row of the table. ``itemsize`` is 0 for BYTES (variable length)."""

    wire: str  # KServe v2 name: "FP32"
    config: str  # ModelConfig enum name: "TYPE_FP32"
    config_value: int  # ModelConfig DataType enum number
    triton_code: int  # TRITONSERVER_DataType (pb_utils.Tensor.triton_dtype())
    numpy: np.dtype[np.generic]
    itemsize: int
    json_ok: bool  # may travel as JSON "data"


def _dt(wire: str, config: str, cv: int, code: int, npdt: str, size: int, json_ok: bool = True) -> DataType:
    return DataType(wire, config, cv, code, np.dtype(npdt), size, json_ok)


# BF16 has no numpy dtype: it travels as raw 2-byte words (uint16 view), as Triton's client does.
_ROWS = (
    _dt("BOOL", "TYPE_BOOL", 1, 1, "bool", 1),
    _dt("UINT8", "TYPE_UINT8", 2, 2, "uint8", 1),
    _dt("UINT16", "TYPE_UINT16", 3, 3, "uint16", 2),
    _dt("UINT32", "TYPE_UINT32", 4, 4, "uint32", 4),
    _dt("UINT64", "TYPE_UINT64", 5, 5, "uint64", 8),
    _dt("INT8", "TYPE_INT8", 6, 6, "int8", 1),
    _dt("INT16", "TYPE_INT16", 7, 7, "int16", 2),
    _dt("INT32", "TYPE_INT32", 8, 8, "int32", 4),
    _dt("INT64", "TYPE_INT64", 9, 9, "int64", 8),
    _dt("FP16", "TYPE_FP16", 10, 10, "float16", 2, json_ok=False),
    _dt("FP32", "TYPE_FP32", 11, 11, "float32", 4),
    _dt("FP64", "TYPE_FP64", 12, 12, "float64", 8),
    _dt("BYTES", "TYPE_STRING", 13, 13, "object", 0),
    _dt("BF16", "TYPE_BF16", 14, 14, "uint16", 2, json_ok=False),
)

BY_WIRE: dict[str, DataType] = {r.wire: r for r in _ROWS}
BY_CONFIG: dict[str, DataType] = {r.config: r for r in _ROWS}
BY_CONFIG_VALUE: dict[int, DataType] = {r.config_value: r for r in _ROWS}
BY_TRITON_CODE: dict[int, DataType] = {r.triton_code: r for r in _ROWS}
BYTES = BY_WIRE["BYTES"]
BF16 = BY_WIRE["BF16"]

_BY_NUMPY: dict[np.dtype[np.generic], DataType] = {r.numpy: r for r in _ROWS if r.wire not in ("BF16",)}
#: the numpy dtypes (native byte order) that stand for a datatype of their own
NUMPY_DTYPES = tuple(_BY_NUMPY)


def from_numpy(dtype: np.dtype[np.generic]) -> DataType:
    """The row for a numpy dtype; str/bytes arrays (``U``/``S`` kinds) map to BYTES."""
    row = _BY_NUMPY.get(dtype if dtype.isnative else dtype.newbyteorder("="))
    if row is not None:
        return row
    if dtype.kind in ("U", "S", "O"):
        return BYTES
    raise TypeError(f"unsupported numpy dtype {dtype}")
