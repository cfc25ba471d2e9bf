"""An OpenVINO model's inputs and outputs against the ModelConfig: auto-complete and load-time checks.

Pure but for :func:`model_signature`, which reads the ports of an ``openvino.Model``. Auto-complete
uses the reference's rules as the ONNX Runtime backend applies them (``onnxruntime/graph.py``:
max_batch_size and dynamic batching when every tensor has a variable first dimension, inputs and
outputs listed from the model); the check at load names the tensor the config contradicts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from inferd.backends.onnxruntime.graph import GraphTensor
from inferd.core.types import BY_CONFIG_VALUE
from inferd.errors import InvalidArgumentError

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


def _shape(dims: Sequence[int]) -> str:
    return "[" + ",".join(str(d) for d in dims) + "]"


def check_config_against_model(
    config: Any, inputs: Sequence[GraphTensor], outputs: Sequence[GraphTensor]
) -> None:
    """Raise InvalidArgumentError naming the first tensor where ``config`` and the model disagree."""
    prefix = f"unable to load model '{config.name}'"
    mbs = int(config.max_batch_size)
    configured = {i.name for i in config.input}
    missing = [t.name for t in inputs if t.name not in configured]
    if missing:
        raise InvalidArgumentError(
            f"{prefix}: the OpenVINO model's input(s) {', '.join(repr(m) for m in missing)} are not in the "
            f"model configuration, which lists {sorted(configured) or 'no inputs'}: add them to config.pbtxt"
        )
    for kind, listed, tensors in (("input", config.input, inputs), ("output", config.output, outputs)):
        by_name = {t.name: t for t in tensors}
        for io in listed:
            t = by_name.get(io.name)
            if t is None:
                raise InvalidArgumentError(
                    f"{prefix}: configuration {kind} '{io.name}' is not an {kind} of the OpenVINO model, whose "
                    f"{kind}s are: {', '.join(by_name) or '(none)'}"
                )
            if kind == "input" and io.optional:
                raise InvalidArgumentError(
                    f"{prefix}: input '{io.name}' is optional, which the openvino backend does not serve"
                )
            _check_tensor(prefix, kind, io, t, mbs)


def _check_tensor(prefix: str, kind: str, io: Any, t: GraphTensor, mbs: int) -> None:
    want = BY_CONFIG_VALUE.get(io.data_type)
    want_name = want.config if want is not None else "TYPE_INVALID"
    if not t.is_tensor:
        raise InvalidArgumentError(
            f"{prefix}: {kind} '{io.name}' has element type {t.onnx_type}, which the openvino backend does "
            "not serve"
        )
    if want_name != t.data_type:
        raise InvalidArgumentError(
            f"{prefix}, configuration expects datatype {want_name} for {kind} '{io.name}', model provides "
            f"{t.data_type}"
        )
    dims = list(io.reshape.shape) if io.HasField("reshape") else list(io.dims)
    model = list(t.dims)
    full = ([-1] if mbs > 0 else []) + dims
    if not model and mbs == 0 and all(d == 1 for d in dims):
        return  # a scalar: dims [1]
    if mbs > 0 and (not model or model[0] != -1):
        raise InvalidArgumentError(
            f"{prefix}, model configuration supports batching but first dimension of tensor '{io.name}' "
            f"expected by the model is not a variable-size batch dimension: {_shape(model)} (set "
            "max_batch_size to 0 and list the full shape, or convert the model with a dynamic batch axis)"
        )
    ok = len(model) == len(full) and all(m == -1 or m == d for m, d in zip(model, full, strict=True))
    if not ok:
        batch_note = " (with the batch dimension of max_batch_size > 0 in front)" if mbs > 0 else ""
        raise InvalidArgumentError(
            f"{prefix}, {kind} '{io.name}': the model expects shape {_shape(model)} but the model "
            f"configuration specifies {_shape(full)}{batch_note}; fix dims (or reshape) in config.pbtxt"
        )
