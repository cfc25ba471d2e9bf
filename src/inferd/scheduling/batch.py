"""Batch arithmetic for native backends: requests stacked on the batch dimension, outputs split back.

The dynamic batcher hands an instance several InferRequests at once; a runtime that takes one
tensor per input (ONNX Runtime, PyTorch, OpenVINO) wants them stacked along dimension 0, and its
outputs cut back into one slice per request. Everything here is pure: numpy in, numpy out, no
framework. Requests whose inputs differ in anything but the batch dimension (variable ``-1``
dims, optional inputs left out) cannot share one tensor: :func:`group_compatible` keeps them
apart, and each group runs on its own.

Reshape follows Triton core: the variable dimensions of the API shape (``dims``) fill, in order,
the variable dimensions of the framework shape (``reshape``), and back for outputs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from inferd.core.request import InferRequest
from inferd.errors import InternalError

Array = np.ndarray[Any, Any]


def shape_key(request: InferRequest, batching: bool) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """What must match for two requests to share a batch: each input's name and non-batch shape."""
    start = 1 if batching else 0
    return tuple((name, t.shape[start:]) for name, t in request.inputs.items())


def group_compatible(requests: Sequence[InferRequest], batching: bool) -> list[list[int]]:
    """Indices of ``requests`` in groups that can be stacked (same inputs and non-batch shapes).

    Groups come in the order of their first request and keep request order inside. Without
    batching every request is its own group.
    """
    if not batching:
        return [[i] for i in range(len(requests))]
    if len(requests) == 1:
        return [[0]]
    groups: dict[tuple[Any, ...], list[int]] = {}
    for i, r in enumerate(requests):
        key = tuple(sorted(shape_key(r, True)))
        groups.setdefault(key, []).append(i)
    return list(groups.values())


def stack(arrays: Sequence[Array]) -> Array:
    """One tensor from per-request tensors along dimension 0 (no copy for a single one)."""
    if len(arrays) == 1:
        return arrays[0]
    return np.concatenate(arrays, axis=0)


def split(array: Array, batch_sizes: Sequence[int], name: str = "") -> list[Array]:
    """Cut an output along dimension 0 into one view per request of ``batch_sizes``."""
    total = sum(batch_sizes)
    if array.ndim == 0 or array.shape[0] != total:
        raise _not_batched(name, array, total)
    if len(batch_sizes) == 1:
        return [array]
    out = []
    start = 0
    for n in batch_sizes:
        out.append(array[start : start + n])
        start += n
    return out


def _not_batched(name: str, array: Array, total: int) -> InternalError:
    return InternalError(
        f"output '{name}' has shape {list(array.shape)}, but the batch held {total} item(s): a model "
        "with max_batch_size > 0 must return the batch along the first dimension of every output"
    )


def _refill(shape: Sequence[int], source: Sequence[int], target: Sequence[int]) -> tuple[int, ...]:
    """``target`` with its -1 dims filled, in order, by the dims of ``shape`` where ``source`` is -1."""
    if len(shape) != len(source):
        raise InternalError(
            f"shape {list(shape)} does not have the {len(source)} dimension(s) of {list(source)}"
        )
    variable = [s for d, s in zip(source, shape, strict=True) if d == -1]
    out = []
    k = 0
    for d in target:
        if d == -1:
            out.append(variable[k])
            k += 1
        else:
            out.append(d)
    return tuple(out)


def reshape_shape(
    shape: Sequence[int], dims: Sequence[int], reshape: Sequence[int], batching: bool
) -> tuple[int, ...]:
    """The framework shape of an input of API ``shape`` whose config has ``dims`` and ``reshape``."""
    if batching:
        return (shape[0], *_refill(shape[1:], dims, reshape))
    return _refill(shape, dims, reshape)


def unreshape_shape(
    shape: Sequence[int], dims: Sequence[int], reshape: Sequence[int], batching: bool
) -> tuple[int, ...]:
    """The API shape of an output the framework returned as ``shape`` (config ``dims``/``reshape``)."""
    if batching:
        return (shape[0], *_refill(shape[1:], reshape, dims))
    return _refill(shape, reshape, dims)
