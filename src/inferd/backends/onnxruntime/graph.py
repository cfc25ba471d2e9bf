"""The ONNX graph's signature against the ModelConfig: Triton's auto-complete and load-time checks.

Pure: works on :class:`GraphTensor` lists (read from a session by :func:`graph_signature`) and a
ModelConfig; imports no framework. The rules are Triton ``onnxruntime_backend``'s
(``AutoCompleteConfig``, ``ValidateInputs`` / ``ValidateOutputs``), with reasons that say what to fix.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from inferd.core.types import BY_CONFIG, BY_CONFIG_VALUE
from inferd.errors import InvalidArgumentError

log = logging.getLogger("inferd.backends.onnxruntime")

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


@dataclass(frozen=True, slots=True)
class GraphTensor:
    """An input or output of the ONNX graph: ``data_type`` a ModelConfig name ("" if not a tensor)."""

    name: str
    data_type: str
    dims: tuple[int, ...]  # -1 where the graph leaves the size open (symbolic or unknown)
    onnx_type: str = ""

    @property
    def is_tensor(self) -> bool:
        return bool(self.data_type)


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
# Auto-complete (Triton ``ModelState::AutoCompleteConfig``)


def complete_config(
    config: Any, inputs: Sequence[GraphTensor], outputs: Sequence[GraphTensor], default_max_batch_size: int
) -> None:
    """Fill max_batch_size, dynamic_batching, and missing inputs/outputs of ``config`` from the graph."""
    had_inputs = len(config.input) + len(config.batch_input) > 0
    had_outputs = len(config.output) > 0
    # outputs that are not tensors (a ZipMap's sequence of maps) are left out below: they do not count
    served = [*inputs, *(t for t in outputs if t.is_tensor)]
    can_batch = all(t.dims and t.dims[0] == -1 for t in served)
    if can_batch:
        if config.max_batch_size == 0:
            config.max_batch_size = max(default_max_batch_size, 0)
            log.warning(
                "autofilled max_batch_size to %d for model '%s' since batching is supported but no "
                "max_batch_size is specified in model configuration",
                config.max_batch_size,
                config.name,
            )
        if (
            config.max_batch_size > 1
            and not config.HasField("dynamic_batching")
            and not config.HasField("sequence_batching")
        ):
            config.dynamic_batching.SetInParent()
    elif config.max_batch_size != 0:
        shapes = ", ".join(f"'{t.name}' {_shape(t.dims)}" for t in (*inputs, *outputs))
        raise InvalidArgumentError(
            f"autofill failed for model '{config.name}': model does not support batching while non-zero "
            f"max_batch_size is specified (every input and output needs a variable first dimension; the "
            f"graph has {shapes}): set max_batch_size to 0 or export the model with a dynamic batch axis"
        )
    if not had_inputs:
        _fill_io(config, config.input, inputs, "input")
    if not had_outputs:
        _fill_io(config, config.output, outputs, "output")


def _fill_io(config: Any, target: Any, tensors: Sequence[GraphTensor], kind: str) -> None:
    start = 1 if config.max_batch_size > 0 else 0
    for t in tensors:
        if not t.is_tensor:
            if kind == "input":
                raise InvalidArgumentError(
                    f"autofill failed for model '{config.name}': input '{t.name}' has type {t.onnx_type}; "
                    "inferd serves tensor inputs only"
                )
            log.warning(
                "model '%s': output '%s' has type %s and is left out of the configuration (inferd serves "
                "tensors only)",
                config.name,
                t.name,
                t.onnx_type,
            )
            continue
        io = target.add()
        io.name = t.name
        io.data_type = BY_CONFIG[t.data_type].config_value
        dims = list(t.dims[start:])
        if dims:
            io.dims.extend(dims)
        else:
            io.dims.append(1)
            if config.max_batch_size > 0:  # a scalar per batch item: dims [1] with an empty reshape
                io.reshape.SetInParent()


# --------------------------------------------------------------------------------------------------
# Load-time check of the config against the graph (Triton ``ValidateInputs`` / ``ValidateOutputs``)


def _shape(dims: Sequence[int]) -> str:
    return "[" + ",".join(str(d) for d in dims) + "]"


def check_config_against_graph(
    config: Any,
    inputs: Sequence[GraphTensor],
    outputs: Sequence[GraphTensor],
    initializers: Sequence[GraphTensor] = (),
) -> None:
    """Raise InvalidArgumentError naming the first tensor where ``config`` and the graph disagree."""
    name = config.name
    prefix = f"unable to load model '{name}'"
    mbs = int(config.max_batch_size)
    graph_inputs = {t.name: t for t in inputs}
    overridable = {t.name: t for t in initializers}
    configured = {i.name for i in config.input}
    missing = [t.name for t in inputs if t.name not in configured]
    if missing:
        raise InvalidArgumentError(
            f"{prefix}: the ONNX graph's input(s) {', '.join(repr(m) for m in missing)} are not in the "
            f"model configuration, which lists {sorted(configured) or 'no inputs'}: add them to config.pbtxt"
        )
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


def _check_tensor(prefix: str, kind: str, io: Any, g: GraphTensor, mbs: int) -> None:
    want = BY_CONFIG_VALUE.get(io.data_type)
    want_name = want.config if want is not None else "TYPE_INVALID"
    if not g.is_tensor:
        raise InvalidArgumentError(
            f"{prefix}: {kind} '{io.name}' of the ONNX graph has type {g.onnx_type}; inferd serves tensors "
            "only (for scikit-learn classifiers converted with skl2onnx, convert with zipmap disabled)"
        )
    if want_name != g.data_type:
        raise InvalidArgumentError(
            f"{prefix}, configuration expects datatype {want_name} for {kind} '{io.name}', model provides "
            f"{g.data_type}"
        )
    dims = list(io.reshape.shape) if io.HasField("reshape") else list(io.dims)
    model = list(g.dims)
    if not model:  # a scalar in the graph: the config must say 1 everywhere
        if mbs > 0 or any(d != 1 for d in dims):
            raise InvalidArgumentError(
                f"{prefix}, scalar tensor '{io.name}', should only provide 1 in the model configuration when "
                f"the model doesn't support batching. Model configuration provided: {_shape(dims)}."
            )
        return
    full = ([-1] if mbs > 0 else []) + dims
    if mbs > 0 and model[0] != -1:
        raise InvalidArgumentError(
            f"{prefix}, model configuration supports batching but first dimension of tensor '{io.name}' "
            f"expected by framework is not a variable-size batch dimension: {_shape(model)} whereas model "
            f"configuration shape is: {_shape(dims)} (set max_batch_size to 0 and list the full shape)"
        )
    ok = len(model) == len(full) and all(m == -1 or m == d for m, d in zip(model, full, strict=True))
    if not ok:
        batch_note = " (with the batch dimension of max_batch_size > 0 in front)" if mbs > 0 else ""
        raise InvalidArgumentError(
            f"{prefix}, {kind} '{io.name}': the model expects shape {_shape(model)} but the model "
            f"configuration specifies {_shape(full)}{batch_note}; fix dims (or reshape) in config.pbtxt"
        )
