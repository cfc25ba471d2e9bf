"""The native backends' instances: requests stacked on the batch dimension, run once, split back.

A batch from the scheduler may hold requests of different shapes; :func:`group_compatible` splits
it into groups that stack (same inputs, same non-batch dims: variable ``-1`` dims and optional
inputs left out keep requests apart). Each group is prepared (inputs stacked along dimension 0,
reshaped), run once by the framework, and its outputs cut back into one view per request. An
error answers every request of its group and no other. :class:`BatchedInstance` is that loop;
a backend's instance says how to prepare, run and split, with the shared steps here
(``_stacked``: one input stacked and reshaped; ``_split_outputs``: the outputs cut back per
request); timings feed the statistics.

The arithmetic (:func:`group_compatible`, :func:`stack`, :func:`split`, :func:`reshape_shape`,
:func:`unreshape_shape`) is pure: numpy in, numpy out, no framework. Reshape follows Triton core:
the variable dimensions of the API shape (``dims``) fill, in order, the variable dimensions of the
framework shape (``reshape``), and back for outputs.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from inferd.core.request import InferRequest
from inferd.core.response import InferResponse
from inferd.core.tensor import Tensor, TensorSpec
from inferd.errors import InferdError, InternalError

if TYPE_CHECKING:
    from inferd.backends.native import NativeModel

Array = np.ndarray[Any, Any]


# --------------------------------------------------------------------------------------------------
# The arithmetic


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


# --------------------------------------------------------------------------------------------------
# The instance


class BatchedInstance(ABC):
    """Base of a native backend's instance: the execute loop and the instance's preamble."""

    #: the pool may run short executes on the loop (it keeps long ones in their threads); a backend
    #: whose every run costs more than a thread hand-off leaves this False
    inline_ok: bool = False
    #: a native model never calls another model
    uses_bls: bool = False

    def __init__(self, model: NativeModel, name: str) -> None:
        self.model = model
        self.name = name
        self._outputs = {o.name: o for o in model.outputs}
        self._output_names = list(self._outputs)
        self._all_outputs = frozenset(self._output_names)
        self._batching = model.max_batch_size > 0
        self.last_timings: tuple[int, int, int] = (0, 0, 0)
        self._prep_ns = self._infer_ns = 0

    def execute(self, requests: list[InferRequest]) -> list[InferResponse]:
        t0 = time.monotonic_ns()
        self._prep_ns = self._infer_ns = 0
        slots: list[InferResponse | None] = [None] * len(requests)
        for group in group_compatible(requests, self._batching):
            for i, resp in zip(group, self._run_group([requests[i] for i in group]), strict=True):
                slots[i] = resp
        total = time.monotonic_ns() - t0
        prep, infer = self._prep_ns, self._infer_ns
        self.last_timings = (prep, infer, max(0, total - prep - infer))
        return [r for r in slots if r is not None]

    def _wanted(self, r: InferRequest) -> frozenset[str]:
        """Names of the outputs ``r`` asked for (all when it listed none)."""
        if r.outputs is None:
            return self._all_outputs
        return r.output_names if r.output_names is not None else frozenset(o.name for o in r.outputs)

    def _run_group(self, requests: list[InferRequest]) -> list[InferResponse]:
        """Requests of one shape signature as one batch; an error answers every request of it."""
        version = self.model.version_str
        clock = time.monotonic_ns
        t0 = clock()
        try:
            wanted = [self._wanted(r) for r in requests]
            prepared = self._group_inputs(requests, wanted)
            t1 = clock()
            self._prep_ns += t1 - t0
            result = self._group_run(prepared)
            self._infer_ns += clock() - t1
            per_request = self._group_outputs(requests, result, wanted)
        except InferdError as e:
            return [InferResponse(r.model_name, version, r.id, error=e) for r in requests]
        return [
            InferResponse(r.model_name, version, r.id, outputs=outs)
            for r, outs in zip(requests, per_request, strict=True)
        ]

    @abstractmethod
    def _group_inputs(self, requests: list[InferRequest], wanted: list[frozenset[str]]) -> Any:
        """The framework's input for the group (stacked, reshaped, converted)."""

    @abstractmethod
    def _group_run(self, prepared: Any) -> Any:
        """Run the framework once; translate its exceptions to InferdError."""

    @abstractmethod
    def _group_outputs(
        self, requests: list[InferRequest], result: Any, wanted: list[frozenset[str]]
    ) -> list[list[Tensor]]:
        """Each request's output tensors (only those it asked for), split along the batch."""

    @abstractmethod
    def unload(self) -> None:
        """Drop what the instance holds of the framework."""

    # -- helpers for the subclasses' steps ---------------------------------------------------------
    def _stacked(self, requests: list[InferRequest], spec: TensorSpec) -> Array | None:
        """One input of the group in the framework's shape: a lone request's array as it came (a view
        over the received bytes), several stacked on dimension 0; ``reshape`` applied. None when the
        input was left out (an optional input: all requests of a group agree)."""
        t = requests[0].inputs.get(spec.name)
        if t is None:
            return None
        arr = t.array if len(requests) == 1 else stack([r.inputs[spec.name].array for r in requests])
        if spec.reshape is not None:
            arr = arr.reshape(reshape_shape(arr.shape, spec.dims, spec.reshape, self._batching))
        return arr

    def _split_outputs(
        self,
        requests: list[InferRequest],
        outputs: Iterable[tuple[TensorSpec, Array]],
        wanted: list[frozenset[str]],
    ) -> list[list[Tensor]]:
        """Each request's share of the group's ``outputs`` (spec, array in the framework's shape), cut
        along the batch into views, ``reshape`` undone, only the outputs each request asked for."""
        per_request: list[list[Tensor]] = [[] for _ in requests]
        sizes = [r.batch_size for r in requests]
        for spec, arr in outputs:
            name = spec.name
            parts = split(arr, sizes, name) if self._batching else [arr]
            for i, part in enumerate(parts):
                if name not in wanted[i]:
                    continue
                if spec.reshape is not None:
                    part = part.reshape(unreshape_shape(part.shape, spec.dims, spec.reshape, self._batching))
                per_request[i].append(Tensor(name, spec.datatype, part.shape, array=part))
        return per_request
