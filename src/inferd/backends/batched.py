"""The execute loop the native backends share: group, run each group once, answer every request.

A batch from the scheduler may hold requests of different shapes; ``batch.group_compatible``
splits it into groups that stack. Each group is prepared (inputs stacked, reshaped), run once by
the framework, and its outputs split back per request. An error answers every request of its
group and no other. Subclasses say how to prepare, run and split, with the shared steps here
(``_stacked``: one input stacked and reshaped; ``_split_outputs``: the outputs cut back per request);
timings feed the statistics.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import Any, Protocol

import numpy as np

from inferd.core.request import InferRequest
from inferd.core.response import InferResponse
from inferd.core.tensor import Tensor
from inferd.errors import InferdError
from inferd.scheduling import batch as batching


class IOSpec(Protocol):
    """What the shared loop needs of a backend's input or output description."""

    @property
    def name(self) -> str: ...
    @property
    def datatype(self) -> Any: ...
    @property
    def dims(self) -> tuple[int, ...]: ...
    @property
    def reshape(self) -> tuple[int, ...] | None: ...


class BatchedInstance(ABC):
    """Base of a native backend's instance. Subclasses set ``model`` and call ``_init_batched``."""

    #: the pool may run short executes on the loop (it keeps long ones in their threads); a backend
    #: whose every run costs more than a thread hand-off leaves this False
    inline_ok: bool = False
    #: a native model never calls another model
    uses_bls: bool = False
    model: Any  # the backend's model: has ``version_str``

    def _init_batched(self, max_batch_size: int, output_names: list[str]) -> None:
        self.last_timings: tuple[int, int, int] = (0, 0, 0)
        self._prep_ns = self._infer_ns = 0
        self._batching = max_batch_size > 0
        self._all_outputs = frozenset(output_names)

    def execute(self, requests: list[InferRequest]) -> list[InferResponse]:
        t0 = time.monotonic_ns()
        self._prep_ns = self._infer_ns = 0
        slots: list[InferResponse | None] = [None] * len(requests)
        for group in batching.group_compatible(requests, self._batching):
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

    # -- helpers for the subclasses' steps ---------------------------------------------------------
    def _stacked(self, requests: list[InferRequest], spec: IOSpec) -> np.ndarray[Any, Any] | None:
        """One input of the group in the framework's shape: a lone request's array as it came (a view
        over the received bytes), several stacked on dimension 0; ``reshape`` applied. None when the
        input was left out (an optional input: all requests of a group agree)."""
        t = requests[0].inputs.get(spec.name)
        if t is None:
            return None
        arr = t.array if len(requests) == 1 else batching.stack([r.inputs[spec.name].array for r in requests])
        if spec.reshape is not None:
            arr = arr.reshape(batching.reshape_shape(arr.shape, spec.dims, spec.reshape, self._batching))
        return arr

    def _split_outputs(
        self,
        requests: list[InferRequest],
        outputs: Iterable[tuple[IOSpec, np.ndarray[Any, Any]]],
        wanted: list[frozenset[str]],
    ) -> list[list[Tensor]]:
        """Each request's share of the group's ``outputs`` (spec, array in the framework's shape), cut
        along the batch into views, ``reshape`` undone, only the outputs each request asked for."""
        per_request: list[list[Tensor]] = [[] for _ in requests]
        sizes = [r.batch_size for r in requests]
        for spec, arr in outputs:
            name = spec.name
            parts = batching.split(arr, sizes, name) if self._batching else [arr]
            for i, part in enumerate(parts):
                if name not in wanted[i]:
                    continue
                if spec.reshape is not None:
                    part = part.reshape(
                        batching.unreshape_shape(part.shape, spec.dims, spec.reshape, self._batching)
                    )
                per_request[i].append(Tensor(name, spec.datatype, part.shape, array=part))
        return per_request
