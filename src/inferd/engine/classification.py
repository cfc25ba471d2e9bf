"""The classification extension: an output replaced by its top-N ``"value:index[:label]"`` strings."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from inferd.core.tensor import Tensor
from inferd.core.types import BYTES
from inferd.errors import InvalidArgumentError

if TYPE_CHECKING:
    from inferd.core.response import InferResponse
    from inferd.engine.model import Model

#: the output datatypes Triton classifies; integers print as integers, floats with %f
_SUPPORTED = frozenset(
    {"UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "FP32", "FP64"}
)


def _top(row: np.ndarray[Any, Any], n: int, labels: tuple[str, ...]) -> list[bytes]:
    values = row.astype(np.float64, copy=False)
    order = np.argsort(-values, kind="stable")[:n]
    integer = row.dtype.kind in "iu"
    out = []
    for idx in order:
        i = int(idx)
        s = f"{int(row[i])}:{i}" if integer else f"{values[i]:f}:{i}"
        if i < len(labels):
            s += f":{labels[i]}"
        out.append(s.encode())
    return out


def classify(tensor: Tensor, n: int, labels: tuple[str, ...], batched: bool) -> Tensor:
    """Top-``n`` classes of ``tensor``: shape [n] or, for a batching model, [batch, n]."""
    if tensor.datatype.wire not in _SUPPORTED:
        raise InvalidArgumentError(
            f"class result not available for output due to unsupported type '{tensor.datatype.wire}'"
        )
    arr = tensor.array
    if batched and arr.ndim >= 1:
        rows = arr.reshape(arr.shape[0], -1)
        k = min(n, rows.shape[1])
        data = [_top(r, k, labels) for r in rows]
        out = np.empty((rows.shape[0], k), dtype=np.object_)
        for i, d in enumerate(data):
            out[i, :] = d
    else:
        flat = arr.reshape(-1)
        k = min(n, flat.shape[0])
        out = np.empty((k,), dtype=np.object_)
        out[:] = _top(flat, k, labels)
    return Tensor.from_array(tensor.name, out, BYTES)


def apply_classification(wanted: dict[str, int], model: Model, resp: InferResponse) -> None:
    """The classification extension on one response: each output asked for as top-N classes."""
    resp.outputs = [
        classify(
            t,
            wanted[t.name],
            model.outputs[t.name].labels if t.name in model.outputs else (),
            model.max_batch_size > 0,
        )
        if t.name in wanted
        else t
        for t in resp.outputs
    ]
