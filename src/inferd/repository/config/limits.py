"""What a model configuration may ask for, beyond Triton's own checks (``validate.py``).

A config reaches the server from a repository, or from a client in a load's ``config`` override.
Triton bounds neither: an override with 30,000 inputs or ``count: 100000`` instances, or a
``default_model_filename`` of ``../../elsewhere/model.py``, is taken as written. Here:

- every field that names a file names one inside the folder it is read from (the version folder for
  ``default_model_filename`` and ``cc_model_filenames``, the model folder for an output's
  ``label_filename``, ``<model>/warmup`` for a warmup input's ``input_data_file``): a relative path
  without ``..``, so a config, even a client's, cannot make the server read or run a file elsewhere;
- the counts that cost the server threads, memory or time are capped (inputs, outputs, instances),
  each cap far above what a model uses, each refusal naming the field and the cap.

These run as part of ``config_checks`` (``inferd check`` reports each at its field).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import PurePosixPath

from inferd.errors import InvalidArgumentError
from inferd.repository.config.schema import ModelConfig, ModelInstanceGroup

#: inputs (and, separately, outputs) one model may declare
MAX_TENSORS = 10_000
#: instances one model version may ask for, summed over its instance groups (a KIND_GPU group
#: counts ``count`` on each of its GPUs): each is a thread or a process of the server
MAX_INSTANCES = 1024

FieldPath = tuple[str | int, ...]


def file_name_problem(value: str) -> str | None:
    """Why ``value``, a file name a config field holds, could lead outside its folder; None when it
    cannot (empty, or a relative path of plain names)."""
    if not value:
        return None
    if "\0" in value:
        return "it holds a NUL character"
    if "\\" in value:
        return "it holds a backslash"
    pure = PurePosixPath(value)
    if pure.is_absolute():
        return "it is an absolute path"
    if ".." in pure.parts:
        return "it holds a '..' component"
    return None


def _check_file(field: str, value: str, folder: str) -> None:
    why = file_name_problem(value)
    if why is not None:
        raise InvalidArgumentError(f"{field} '{value}' must name a file inside the {folder}, but {why}")


def _check_model_files(cfg: ModelConfig) -> None:
    _check_file("default_model_filename", cfg.default_model_filename, "version folder")
    for key, value in sorted(cfg.cc_model_filenames.items()):
        _check_file(f"cc_model_filenames['{key}']", value, "version folder")


def _check_labels(cfg: ModelConfig) -> None:
    for out in cfg.output:
        _check_file(f"label_filename of output '{out.name}'", out.label_filename, "model folder")


def _check_warmup_files(cfg: ModelConfig) -> None:
    for sample in cfg.model_warmup:
        for name, data in sorted(sample.inputs.items()):
            if data.WhichOneof("input_data_type") == "input_data_file":
                _check_file(
                    f"input_data_file of warmup '{sample.name}' input '{name}'",
                    data.input_data_file,
                    "model's warmup folder",
                )


def _check_counts(cfg: ModelConfig) -> None:
    for what, count in (("input", len(cfg.input)), ("output", len(cfg.output))):
        if count > MAX_TENSORS:
            raise InvalidArgumentError(
                f"model '{cfg.name}' declares {count} {what}s; at most {MAX_TENSORS} are served"
            )


def instance_total(cfg: ModelConfig) -> int:
    """The instances ``cfg``'s instance groups ask for (a KIND_GPU group's count on each GPU)."""
    total = 0
    for group in cfg.instance_group:
        per = max(0, int(group.count))
        total += per * len(group.gpus) if group.kind == ModelInstanceGroup.KIND_GPU else per
    return total


def _check_instances(cfg: ModelConfig) -> None:
    total = instance_total(cfg)
    if total > MAX_INSTANCES:
        raise InvalidArgumentError(
            f"instance_group of model '{cfg.name}' asks for {total} instances; at most {MAX_INSTANCES} "
            "are served (each is a thread or a process of the server)"
        )


def limit_checks(cfg: ModelConfig) -> list[tuple[FieldPath, Callable[[], None]]]:
    """The checks of this module, each with the field it is about (see ``validate.config_checks``)."""
    return [
        (("default_model_filename",), partial(_check_model_files, cfg)),
        (("output",), partial(_check_labels, cfg)),
        (("model_warmup",), partial(_check_warmup_files, cfg)),
        (("input",), partial(_check_counts, cfg)),
        (("instance_group",), partial(_check_instances, cfg)),
    ]


def check_limits(cfg: ModelConfig) -> None:
    """Every check of this module, the first failure raised: run before anything reads the model's
    files or imports its code (auto-complete), so a config that asks too much costs nothing."""
    for _, check in limit_checks(cfg):
        check()
