"""A SavedModel signature's inputs and outputs against the ModelConfig: auto-complete and load checks.

Pure but for :func:`signature_tensors`, which reads the ``TensorSpec``s of a loaded signature
(a concrete function). Triton's tensorflow backend matches config inputs and outputs to the
signature's input and output *keys* (not the graph's tensor names). Auto-complete and the check
at load are ``backends/signature.py``'s (the rules the ONNX Runtime backend applies: max_batch_size
and dynamic batching when every tensor has a variable first dimension), worded here for a
signature; the check names the tensor the config contradicts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from inferd.backends import signature
from inferd.backends.signature import GraphTensor
from inferd.errors import InvalidArgumentError

if TYPE_CHECKING:
    from inferd.repository.config.schema import ModelConfig

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


def check_config_against_signature(
    config: ModelConfig, inputs: Sequence[GraphTensor], outputs: Sequence[GraphTensor], signature_def: str
) -> None:
    """Raise InvalidArgumentError naming the first tensor where ``config`` and the signature disagree."""
    signature.check_config_against_model(
        config,
        inputs,
        outputs,
        backend="tensorflow",
        what=f"the SavedModel signature '{signature_def}'",
        batch_hint="save the signature with None as its first dimension",
        names_hint="(config names are the signature's keys)",
    )
