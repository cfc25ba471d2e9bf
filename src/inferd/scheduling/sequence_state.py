"""What the sequence batcher adds to a request: control inputs and implicit state.

Both come from the model's ``sequence_batching`` and are made once at load.

**Control inputs** (``control_input``): tensors the model reads to know where a request stands in
its sequence, synthesized per request as Triton's ``SetControlTensors`` makes them, with the
control's data type and shape ``[1]`` (``[1, 1]`` when the model batches):

- ``CONTROL_SEQUENCE_START``: true on the first request of a sequence;
- ``CONTROL_SEQUENCE_END``: true on its last;
- ``CONTROL_SEQUENCE_READY``: true on every real request, false on the filler requests the ``direct``
  strategy puts in the empty slots below a busy one (the model must not read their other inputs);
- ``CONTROL_SEQUENCE_CORRID``: the correlation ID, as ``TYPE_UINT64``/``INT64``/``UINT32``/``INT32``
  (the ID's 64 bits, truncated as the reference's ``memcpy`` truncates them) or ``TYPE_STRING``.

The true/false values are the config's ``int32_false_true``, ``fp32_false_true`` or
``bool_false_true``. A string ID sent to a numeric CORRID reaches the model as the reference's
layout gives it: the ID's 4-byte length followed by its first bytes, read as the control's type.

**Implicit state** (``state``): an input the model reads and an output it writes, both hidden from
the client. A sequence starts from the state's ``initial_state`` (``zero_data``, or ``data_file``
under ``<model>/initial_state/``), or zeros; the state output of each request becomes the state
input of the next request of the same sequence (its shape too: a variable dimension may grow). The
load-time checks of ``initial_state`` and their texts are ``GenerateInitialStateData``'s.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from inferd.core.request import SEQUENCE_END, SEQUENCE_START, InferRequest
from inferd.core.response import InferResponse
from inferd.core.tensor import Tensor, deserialize_bytes
from inferd.core.types import BY_CONFIG_VALUE, BYTES, DataType
from inferd.errors import InvalidArgumentError

if TYPE_CHECKING:
    from inferd.repository.config.schema import ModelConfig, ModelSequenceBatching

Array = np.ndarray[Any, Any]

# ModelSequenceBatching.Control.Kind
CONTROL_SEQUENCE_START = 0
CONTROL_SEQUENCE_READY = 1
CONTROL_SEQUENCE_END = 2
CONTROL_SEQUENCE_CORRID = 3

INITIAL_STATE_FOLDER = "initial_state"

_INT32 = BY_CONFIG_VALUE[8]
_FP32 = BY_CONFIG_VALUE[11]
_BOOL = BY_CONFIG_VALUE[1]
_LEN = struct.Struct("<I")


def _constant(name: str, datatype: DataType, value: Any, shape: tuple[int, ...]) -> Tensor:
    """A control tensor shared by every request that gets it: read-only, as received inputs are."""
    arr = np.full(shape, value, dtype=datatype.numpy)
    arr.flags.writeable = False
    return Tensor(name, datatype, shape, array=arr)


@dataclass(frozen=True, slots=True)
class _BoolControl:
    name: str
    kind: int
    datatype: DataType
    false: Any
    true: Any


class SequenceControls:
    """The control tensors of one model: the four flag combinations made once, CORRID per request."""

    def __init__(self, config: ModelConfig) -> None:
        batching = int(config.max_batch_size) > 0
        self.shape: tuple[int, ...] = (1, 1) if batching else (1,)
        bools: list[_BoolControl] = []
        f: float  # a control's false and true values: int32, fp32 or bool
        t: float
        self.corrid_name = ""
        self.corrid_type: DataType | None = None
        for control_input in config.sequence_batching.control_input:
            for control in control_input.control:
                if control.kind == CONTROL_SEQUENCE_CORRID:
                    self.corrid_name = control_input.name
                    self.corrid_type = BY_CONFIG_VALUE[int(control.data_type)]
                elif len(control.int32_false_true) == 2:
                    f, t = control.int32_false_true
                    bools.append(_BoolControl(control_input.name, control.kind, _INT32, f, t))
                elif len(control.fp32_false_true) == 2:
                    f, t = control.fp32_false_true
                    bools.append(_BoolControl(control_input.name, control.kind, _FP32, f, t))
                elif len(control.bool_false_true) == 2:
                    f, t = control.bool_false_true
                    bools.append(_BoolControl(control_input.name, control.kind, _BOOL, f, t))
        self.names = frozenset([c.name for c in bools] + ([self.corrid_name] if self.corrid_name else []))

        def combination(start: bool, end: bool, ready: bool) -> dict[str, Tensor]:
            value = {CONTROL_SEQUENCE_START: start, CONTROL_SEQUENCE_END: end, CONTROL_SEQUENCE_READY: ready}
            return {
                c.name: _constant(c.name, c.datatype, c.true if value[c.kind] else c.false, self.shape)
                for c in bools
            }

        # indexed by the request's flags (START = 1, END = 2); [4]: a filler, not ready
        self._by_flags = [
            combination(False, False, True),
            combination(True, False, True),
            combination(False, True, True),
            combination(True, True, True),
            combination(False, False, False),
        ]
        self._corrid_zero = self._corrid(0) if self.corrid_name else None

    def for_request(self, request: InferRequest) -> dict[str, Tensor]:
        """The controls of a real request of a sequence (its flags and correlation ID)."""
        controls = self._by_flags[request.flags & (SEQUENCE_START | SEQUENCE_END)]
        if not self.corrid_name:
            return controls
        return {**controls, self.corrid_name: self._corrid(request.correlation_id)}

    def for_filler(self) -> dict[str, Tensor]:
        """The controls of a filler (READY false, START and END false, CORRID 0)."""
        controls = self._by_flags[4]
        if self._corrid_zero is None:
            return controls
        return {**controls, self.corrid_name: self._corrid_zero}

    def _corrid(self, cid: int | str) -> Tensor:
        dt = self.corrid_type
        assert dt is not None
        if dt is BYTES:
            text = cid if isinstance(cid, str) else str(cid)
            arr = np.array([text.encode()], dtype=np.object_).reshape(self.shape)
            return Tensor(self.corrid_name, dt, self.shape, array=arr)
        if isinstance(cid, str):
            raw = _LEN.pack(len(cid.encode())) + cid.encode()
        else:
            raw = struct.pack("<Q", cid % 2**64)
        raw = raw[: dt.itemsize].ljust(dt.itemsize, b"\0")
        arr = np.frombuffer(raw, dtype=dt.numpy.newbyteorder("<")).astype(dt.numpy).reshape(self.shape)
        return Tensor(self.corrid_name, dt, self.shape, array=arr)


@dataclass(frozen=True, slots=True)
class StateSpec:
    """One ``state`` entry: the tensors' names, type, dims and what a sequence starts from."""

    input_name: str
    output_name: str
    datatype: DataType
    initial: Array  # batch dimension 1 in front when the model batches; read-only

    def initial_tensor(self) -> Tensor:
        return Tensor(self.input_name, self.datatype, tuple(self.initial.shape), array=self.initial)


def _invalid(message: str) -> InvalidArgumentError:
    return InvalidArgumentError(message)


def state_specs(config: ModelConfig, model_dir: Path | None) -> list[StateSpec]:
    """The model's implicit states, with their initial values (files read now); the reference's
    load errors for a bad ``initial_state``."""
    batching = int(config.max_batch_size) > 0
    specs: list[StateSpec] = []
    seen: set[str] = set()
    for state in config.sequence_batching.state:
        datatype = BY_CONFIG_VALUE[int(state.data_type)]
        name = state.input_name
        if len(state.initial_state) > 1:
            raise _invalid(
                f"initial_state field for state input '{name}' must contain exactly one or zero element. "
                f"Found '{len(state.initial_state)}' elements."
            )
        head = [1] if batching else []
        if len(state.initial_state) == 1:
            initial = _initial_data(state, state.initial_state[0], datatype, head, seen, model_dir)
        else:
            shape = tuple(head + [1 if d == -1 else int(d) for d in state.dims])
            initial = _zeros(datatype, shape)
        initial.flags.writeable = False
        specs.append(StateSpec(name, state.output_name, datatype, initial))
    return specs


def _zeros(datatype: DataType, shape: tuple[int, ...]) -> Array:
    if datatype is BYTES:
        arr = np.empty(shape, dtype=np.object_)
        arr.fill(b"")
        return arr
    return np.zeros(shape, dtype=datatype.numpy)


def _initial_data(
    state: ModelSequenceBatching.State,
    initial: ModelSequenceBatching.InitialState,
    datatype: DataType,
    head: list[int],
    seen: set[str],
    model_dir: Path | None,
) -> Array:
    """``GenerateInitialStateData``: the checks in its order, then the data."""
    name = state.input_name
    if initial.data_type != state.data_type:
        raise _invalid(
            f"The data type used for 'initial_state' field of state '{name}' does not match the state data "
            "type."
        )
    if not initial.name:
        raise _invalid(f"Field 'name' must be set when using initial_state for state input '{name}'.")
    if name in seen:
        raise _invalid(f"State input name '{name}' specified more than once.")
    seen.add(name)
    if len(initial.dims) != len(state.dims):
        raise _invalid(
            "Number of dimensions in 'initial_state' doesn't match the size of 'state' dimensions for state "
            f"input '{name}'. {len(initial.dims)} != {len(state.dims)}"
        )
    dims: list[int] = []
    for d, sd in zip(initial.dims, state.dims, strict=True):
        if d == -1:
            raise _invalid(
                f"'initial_state' field for state input name '{name}' contains variable dimensions."
            )
        if sd != -1 and d != sd:
            raise _invalid(
                f"'initial_state' dim for input name '{name}' doesn't match 'state' dim description. "
                f"{d} != {sd}"
            )
        dims.append(int(d))
    shape = tuple(head + dims)
    count = int(np.prod(dims, dtype=np.int64)) if dims else 1
    which = initial.WhichOneof("state_data")
    if which == "zero_data":
        return _zeros(datatype, shape)
    if which == "data_file":
        path = (model_dir or Path(".")) / INITIAL_STATE_FOLDER / initial.data_file
        try:
            data = path.read_bytes()
        except OSError as e:
            raise _invalid(f"failed to read initial state file '{path}': {e.strerror or e}") from e
        if datatype is BYTES:
            try:
                return deserialize_bytes(data, count).reshape(shape)
            except ValueError as e:
                raise _invalid(f"initial_state file '{initial.data_file}' for state '{name}': {e}") from e
        size = count * datatype.itemsize
        if size > len(data):
            raise _invalid(
                f"initial_state setting expects {size} bytes, but the data provided from "
                f"{initial.data_file}only has {len(data)} bytes."
            )
        return np.frombuffer(data[:size], dtype=datatype.numpy).reshape(shape).copy()
    raise _invalid(f"initial_state setting expects state'{name}' to have state_data set")


class SequenceStates:
    """One sequence's current state inputs (what its next request reads)."""

    __slots__ = ("current",)

    def __init__(self, specs: list[StateSpec]) -> None:
        self.current = {s.input_name: s.initial_tensor() for s in specs}

    def reset(self, specs: list[StateSpec]) -> None:
        self.current = {s.input_name: s.initial_tensor() for s in specs}


def take_states(response: InferResponse, specs: list[StateSpec], states: SequenceStates | None) -> None:
    """Move the state outputs of ``response`` into ``states`` (the next request's inputs) and out of
    what the client gets. A state the model did not return keeps its value, as in the reference."""
    by_output = {s.output_name: s for s in specs}
    kept: list[Tensor] = []
    for t in response.outputs:
        spec = by_output.get(t.name)
        if spec is None:
            kept.append(t)
            continue
        if states is not None:
            # a copy: the output may be a view over a batch's array or over shared memory that is
            # reused once the response is gone, and the state outlives it
            arr = np.array(t.array, copy=True)
            arr.flags.writeable = False
            states.current[spec.input_name] = Tensor(spec.input_name, t.datatype, tuple(arr.shape), array=arr)
    response.outputs = kept


def filler(representative: InferRequest, controls: dict[str, Tensor]) -> InferRequest:
    """A request for an empty slot of a ``direct`` batch: the shapes and types of ``representative``'s
    inputs (state inputs included) filled with zeros, ``controls`` not ready, correlation ID 0, no
    flags and nobody to answer (its response is dropped)."""
    inputs = {
        name: Tensor(name, t.datatype, t.shape, array=_zeros(t.datatype, t.shape))
        for name, t in representative.inputs.items()
    }
    inputs.update(controls)
    return InferRequest(
        model_name=representative.model_name,
        inputs=inputs,
        model_version=representative.model_version,
        outputs=representative.outputs,
        output_names=representative.output_names,
        batch_size=1,
    )
