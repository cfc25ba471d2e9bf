"""InferRequest and RequestedOutput: what a frontend hands to the core."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

from inferd.core.tensor import Tensor
from inferd.errors import InvalidArgumentError

if TYPE_CHECKING:
    from inferd.core.response import InferResponse, ResponseStream

# Request flags (TRITONSERVER_RequestFlag)
SEQUENCE_START = 1
SEQUENCE_END = 2


class RequestTrace(Protocol):
    """A sampled request's trace (``inferd.trace``), as the core, the schedulers and backends see it."""

    def attach(self, request: InferRequest, model_name: str, model_version: str) -> None:
        """The core is about to queue ``request``."""
        ...

    def ended(self, stream: ResponseStream) -> None:
        """Its response path's end: the final response passed (core/response_path.py)."""
        ...

    @property
    def output_capture(self) -> Callable[[InferResponse], None] | None:
        """Its response path's stage that copies the outputs (None: none)."""
        ...

    def computed(self, start_ns: int, end_ns: int, timings: tuple[int, int, int] | None) -> None:
        """The execute that answered it (the instance pool's clock), with the backend's split."""
        ...

    def child(self) -> RequestTrace:
        """The trace of a request made for this one (an ensemble step, a BLS request)."""
        ...

    def context(self) -> str | None:
        """The OpenTelemetry context a model may pass on (JSON), None in Triton mode."""
        ...


class OutputTarget(Protocol):
    """Where a front end writes an output besides a system shared-memory view: a CUDA window
    (shm/cuda.py), which copies device to device where it can."""

    @property
    def nbytes(self) -> int: ...

    def write(self, t: Tensor) -> None: ...


#: a shared-memory window an output goes to
Target: TypeAlias = "memoryview | OutputTarget"


@dataclass(slots=True)
class RequestedOutput:
    """An output the client asked for; ``classification`` > 0 asks for top-N classes."""

    name: str
    classification: int = 0
    parameters: dict[str, Any] = field(default_factory=dict)
    #: where the frontend must write this output (a shared-memory window), None: in the response
    target: Target | None = None


@dataclass(slots=True, init=False)
class InferRequest:
    """One inference request, decoded from any frontend.

    ``outputs`` None means every output of the model. ``parameters`` holds only the custom
    (non-reserved) parameters, which the model sees. ``model_version`` "" means the default.
    Its own ``__init__`` (the dataclass's signature): mypyc leaves a generated one interpreted, and
    every request builds one of these.
    """

    model_name: str
    inputs: dict[str, Tensor]
    model_version: str = ""
    id: str = ""
    parameters: dict[str, Any] = field(default_factory=dict)
    outputs: list[RequestedOutput] | None = None
    correlation_id: int | str = 0
    flags: int = 0
    priority: int = 0
    timeout_us: int = 0
    #: names of ``outputs`` as a set, when the decoder already made one (saves each backend doing it)
    output_names: frozenset[str] | None = None
    #: set by a decoder when a key determines every property validation looks at (input names,
    #: datatypes, shapes and byte sizes, requested outputs), e.g. the JSON header of a binary HTTP
    #: request: the core validates a key once per model version
    validation_key: Hashable | None = None
    # filled by the core
    batch_size: int = 1
    t_start_ns: int = field(default_factory=time.monotonic_ns)
    t_queue_ns: int = 0
    stream: ResponseStream | None = None
    #: set by the front end that sampled the request for tracing (None: not traced)
    trace: RequestTrace | None = None

    def __init__(
        self,
        model_name: str,
        inputs: dict[str, Tensor],
        model_version: str = "",
        id: str = "",
        parameters: dict[str, Any] | None = None,
        outputs: list[RequestedOutput] | None = None,
        correlation_id: int | str = 0,
        flags: int = 0,
        priority: int = 0,
        timeout_us: int = 0,
        output_names: frozenset[str] | None = None,
        validation_key: Hashable | None = None,
        batch_size: int = 1,
        t_start_ns: int | None = None,
        t_queue_ns: int = 0,
        stream: ResponseStream | None = None,
        trace: RequestTrace | None = None,
    ) -> None:
        self.model_name = model_name
        self.inputs = inputs
        self.model_version = model_version
        self.id = id
        self.parameters = {} if parameters is None else parameters
        self.outputs = outputs
        self.correlation_id = correlation_id
        self.flags = flags
        self.priority = priority
        self.timeout_us = timeout_us
        self.output_names = output_names
        self.validation_key = validation_key
        self.batch_size = batch_size
        self.t_start_ns = time.monotonic_ns() if t_start_ns is None else t_start_ns
        self.t_queue_ns = t_queue_ns
        self.stream = stream
        self.trace = trace

    def requested_output_names(self, all_outputs: tuple[str, ...]) -> tuple[str, ...]:
        """Names of outputs to return: those asked for, else all of the model's."""
        if self.outputs is None:
            return all_outputs
        return tuple(o.name for o in self.outputs)


@dataclass(slots=True)
class RequestTemplate:
    """What a front end's decoding cache keeps of a decoded request (the HTTP header cache, the
    gRPC request cache): everything but the tensors, the id and the sequence id, which each request
    that matches brings; ``validation_key`` fixes what validation reads (with the tensor sizes the
    cache checks)."""

    model_name: str
    model_version: str
    parameters: dict[str, Any]
    outputs: list[RequestedOutput] | None
    correlation_id: int | str
    flags: int
    priority: int
    timeout_us: int
    output_names: frozenset[str] | None
    validation_key: Hashable

    @classmethod
    def of(cls, request: InferRequest, validation_key: Hashable) -> RequestTemplate:
        return cls(
            request.model_name,
            request.model_version,
            dict(request.parameters),  # (the request's own dict goes on to the model)
            request.outputs,
            request.correlation_id,
            request.flags,
            request.priority,
            request.timeout_us,
            request.output_names,
            validation_key,
        )

    def request(self, inputs: dict[str, Tensor], rid: str, correlation_id: int | str | None) -> InferRequest:
        """The request with these tensors and id (``correlation_id`` None: the template's)."""
        return InferRequest(
            self.model_name,
            inputs,
            self.model_version,
            rid,
            dict(self.parameters) if self.parameters else {},
            self.outputs,
            self.correlation_id if correlation_id is None else correlation_id,
            self.flags,
            self.priority,
            self.timeout_us,
            self.output_names,
            self.validation_key,
        )


_LEADING_INT = re.compile(r"\s*([+-]?[0-9]+)")
_INT64_MAX = 2**63 - 1


def parse_version(text: str) -> str:
    """A model version string as Triton reads it (``stoll``): "" and -1 are the default version."""
    if not text:
        return ""
    m = _LEADING_INT.match(text)
    if m is None or abs(int(m.group(1))) > _INT64_MAX:
        raise InvalidArgumentError(
            f"failed to get model version from specified version string '{text}' (details: stol), "
            "version should be an integral value > 0"
        )
    n = int(m.group(1))
    return "" if n == -1 else str(n)
