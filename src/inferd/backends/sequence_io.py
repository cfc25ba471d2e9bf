"""The tensors sequence batching adds to a native model besides its config's inputs and outputs.

A model with ``sequence_batching`` reads its control inputs (``control_input``: START, END, READY,
CORRID) and its implicit state inputs (``state.input_name``) as graph inputs, and writes its state
outputs (``state.output_name``) as graph outputs; none of them is listed under ``input`` or
``output``, and the client never sends or sees them (the sequence batcher, ``scheduling/sequence.py``,
adds them to each request and takes the states out of each response). A native backend feeds and
fetches them by these specs: shape ``[1]`` per batch item for a control, the state's ``dims``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from inferd.core.tensor import TensorSpec
from inferd.core.types import BY_CONFIG_VALUE, DataType

if TYPE_CHECKING:
    from inferd.repository.config.schema import ModelConfig, ModelSequenceBatching

_CORRID = 3  # ModelSequenceBatching.Control.CONTROL_SEQUENCE_CORRID
_INT32, _FP32, _BOOL = BY_CONFIG_VALUE[8], BY_CONFIG_VALUE[11], BY_CONFIG_VALUE[1]


def _control_type(control: ModelSequenceBatching.Control) -> DataType:
    if control.kind == _CORRID:
        return BY_CONFIG_VALUE[int(control.data_type)]
    if len(control.fp32_false_true):
        return _FP32
    if len(control.bool_false_true):
        return _BOOL
    return _INT32


def sequence_tensors(config: ModelConfig) -> tuple[list[TensorSpec], list[TensorSpec]]:
    """The inputs (controls, then states) and outputs (states) sequence batching adds; none without it."""
    if not config.HasField("sequence_batching"):
        return [], []
    sb = config.sequence_batching
    inputs: list[TensorSpec] = []
    for control_input in sb.control_input:
        for control in control_input.control[:1]:  # validated: one kind per tensor
            inputs.append(TensorSpec(control_input.name, _control_type(control), (1,)))
    outputs: list[TensorSpec] = []
    for state in sb.state:
        datatype = BY_CONFIG_VALUE[int(state.data_type)]
        dims = tuple(int(d) for d in state.dims)
        inputs.append(TensorSpec(state.input_name, datatype, dims))
        outputs.append(TensorSpec(state.output_name, datatype, dims))
    return inputs, outputs
