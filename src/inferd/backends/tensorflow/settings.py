"""The TensorFlow backend's settings from config ``parameters``, under the names Triton's backend reads.

``TF_SIGNATURE_DEF`` (the signature served, default ``serving_default``), ``TF_GRAPH_TAG`` (the
MetaGraph's tag; default: the SavedModel's only one), ``TF_NUM_INTRA_THREADS`` and
``TF_NUM_INTER_THREADS``. Pure but for :func:`apply_threads`, which takes tensorflow.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from inferd.errors import InvalidArgumentError

if TYPE_CHECKING:
    from inferd.repository.config.schema import ModelConfig, ModelParameter

log = logging.getLogger("inferd.backends.tensorflow")

DEFAULT_SIGNATURE_DEF = "serving_default"


@dataclass(frozen=True, slots=True)
class TfSettings:
    """What the config's ``parameters`` set for a SavedModel (threads: None leaves TF's default)."""

    signature_def: str = DEFAULT_SIGNATURE_DEF
    graph_tag: str | None = None
    intra_op_threads: int | None = None
    inter_op_threads: int | None = None


def _text(params: Mapping[str, ModelParameter], key: str) -> str | None:
    if key not in params:
        return None
    return str(params[key].string_value).strip() or None


def _threads(config: ModelConfig, key: str) -> int | None:
    raw = _text(config.parameters, key)
    if raw is None:
        return None
    if not raw.isdigit():
        raise InvalidArgumentError(
            f"unable to load model '{config.name}': parameter {key} is '{raw}', which is not a non-negative "
            "number of threads (0: TensorFlow chooses)"
        )
    return int(raw) or None


def tf_settings(config: ModelConfig) -> TfSettings:
    """Settings from ``TF_SIGNATURE_DEF``, ``TF_GRAPH_TAG``, ``TF_NUM_INTRA_THREADS``, ``TF_NUM_INTER_THREADS``."""
    params = config.parameters
    return TfSettings(
        signature_def=_text(params, "TF_SIGNATURE_DEF") or DEFAULT_SIGNATURE_DEF,
        graph_tag=_text(params, "TF_GRAPH_TAG"),
        intra_op_threads=_threads(config, "TF_NUM_INTRA_THREADS"),
        inter_op_threads=_threads(config, "TF_NUM_INTER_THREADS"),
    )


_threads_lock = threading.Lock()
_threads_applied: tuple[int | None, int | None] | None = None


def apply_threads(tf: Any, settings: TfSettings, model: str) -> None:
    """Set TF's thread pools before its runtime starts; TF has one runtime per process, so the first model wins.

    Called before a model's SavedModel is read (reading it starts the runtime, after which
    ``tf.config.threading`` refuses changes). A later model asking for other counts is logged.
    """
    global _threads_applied
    wanted = (settings.intra_op_threads, settings.inter_op_threads)
    with _threads_lock:
        if _threads_applied is None:
            _threads_applied = wanted
            try:
                if wanted[0] is not None:
                    tf.config.threading.set_intra_op_parallelism_threads(wanted[0])
                if wanted[1] is not None:
                    tf.config.threading.set_inter_op_parallelism_threads(wanted[1])
            except RuntimeError as e:  # the runtime started before inferd loaded a model
                log.warning("model '%s': TF_NUM_INTRA/INTER_THREADS not applied: %s", model, e)
            return
        if wanted != (None, None) and wanted != _threads_applied:
            log.warning(
                "model '%s': %s not applied: TensorFlow's thread pools are per process, and the first "
                "TensorFlow model loaded set them (%s); give every TensorFlow model the same parameters",
                model,
                _describe(wanted),
                _describe(_threads_applied),
            )


def _describe(threads: tuple[int | None, int | None]) -> str:
    intra, inter = threads
    if intra is None and inter is None:
        return "TensorFlow's defaults"
    return f"TF_NUM_INTRA_THREADS {intra or 'default'}, TF_NUM_INTER_THREADS {inter or 'default'}"
