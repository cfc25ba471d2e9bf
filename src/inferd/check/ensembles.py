"""An ensemble against the models it runs: each step's model is in the repositories (and not twice),
serves the version the step asks for, has the inputs and outputs the step maps, agrees with the
other steps on each tensor's data type and batches as far as the ensemble does; steps can be
ordered (``scheduling/ensemble.py``'s ``plan_steps``, as at load), and no ensemble runs itself.

The data flow inside one ensemble (every output written, every tensor used) is
``validate_ensemble``'s, run with the other config checks.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from inferd.check.config import ModelResult
from inferd.check.positions import FieldPath
from inferd.errors import InferdError
from inferd.repository.config.schema import DataType
from inferd.scheduling.ensemble import plan_steps

__all__ = ["check_ensemble"]


def _type_name(value: int) -> str:
    return str(DataType.Name(value))


def _map_entry(result: ModelResult, step: FieldPath, field: str, key: str) -> FieldPath:
    """The text path of a step's ``input_map``/``output_map`` entry with ``key`` (the entry, else the step)."""
    index = result.report.index
    found = index.element(step, field, key, key="key") if index is not None else None
    return found if found is not None else step


def check_ensemble(
    result: ModelResult,
    models: Mapping[str, ModelResult],
    duplicates: set[str],
    ambiguous: frozenset[str] = frozenset(),
) -> None:
    """Report what the server would find wrong with the ensemble ``result`` at load (and what would
    fail every request: an input a step's model needs that no tensor feeds)."""
    cfg, report = result.cfg, result.report
    name = cfg.name
    if result.blocking == 0:
        try:
            plan_steps(cfg)
        except InferdError as e:
            report.config(e.message, ("ensemble_scheduling",))
    cycle = _cycle(name, models)
    if cycle:
        report.config(
            f"circular dependency between ensembles: {' -> '.join(cycle)}", ("ensemble_scheduling",)
        )
    # each ensemble tensor's data type, and the model it was inferred from
    types: dict[str, tuple[int, str]] = {t.name: (int(t.data_type), f"ensemble '{name}'") for t in cfg.input}
    types.update({t.name: (int(t.data_type), f"ensemble '{name}'") for t in cfg.output})
    consumers: list[tuple[FieldPath, str, str, Any]] = []
    for k, step in enumerate(cfg.ensemble_scheduling.step):
        at: FieldPath = ("ensemble_scheduling", 0, "step", k)
        target = step.model_name
        if not target:
            continue
        where = f"ensemble '{name}' step {k}"
        if target in ambiguous:  # --model-namespacing: not in its repository, in two others
            report.config(
                f"{where}: model '{target}' is not in the ensemble's repository and two or more others "
                "hold it, so the server refuses the name as ambiguous (--model-namespacing)",
                (*at, "model_name"),
            )
            continue
        if target in duplicates:
            report.config(
                f"{where}: model '{target}' appears in two or more repositories, so the server loads none",
                (*at, "model_name"),
            )
            continue
        model = models.get(target)
        if model is None:
            report.config(f"{where}: model '{target}' is not in the model repositories", (*at, "model_name"))
            continue
        if not model.complete:
            continue  # its own problems are reported on its config
        mcfg = model.cfg
        if step.model_version > 0 and model.versions and step.model_version not in model.versions:
            served = ", ".join(str(v) for v in model.versions)
            report.config(
                f"{where}: version {step.model_version} of model '{target}' is not served (versions: {served})",
                (*at, "model_version"),
            )
        if mcfg.max_batch_size < cfg.max_batch_size:
            report.config(
                f"ensemble {name} allows maximum batch size {cfg.max_batch_size}, but it contains model "
                f"{target} which only allows maximum batch size to be {mcfg.max_batch_size}",
                (*at, "model_name"),
            )
        if len(mcfg.input) == 0 and len(mcfg.output) == 0:
            continue  # a Python model that declares nothing (its auto_complete_config was not run)
        inputs = {t.name: t for t in mcfg.input}
        outputs = {t.name: t for t in mcfg.output}
        for key, tensor in step.input_map.items():
            if key not in inputs:
                report.config(
                    f"{where}: '{key}' is not an input of model '{target}', whose inputs are: "
                    f"{', '.join(inputs) or '(none)'}",
                    (*_map_entry(result, at, "input_map", key), "key"),
                )
            else:
                consumers.append((_map_entry(result, at, "input_map", key), tensor, target, inputs[key]))
        for key, io in inputs.items():
            if key not in step.input_map and not io.optional:
                report.config(
                    f"{where}: input '{key}' of model '{target}' is not in the step's input_map",
                    (*at, "model_name"),
                )
        for key, tensor in step.output_map.items():
            if key not in outputs:
                report.config(
                    f"{where}: '{key}' is not an output of model '{target}', whose outputs are: "
                    f"{', '.join(outputs) or '(none)'}",
                    (*_map_entry(result, at, "output_map", key), "key"),
                )
                continue
            _agree(
                result,
                types,
                tensor,
                int(outputs[key].data_type),
                target,
                _map_entry(result, at, "output_map", key),
            )
    for path, tensor, target, io in consumers:
        _agree(result, types, tensor, int(io.data_type), target, path)


def _agree(
    result: ModelResult, types: dict[str, tuple[int, str]], tensor: str, dtype: int, model: str, at: FieldPath
) -> None:
    """Triton's ensemble check: a tensor has one data type, whichever step produces or reads it."""
    known = types.get(tensor)
    if known is None:
        types[tensor] = (dtype, f"model {model}")
    elif known[0] != dtype:
        result.report.config(
            f"in ensemble {result.cfg.name}, ensemble tensor {tensor}: inconsistent data type: "
            f"{_type_name(known[0])} is inferred from {known[1]} while {_type_name(dtype)} is inferred from "
            f"model {model}",
            at,
        )


def _cycle(start: str, models: Mapping[str, ModelResult]) -> list[str]:
    """The ensembles from ``start`` back to it, when its steps lead there."""

    def steps(name: str) -> list[str]:
        model = models.get(name)
        if model is None or not model.complete or model.cfg.platform != "ensemble":
            return []
        return [s.model_name for s in model.cfg.ensemble_scheduling.step]

    stack: list[tuple[str, list[str]]] = [(start, [start])]
    seen: set[str] = set()
    while stack:
        name, path = stack.pop()
        for nxt in steps(name):
            if nxt == start:
                return [*path, start]
            if nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, [*path, nxt]))
    return []
