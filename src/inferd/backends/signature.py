"""A native model's inputs and outputs against the ModelConfig: Triton's auto-complete and load checks.

Pure and framework-free: works on :class:`GraphTensor` lists (each backend reads its own from the
framework: ``onnxruntime/graph.py``, ``openvino/signature.py``, ``tensorflow/signature.py``) and a
ModelConfig. :func:`complete_config` is Triton ``onnxruntime_backend``'s ``AutoCompleteConfig``,
which the OpenVINO and TensorFlow backends apply too; :func:`check_config_against_model` is the
load-time check the OpenVINO and TensorFlow backends share, worded per backend. The ONNX backend
keeps its own check (``onnxruntime/graph.py``: the reference's texts) and shares the helpers below.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from inferd.core.types import BY_CONFIG, BY_CONFIG_VALUE
from inferd.errors import InvalidArgumentError

if TYPE_CHECKING:
    from inferd.repository.config.schema import ModelConfig, ModelInput, ModelOutput


@dataclass(frozen=True, slots=True)
class GraphTensor:
    """An input or output of a model: ``data_type`` a ModelConfig name ("" if not a tensor)."""

    name: str
    data_type: str
    dims: tuple[int, ...]  # -1 where the model leaves the size open (symbolic or unknown)
    type_name: str = ""  # the framework's own name for the type, for messages

    @property
    def is_tensor(self) -> bool:
        return bool(self.data_type)


def shape_text(dims: Sequence[int]) -> str:
    """``[-1,4]``: dims as the messages print them."""
    return "[" + ",".join(str(d) for d in dims) + "]"


# --------------------------------------------------------------------------------------------------
# Auto-complete (Triton ``ModelState::AutoCompleteConfig``)


def complete_config(
    config: ModelConfig,
    inputs: Sequence[GraphTensor],
    outputs: Sequence[GraphTensor],
    default_max_batch_size: int,
    *,
    log: logging.Logger,
) -> None:
    """Fill max_batch_size, dynamic_batching, and missing inputs/outputs of ``config`` from the model.

    Warnings go to ``log``: the calling backend's logger.
    """
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
        shapes = ", ".join(f"'{t.name}' {shape_text(t.dims)}" for t in (*inputs, *outputs))
        raise InvalidArgumentError(
            f"autofill failed for model '{config.name}': model does not support batching while non-zero "
            f"max_batch_size is specified (every input and output needs a variable first dimension; the "
            f"graph has {shapes}): set max_batch_size to 0 or export the model with a dynamic batch axis"
        )
    if not had_inputs:
        _fill_io(config, config.input, inputs, "input", log)
    if not had_outputs:
        _fill_io(config, config.output, outputs, "output", log)


def _fill_io(
    config: ModelConfig, target: Any, tensors: Sequence[GraphTensor], kind: str, log: logging.Logger
) -> None:
    start = 1 if config.max_batch_size > 0 else 0
    for t in tensors:
        if not t.is_tensor:
            if kind == "input":
                raise InvalidArgumentError(
                    f"autofill failed for model '{config.name}': input '{t.name}' has type {t.type_name}; "
                    "inferd serves tensor inputs only"
                )
            log.warning(
                "model '%s': output '%s' has type %s and is left out of the configuration (inferd serves "
                "tensors only)",
                config.name,
                t.name,
                t.type_name,
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
# Load-time check of the config against the model


def check_config_against_model(
    config: ModelConfig,
    inputs: Sequence[GraphTensor],
    outputs: Sequence[GraphTensor],
    *,
    backend: str,
    what: str,
    batch_hint: str,
    missing: str = "input(s) {names} of {what}",
    names_hint: str = "",
    type_word: str = "type",
) -> None:
    """Raise InvalidArgumentError naming the first tensor where ``config`` and the model disagree.

    The wording is the backend's: ``backend`` its name ("openvino"), ``what`` the model as the
    messages call it ("the OpenVINO model"), ``batch_hint`` how to give the model a batch axis,
    ``missing`` the phrase for inputs the config leaves out (``{names}``, ``{what}``),
    ``names_hint`` a note after an unknown tensor's list, ``type_word`` what a non-tensor "has".
    """
    prefix = f"unable to load model '{config.name}'"
    mbs = int(config.max_batch_size)
    configured = {i.name for i in config.input}
    absent = [t.name for t in inputs if t.name not in configured]
    if absent:
        names = ", ".join(repr(m) for m in absent)
        raise InvalidArgumentError(
            f"{prefix}: {missing.format(names=names, what=what)} are not in the model configuration, which "
            f"lists {sorted(configured) or 'no inputs'}: add them to config.pbtxt"
        )
    note = f" {names_hint}" if names_hint else ""
    for kind, listed, tensors in (("input", config.input, inputs), ("output", config.output, outputs)):
        by_name = {t.name: t for t in tensors}
        for io in listed:
            t = by_name.get(io.name)
            if t is None:
                raise InvalidArgumentError(
                    f"{prefix}: configuration {kind} '{io.name}' is not an {kind} of {what}, whose {kind}s "
                    f"are: {', '.join(by_name) or '(none)'}{note}"
                )
            if kind == "input" and cast("ModelInput", io).optional:
                raise InvalidArgumentError(
                    f"{prefix}: input '{io.name}' is optional, which the {backend} backend does not serve"
                )
            if not t.is_tensor:
                raise InvalidArgumentError(
                    f"{prefix}: {kind} '{io.name}' has {type_word} {t.type_name}, which the {backend} "
                    "backend does not serve"
                )
            check_datatype(prefix, kind, io, t)
            dims = config_dims(io)
            model = list(t.dims)
            if not model and mbs == 0 and all(d == 1 for d in dims):
                continue  # a scalar: dims [1]
            if mbs > 0 and (not model or model[0] != -1):
                raise InvalidArgumentError(
                    f"{prefix}, model configuration supports batching but first dimension of tensor "
                    f"'{io.name}' expected by the model is not a variable-size batch dimension: "
                    f"{shape_text(model)} (set max_batch_size to 0 and list the full shape, or {batch_hint})"
                )
            check_shape(prefix, kind, io, model, dims, mbs)


# -- shared with the ONNX backend's check ----------------------------------------------------------


def config_dims(io: ModelInput | ModelOutput) -> list[int]:
    """The shape the framework sees for a config input or output: its reshape if it has one."""
    return list(io.reshape.shape) if io.HasField("reshape") else list(io.dims)


def check_datatype(prefix: str, kind: str, io: ModelInput | ModelOutput, t: GraphTensor) -> None:
    want = BY_CONFIG_VALUE.get(io.data_type)
    want_name = want.config if want is not None else "TYPE_INVALID"
    if want_name != t.data_type:
        raise InvalidArgumentError(
            f"{prefix}, configuration expects datatype {want_name} for {kind} '{io.name}', model provides "
            f"{t.data_type}"
        )


def check_shape(
    prefix: str, kind: str, io: ModelInput | ModelOutput, model: Sequence[int], dims: Sequence[int], mbs: int
) -> None:
    """The model's dims against the config's (``dims``, with the batch dimension put in front)."""
    full = ([-1] if mbs > 0 else []) + list(dims)
    ok = len(model) == len(full) and all(m == -1 or m == d for m, d in zip(model, full, strict=True))
    if not ok:
        batch_note = " (with the batch dimension of max_batch_size > 0 in front)" if mbs > 0 else ""
        raise InvalidArgumentError(
            f"{prefix}, {kind} '{io.name}': the model expects shape {shape_text(model)} but the model "
            f"configuration specifies {shape_text(full)}{batch_note}; fix dims (or reshape) in config.pbtxt"
        )
