"""An OpenVINO model's inputs and outputs against the ModelConfig: auto-complete and load-time checks.

Pure but for :func:`model_signature`, which reads the ports of an ``openvino.Model``. Auto-complete
and the check at load are ``backends/signature.py``'s (the reference's rules as the ONNX Runtime
backend applies them: max_batch_size and dynamic batching when every tensor has a variable first
dimension, inputs and outputs listed from the model), worded here for OpenVINO; the check names the
tensor the config contradicts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from inferd.backends import signature
from inferd.backends.signature import GraphTensor
from inferd.errors import InvalidArgumentError

if TYPE_CHECKING:
    from inferd.repository.config.schema import ModelConfig

#: OpenVINO element type names -> ModelConfig data types
_OV_TYPES: dict[str, str] = {
    "boolean": "TYPE_BOOL",
    "u8": "TYPE_UINT8",
    "u16": "TYPE_UINT16",
    "u32": "TYPE_UINT32",
    "u64": "TYPE_UINT64",
    "i8": "TYPE_INT8",
    "i16": "TYPE_INT16",
    "i32": "TYPE_INT32",
    "i64": "TYPE_INT64",
    "f16": "TYPE_FP16",
    "f32": "TYPE_FP32",
    "f64": "TYPE_FP64",
}


def _tensor(port: Any, model: str, kind: str) -> GraphTensor:
    type_name = port.get_element_type().get_type_name()
    shape = port.get_partial_shape()
    name = port.get_any_name()
    if shape.rank.is_dynamic:
        raise InvalidArgumentError(
            f"unable to load model '{model}': {kind} '{name}' has a dynamic rank; convert the model with a "
            "fixed number of dimensions (openvino.convert_model(..., input=...))"
        )
    dims = tuple(d.get_length() if d.is_static else -1 for d in shape)
    return GraphTensor(name, _OV_TYPES.get(type_name, ""), dims, type_name)


def model_signature(model: Any, name: str) -> tuple[list[GraphTensor], list[GraphTensor]]:
    """Inputs and outputs of an ``openvino.Model``, in model order."""
    return (
        [_tensor(p, name, "input") for p in model.inputs],
        [_tensor(p, name, "output") for p in model.outputs],
    )


def check_config_against_model(
    config: ModelConfig, inputs: Sequence[GraphTensor], outputs: Sequence[GraphTensor]
) -> None:
    """Raise InvalidArgumentError naming the first tensor where ``config`` and the model disagree."""
    signature.check_config_against_model(
        config,
        inputs,
        outputs,
        backend="openvino",
        what="the OpenVINO model",
        missing="{what}'s input(s) {names}",
        batch_hint="convert the model with a dynamic batch axis",
        type_word="element type",
    )
