"""The fil backend's settings from config ``parameters``, read as Triton's FIL backend reads them.

The reference is the FIL backend of Triton 2.51 (24.10: ``src/shared_state.h``), whose parameters
RAPIDS-Triton's ``SharedModelState::get_config_param`` reads: a string parsed as the type asks
(``true``/``false`` exactly for a flag; a number as C++'s ``>>`` reads it, so a leading number
counts and a value that is no number falls back to the default where there is one), with its
texts for a value it cannot read and for a required parameter left out. ``output_class`` is
required (FIL 25.09 renamed it ``is_classifier``: either is read), and ``threshold`` too when
``output_class`` is true. ``cpu_nthread`` sets the threads (0 or less: the cores shared among the
instances, as for ONNX Runtime). The GPU-only parameters (``algo``, ``storage_type``,
``blocks_per_sm``, ``threads_per_tree``, ``transfer_threshold``; 25.09's ``layout`` and
``chunk_size``) and ``use_experimental_optimizations`` (the reference's other CPU engine: the same
answers) are accepted and change nothing here: :func:`ignored` names those a config sets, for one
log line per model. Other keys are not read, as in the reference (``num_class``, ``threads``).
Pure: no framework.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from inferd.errors import InternalError, InvalidArgumentError, UnsupportedError

if TYPE_CHECKING:
    from inferd.repository.config.schema import ModelConfig, ModelParameter

#: ``model_type`` -> the file the reference reads from the version folder
MODEL_FILES: dict[str, str] = {
    "xgboost": "xgboost.model",
    "xgboost_json": "xgboost.json",
    "xgboost_ubj": "xgboost.ubj",
    "lightgbm": "model.txt",
    "treelite_checkpoint": "checkpoint.tl",
}
DEFAULT_MODEL_TYPE = "xgboost"

#: parameters the reference reads for GPU execution only, and its CPU engine switch
GPU_ONLY = (
    "algo",
    "storage_type",
    "blocks_per_sm",
    "threads_per_tree",
    "transfer_threshold",
    "layout",
    "chunk_size",
)
NO_EFFECT = ("use_experimental_optimizations",)

_INT = re.compile(r"\s*[+-]?\d+")
_FLOAT = re.compile(r"\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")

T = TypeVar("T", bool, int, float, str)


@dataclass(frozen=True, slots=True)
class FilSettings:
    """What a FIL config's ``parameters`` say (threads: ``cpu_nthread``, 0 when it leaves them to inferd)."""

    model_type: str
    predict_proba: bool
    output_class: bool
    threshold: float
    allow_unknown_field: bool
    cpu_nthread: int


class _Missing:
    pass


_REQUIRED = _Missing()


def _param(params: Mapping[str, ModelParameter], name: str, kind: type[T], default: T | _Missing) -> T:
    """``get_config_param<kind>(name[, default])``: the reference's parsing and texts."""
    if name not in params:
        if isinstance(default, _Missing):
            raise InvalidArgumentError(f"Required parameter {name} not found in config")
        return default
    text = str(params[name].string_value)
    if kind is bool:
        if text in ("true", "false"):
            return text == "true"
        raise InternalError(f"Expected 'true' or 'false' for parameter '{name}', got: '{text}'")
    if kind is str:
        return text  # type: ignore[return-value]
    match = (_INT if kind is int else _FLOAT).match(text)
    if match is None:  # the stream failed: the default, or the reference's text
        if isinstance(default, _Missing):
            raise InvalidArgumentError(f"Bad input for parameter {name}")
        return default
    return kind(match.group(0).strip())


def fil_settings(config: ModelConfig) -> FilSettings:
    """The settings of a FIL config, checked in the order the reference reads them."""
    params = config.parameters
    predict_proba = _param(params, "predict_proba", bool, False)
    model_type = _param(params, "model_type", str, DEFAULT_MODEL_TYPE)
    if model_type not in MODEL_FILES:
        raise UnsupportedError(f"{model_type} not recognized as a valid serialization format.")
    allow_unknown = _param(params, "xgboost_allow_unknown_field", bool, False)
    key = "output_class" if "output_class" in params or "is_classifier" not in params else "is_classifier"
    output_class = _param(params, key, bool, _REQUIRED)
    threshold = _param(params, "threshold", float, _REQUIRED) if output_class else 0.5
    return FilSettings(
        model_type=model_type,
        predict_proba=predict_proba,
        output_class=output_class,
        threshold=threshold,
        allow_unknown_field=allow_unknown,
        cpu_nthread=max(0, _param(params, "cpu_nthread", int, -1)),
    )


def ignored(config: ModelConfig) -> list[str]:
    """The parameters a config sets that change nothing on CPU here (GPU-only, or the reference's
    other CPU engine)."""
    return [k for k in (*GPU_ONLY, *NO_EFFECT) if k in config.parameters]
