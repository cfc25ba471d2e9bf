"""A SavedModel signature's inputs and outputs against the ModelConfig: auto-complete and load checks.

Pure but for :func:`signature_tensors`, which reads the ``TensorSpec``s of a loaded signature
(a concrete function). Triton's tensorflow backend matches config inputs and outputs to the
signature's input and output *keys* (not the graph's tensor names), and auto-completes with the
rules the ONNX Runtime backend applies (``onnxruntime/graph.py``: max_batch_size and dynamic
batching when every tensor has a variable first dimension). The check at load names the tensor
the config contradicts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from inferd.backends.onnxruntime.graph import GraphTensor
from inferd.core.types import BY_CONFIG_VALUE
from inferd.errors import InvalidArgumentError

#: TensorFlow dtype names -> ModelConfig data types (Triton's tensorflow backend's set)
_TF_TYPES: dict[str, str] = {
    "bool": "TYPE_BOOL",
    "uint8": "TYPE_UINT8",
    "uint16": "TYPE_UINT16",
    "uint32": "TYPE_UINT32",
    "uint64": "TYPE_UINT64",
    "int8": "TYPE_INT8",
    "int16": "TYPE_INT16",
    "int32": "TYPE_INT32",
    "int64": "TYPE_INT64",
    "float16": "TYPE_FP16",
    "float32": "TYPE_FP32",
    "float64": "TYPE_FP64",
    "string": "TYPE_STRING",
}


def _tensor(key: str, spec: Any, model: str, kind: str) -> GraphTensor:
    dtype = getattr(spec, "dtype", None)
    if dtype is None:  # a signature output that is not a tensor (a ragged or sparse value)
        return GraphTensor(key, "", (), type(spec).__name__)
    rank = spec.shape.rank
    if rank is None:
        raise InvalidArgumentError(
            f"unable to load model '{model}': {kind} '{key}' of the SavedModel signature has an unknown rank; "
            "save the model with an input_signature that fixes the number of dimensions"
        )
    dims = tuple(-1 if d is None else int(d) for d in spec.shape.as_list())
    return GraphTensor(key, _TF_TYPES.get(dtype.name, ""), dims, dtype.name)


def signature_tensors(fn: Any, model: str) -> tuple[list[GraphTensor], list[GraphTensor]]:
    """Inputs and outputs of a loaded signature, by key (sorted: a SignatureDef's maps have no order)."""
    args, kwargs = fn.structured_input_signature
    if args:
        raise InvalidArgumentError(
            f"unable to load model '{model}': the SavedModel signature takes positional arguments; "
            "serve a signature saved by tf.saved_model.save (keyword inputs)"
        )
    outputs = fn.structured_outputs
    if not isinstance(outputs, dict):
        raise InvalidArgumentError(
            f"unable to load model '{model}': the SavedModel signature does not return a dict of named "
            "outputs; return a dict from the signature function"
        )
    return (
        [_tensor(k, kwargs[k], model, "input") for k in sorted(kwargs)],
        [_tensor(k, outputs[k], model, "output") for k in sorted(outputs)],
    )


def _shape(dims: Sequence[int]) -> str:
    return "[" + ",".join(str(d) for d in dims) + "]"


def check_config_against_signature(
    config: Any, inputs: Sequence[GraphTensor], outputs: Sequence[GraphTensor], signature: str
) -> None:
    """Raise InvalidArgumentError naming the first tensor where ``config`` and the signature disagree."""
    prefix = f"unable to load model '{config.name}'"
    what = f"the SavedModel signature '{signature}'"
    mbs = int(config.max_batch_size)
    configured = {i.name for i in config.input}
    missing = [t.name for t in inputs if t.name not in configured]
    if missing:
        raise InvalidArgumentError(
            f"{prefix}: input(s) {', '.join(repr(m) for m in missing)} of {what} are not in the model "
            f"configuration, which lists {sorted(configured) or 'no inputs'}: add them to config.pbtxt"
        )
    for kind, listed, tensors in (("input", config.input, inputs), ("output", config.output, outputs)):
        by_name = {t.name: t for t in tensors}
        for io in listed:
            t = by_name.get(io.name)
            if t is None:
                raise InvalidArgumentError(
                    f"{prefix}: configuration {kind} '{io.name}' is not an {kind} of {what}, whose {kind}s "
                    f"are: {', '.join(by_name) or '(none)'} (config names are the signature's keys)"
                )
            if kind == "input" and io.optional:
                raise InvalidArgumentError(
                    f"{prefix}: input '{io.name}' is optional, which the tensorflow backend does not serve"
                )
            _check_tensor(prefix, kind, io, t, mbs)


def _check_tensor(prefix: str, kind: str, io: Any, t: GraphTensor, mbs: int) -> None:
    want = BY_CONFIG_VALUE.get(io.data_type)
    want_name = want.config if want is not None else "TYPE_INVALID"
    if not t.is_tensor:
        raise InvalidArgumentError(
            f"{prefix}: {kind} '{io.name}' has type {t.onnx_type}, which the tensorflow backend does not serve"
        )
    if want_name != t.data_type:
        raise InvalidArgumentError(
            f"{prefix}, configuration expects datatype {want_name} for {kind} '{io.name}', model provides "
            f"{t.data_type}"
        )
    dims = list(io.reshape.shape) if io.HasField("reshape") else list(io.dims)
    model = list(t.dims)
    if not model and mbs == 0 and all(d == 1 for d in dims):
        return  # a scalar: dims [1]
    if mbs > 0 and (not model or model[0] != -1):
        raise InvalidArgumentError(
            f"{prefix}, model configuration supports batching but first dimension of tensor '{io.name}' "
            f"expected by the model is not a variable-size batch dimension: {_shape(model)} (set "
            "max_batch_size to 0 and list the full shape, or save the signature with None as its first "
            "dimension)"
        )
    full = ([-1] if mbs > 0 else []) + dims
    ok = len(model) == len(full) and all(m == -1 or m == d for m, d in zip(model, full, strict=True))
    if not ok:
        batch_note = " (with the batch dimension of max_batch_size > 0 in front)" if mbs > 0 else ""
        raise InvalidArgumentError(
            f"{prefix}, {kind} '{io.name}': the model expects shape {_shape(model)} but the model "
            f"configuration specifies {_shape(full)}{batch_note}; fix dims (or reshape) in config.pbtxt"
        )
