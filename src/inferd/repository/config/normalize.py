"""Normalisation (``NormalizeModelConfig`` + ``NormalizeInstanceGroup`` + ensemble policy): the
defaults Triton 2.51 fills, as ``/config`` prints them."""

from __future__ import annotations

from pathlib import Path

from inferd.errors import InvalidArgumentError
from inferd.gpu.devices import NO_GPUS, SupportedGpus
from inferd.repository.config.autofill import autofill_backend_fields, fill_backend_fields
from inferd.repository.config.instance_group import normalize_instance_groups
from inferd.repository.config.schema import ModelConfig

SEQUENCE_IDLE_DEFAULT_MICROSECONDS = 1_000_000


def normalize_config(
    cfg: ModelConfig,
    model_name: str,
    *,
    default_max_batch_size: int = 4,
    model_dir: Path | None = None,
    gpus: SupportedGpus = NO_GPUS,
    auto_gpu: bool = True,
) -> None:
    """Fill defaults the way Triton 2.51 prints them at ``/config`` (mutates ``cfg``; idempotent).

    With ``model_dir`` the core auto-fill inspects the file system first (backend detection);
    without it only what the config itself implies is filled.  ``default_max_batch_size`` is the
    ``--backend-config=default-max-batch-size`` value: Triton hands it to backend auto-complete
    (ONNX Runtime / TensorFlow), never applies it in core normalisation, so nothing here uses it.
    ``gpus`` and ``auto_gpu``: the instance groups' (instance_group.py; no GPUs by default).
    """
    del default_max_batch_size  # see docstring: consumed by backend auto-complete only
    if cfg.name and cfg.name != model_name:
        raise InvalidArgumentError(
            f"unexpected directory name '{model_name}' for model '{cfg.name}', "
            "directory name must equal model name"
        )
    if model_dir is not None:
        autofill_backend_fields(cfg, model_name, model_dir)
    else:
        fill_backend_fields(cfg, model_name, None, custom_fallback=False)

    if not cfg.HasField("version_policy"):
        cfg.version_policy.latest.num_versions = 1

    if cfg.HasField("dynamic_batching"):
        db = cfg.dynamic_batching
        if len(db.preferred_batch_size) == 0 and cfg.max_batch_size > 0:
            db.preferred_batch_size.append(cfg.max_batch_size)

    if cfg.HasField("sequence_batching"):
        sb = cfg.sequence_batching
        if sb.max_sequence_idle_microseconds == 0:
            sb.max_sequence_idle_microseconds = SEQUENCE_IDLE_DEFAULT_MICROSECONDS
        if sb.HasField("oldest") and len(sb.oldest.preferred_batch_size) == 0 and cfg.max_batch_size > 0:
            sb.oldest.preferred_batch_size.append(cfg.max_batch_size)

    if cfg.HasField("ensemble_scheduling"):
        # Triton sets this from the composing models (decoupled if any step is): the caller may
        # flip it to true once it knows them.
        if not cfg.HasField("model_transaction_policy"):
            cfg.model_transaction_policy.SetInParent()
            cfg.model_transaction_policy.decoupled = False
        return

    opt = cfg.optimization
    if not opt.HasField("input_pinned_memory"):
        opt.input_pinned_memory.enable = True
    if not opt.HasField("output_pinned_memory"):
        opt.output_pinned_memory.enable = True

    normalize_instance_groups(cfg, gpus, auto_gpu=auto_gpu)
