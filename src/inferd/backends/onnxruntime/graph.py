"""The ONNX graph's signature against the ModelConfig: Triton's load-time checks.

Pure: works on :class:`GraphTensor` lists (read from a session by :func:`graph_signature`) and a
ModelConfig; imports no framework. The rules are Triton ``onnxruntime_backend``'s
(``ValidateInputs`` / ``ValidateOutputs``), with reasons that say what to fix; auto-complete
(``AutoCompleteConfig``) is ``backends/signature.py``'s ``complete_config``, shared with the
OpenVINO and TensorFlow backends.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from inferd.backends.signature import GraphTensor, check_datatype, check_shape, config_dims, shape_text
from inferd.core.tensor import TensorSpec
from inferd.errors import InvalidArgumentError

if TYPE_CHECKING:
    from inferd.repository.config.schema import ModelConfig, ModelInput, ModelOutput

#: ONNX Runtime's type strings -> ModelConfig data types
_ORT_TYPES: dict[str, str] = {
    "tensor(bool)": "TYPE_BOOL",
    "tensor(uint8)": "TYPE_UINT8",
    "tensor(uint16)": "TYPE_UINT16",
    "tensor(uint32)": "TYPE_UINT32",
    "tensor(uint64)": "TYPE_UINT64",
    "tensor(int8)": "TYPE_INT8",
    "tensor(int16)": "TYPE_INT16",
    "tensor(int32)": "TYPE_INT32",
    "tensor(int64)": "TYPE_INT64",
    "tensor(float16)": "TYPE_FP16",
    "tensor(float)": "TYPE_FP32",
    "tensor(double)": "TYPE_FP64",
    "tensor(string)": "TYPE_STRING",
}


# --------------------------------------------------------------------------------------------------
# The graph's signature


def _graph_tensor(arg: Any) -> GraphTensor:
    dims = tuple(d if isinstance(d, int) and d >= 0 else -1 for d in (arg.shape or []))
    return GraphTensor(arg.name, _ORT_TYPES.get(arg.type, ""), dims, arg.type)


def graph_signature(session: Any) -> tuple[list[GraphTensor], list[GraphTensor], list[GraphTensor]]:
    """Inputs, outputs and overridable initializers of a session, in graph order."""
    return (
        [_graph_tensor(a) for a in session.get_inputs()],
        [_graph_tensor(a) for a in session.get_outputs()],
        [_graph_tensor(a) for a in session.get_overridable_initializers()],
    )


# --------------------------------------------------------------------------------------------------
# Load-time check of the config against the graph (Triton ``ValidateInputs`` / ``ValidateOutputs``)


def check_config_against_graph(
    config: ModelConfig,
    inputs: Sequence[GraphTensor],
    outputs: Sequence[GraphTensor],
    initializers: Sequence[GraphTensor] = (),
    sequence_inputs: Sequence[TensorSpec] = (),
    sequence_outputs: Sequence[TensorSpec] = (),
) -> None:
    """Raise InvalidArgumentError naming the first tensor where ``config`` and the graph disagree.

    ``sequence_inputs``/``sequence_outputs``: what sequence batching adds (``backends/sequence_io.py``):
    graph tensors the config does not list as inputs or outputs, which must be in the graph."""
    name = config.name
    prefix = f"unable to load model '{name}'"
    mbs = int(config.max_batch_size)
    graph_inputs = {t.name: t for t in inputs}
    overridable = {t.name: t for t in initializers}
    configured = {i.name for i in config.input} | {s.name for s in sequence_inputs}
    missing = [t.name for t in inputs if t.name not in configured]
    if missing:
        raise InvalidArgumentError(
            f"{prefix}: the ONNX graph's input(s) {', '.join(repr(m) for m in missing)} are not in the "
            f"model configuration, which lists {sorted(configured) or 'no inputs'}: add them to config.pbtxt"
        )
    io: ModelInput | ModelOutput  # the input loop's, then the output loop's
    for io in config.input:
        g = graph_inputs.get(io.name) or overridable.get(io.name)
        if g is None:
            raise InvalidArgumentError(
                f"{prefix}: configuration input '{io.name}' is not an input of the ONNX graph, whose "
                f"inputs are: {', '.join(graph_inputs) or '(none)'}"
            )
        if io.optional and mbs != 0:
            raise InvalidArgumentError(
                f"{prefix}, optional input '{io.name}' is not supported for models that support batching"
            )
        _check_tensor(prefix, "input", io, g, mbs)
    graph_outputs = {t.name: t for t in outputs}
    for io in config.output:
        g = graph_outputs.get(io.name)
        if g is None:
            raise InvalidArgumentError(
                f"{prefix}: configuration output '{io.name}' is not an output of the ONNX graph, whose "
                f"outputs are: {', '.join(graph_outputs) or '(none)'}"
            )
        _check_tensor(prefix, "output", io, g, mbs)
    for kind, specs, tensors in (
        ("input", sequence_inputs, graph_inputs),
        ("output", sequence_outputs, graph_outputs),
    ):
        for spec in specs:
            _check_sequence_tensor(prefix, kind, spec, tensors)


def _check_sequence_tensor(prefix: str, kind: str, spec: TensorSpec, tensors: dict[str, GraphTensor]) -> None:
    """A control or state tensor: in the graph, with the type sequence_batching gives it."""
    g = tensors.get(spec.name)
    if g is None:
        raise InvalidArgumentError(
            f"{prefix}: sequence_batching {kind} '{spec.name}' (a control or implicit state tensor) is not "
            f"an {kind} of the ONNX graph, whose {kind}s are: {', '.join(tensors) or '(none)'}"
        )
    if g.data_type != spec.datatype.config:
        raise InvalidArgumentError(
            f"{prefix}, sequence_batching expects datatype {spec.datatype.config} for {kind} '{spec.name}', "
            f"model provides {g.data_type or g.type_name}"
        )


def _check_tensor(prefix: str, kind: str, io: ModelInput | ModelOutput, g: GraphTensor, mbs: int) -> None:
    if not g.is_tensor:
        raise InvalidArgumentError(
            f"{prefix}: {kind} '{io.name}' of the ONNX graph has type {g.type_name}; inferd serves tensors "
            "only (for scikit-learn classifiers converted with skl2onnx, convert with zipmap disabled)"
        )
    check_datatype(prefix, kind, io, g)
    dims = config_dims(io)
    model = list(g.dims)
    if not model:  # a scalar in the graph: the config must say 1 everywhere
        if mbs > 0 or any(d != 1 for d in dims):
            raise InvalidArgumentError(
                f"{prefix}, scalar tensor '{io.name}', should only provide 1 in the model configuration when "
                f"the model doesn't support batching. Model configuration provided: {shape_text(dims)}."
            )
        return
    if mbs > 0 and model[0] != -1:
        raise InvalidArgumentError(
            f"{prefix}, model configuration supports batching but first dimension of tensor '{io.name}' "
            f"expected by framework is not a variable-size batch dimension: {shape_text(model)} whereas "
            f"model configuration shape is: {shape_text(dims)} (set max_batch_size to 0 and list the full "
            "shape)"
        )
    check_shape(prefix, kind, io, model, dims, mbs)
