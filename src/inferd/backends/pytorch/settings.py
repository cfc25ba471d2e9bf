"""The PyTorch backend's settings from config ``parameters``, under the names Triton's backend reads.

``INFERENCE_MODE`` (``torch.inference_mode``, default true here; false: ``torch.no_grad``),
``DISABLE_OPTIMIZED_EXECUTION`` (the TorchScript executor's optimisations), ``INTRA_OP_THREAD_COUNT``
and ``INTER_OP_THREAD_COUNT``. Pure but for :func:`set_interop_threads`, which takes torch.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from inferd.errors import InvalidArgumentError

if TYPE_CHECKING:
    from inferd.repository.config.schema import ModelConfig, ModelParameter

log = logging.getLogger("inferd.backends.pytorch")


def _bool_param(params: Mapping[str, ModelParameter], key: str, default: bool) -> bool:
    if key not in params:
        return default
    value = params[key].string_value.strip().lower()
    if value in ("true", "1", "yes", "on"):
        return True
    if value in ("false", "0", "no", "off"):
        return False
    raise InvalidArgumentError(
        f"parameter '{key}' must be 'true' or 'false', not '{params[key].string_value}'"
    )


def _int_param(params: Mapping[str, ModelParameter], key: str) -> int | None:
    if key not in params:
        return None
    raw = params[key].string_value.strip()
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise InvalidArgumentError(f"parameter '{key}' must be a non-negative integer, not '{raw}'")
    return value or None


@dataclass(frozen=True, slots=True)
class TorchSettings:
    """What the config's ``parameters`` set: grad mode, the JIT's optimisation, threads."""

    inference_mode: bool
    optimized_execution: bool
    intra_op_threads: int
    inter_op_threads: int | None


def torch_settings(config: ModelConfig, instances: int, cpus: int | None = None) -> TorchSettings:
    """Settings from ``INFERENCE_MODE``, ``DISABLE_OPTIMIZED_EXECUTION``, ``INTRA_/INTER_OP_THREAD_COUNT``.

    With no ``INTRA_OP_THREAD_COUNT`` each instance gets the cores divided among the model's
    instances (torch's default, every core per caller, makes concurrent instances fight).
    """
    params = config.parameters
    cpus = cpus or os.cpu_count() or 1
    intra = _int_param(params, "INTRA_OP_THREAD_COUNT") or max(1, cpus // max(1, instances))
    return TorchSettings(
        inference_mode=_bool_param(params, "INFERENCE_MODE", True),
        optimized_execution=not _bool_param(params, "DISABLE_OPTIMIZED_EXECUTION", False),
        intra_op_threads=intra,
        inter_op_threads=_int_param(params, "INTER_OP_THREAD_COUNT"),
    )


_interop_lock = threading.Lock()
_interop_set = False


def set_interop_threads(torch: Any, n: int) -> None:
    """torch allows one ``set_interop_threads`` per process, before inter-op work: the first wins."""
    global _interop_set
    with _interop_lock:
        if _interop_set:
            return
        _interop_set = True
        try:
            torch.set_interop_threads(n)
        except RuntimeError as e:
            log.warning("INTER_OP_THREAD_COUNT=%d not applied: %s", n, e)
