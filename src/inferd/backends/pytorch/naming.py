"""Triton's PyTorch naming rules: which config tensor is which argument of ``forward()`` and which output.

Pure (no torch): the backend reads the module's signature and passes names and kinds in.

Inputs, as Triton's ``libtorch`` backend decides them, first rule that fits all of them:

1. ``FORWARD_ARGUMENT``: every config input is named after an argument of ``forward()``;
2. ``NAMED_INDEX``: every config input is ``<name>__<index>`` (``INPUT__0``), the index the position;
3. ``STRICT_CONFIG_ORDERING``: the config order is the argument order.

A ``forward(self, inputs: Dict[str, Tensor])`` takes every input in one dict keyed by config name.
Outputs are ``<name>__<index>`` into the tuple or list the module returns, or else config order;
a dict return is read by config name.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from inferd.errors import InvalidArgumentError

FORWARD_ARGUMENT = "FORWARD_ARGUMENT"
NAMED_INDEX = "NAMED_INDEX"
STRICT_CONFIG_ORDERING = "STRICT_CONFIG_ORDERING"


def index_suffix(name: str) -> int | None:
    """The ``<index>`` of ``<name>__<index>``, or None when ``name`` has no such suffix."""
    base, sep, suffix = name.rpartition("__")
    if not sep or not base or not suffix.isdigit():
        return None
    return int(suffix)


@dataclass(frozen=True, slots=True)
class InputPlan:
    """How config inputs reach ``forward()``: positions (``index``) or one dict (``as_dict``)."""

    convention: str
    index: dict[str, int]
    as_dict: bool
    arity: int


def plan_inputs(
    model: str, config_names: Sequence[str], forward_args: Sequence[str], dict_input: bool
) -> InputPlan:
    """The argument position of each config input, or an error a person can act on."""
    if dict_input:
        return InputPlan(FORWARD_ARGUMENT, {n: i for i, n in enumerate(config_names)}, True, 1)
    arity = len(forward_args)
    if len(config_names) != arity:
        raise InvalidArgumentError(
            f"unable to load model '{model}': the configuration lists {len(config_names)} input(s) "
            f"({', '.join(config_names)}), but forward() takes {arity} ({', '.join(forward_args) or 'none'}): "
            "list one config input per argument of forward()"
        )
    if all(n in forward_args for n in config_names):
        return InputPlan(FORWARD_ARGUMENT, {n: forward_args.index(n) for n in config_names}, False, arity)
    indices = [index_suffix(n) for n in config_names]
    if all(i is not None for i in indices):
        index = {n: int(i) for n, i in zip(config_names, indices, strict=True) if i is not None}
        _check_indices(model, "input", index, arity, f"forward() takes {arity} argument(s)")
        return InputPlan(NAMED_INDEX, index, False, arity)
    return InputPlan(STRICT_CONFIG_ORDERING, {n: i for i, n in enumerate(config_names)}, False, arity)


def plan_outputs(model: str, config_names: Sequence[str], returned: int | None) -> dict[str, int]:
    """The position of each config output in what ``forward()`` returns.

    ``returned`` is how many tensors the module's signature says it returns (1 for a tensor, the
    tuple's length), or None when the signature cannot say (a list, a dict, an exported program's
    pytree): then positions are checked against each answer instead.
    """
    indices = [index_suffix(n) for n in config_names]
    if config_names and all(i is not None for i in indices):
        index = {n: int(i) for n, i in zip(config_names, indices, strict=True) if i is not None}
    else:
        index = {n: i for i, n in enumerate(config_names)}
    if returned is not None:
        what = "a single tensor" if returned == 1 else f"{returned} tensors"
        _check_indices(model, "output", index, returned, f"forward() returns {what}")
    else:
        _check_indices(model, "output", index, None, "")
    return index


def _check_indices(model: str, kind: str, index: dict[str, int], limit: int | None, limit_text: str) -> None:
    seen: dict[int, str] = {}
    for name, i in index.items():
        if i in seen:
            raise InvalidArgumentError(
                f"unable to load model '{model}': {kind}s '{seen[i]}' and '{name}' both name index {i}: "
                f"each {kind} named <name>__<index> needs its own index"
            )
        seen[i] = name
        if limit is not None and i >= limit:
            raise InvalidArgumentError(
                f"unable to load model '{model}': {kind} '{name}' is index {i}, but {limit_text}: "
                f"number {kind}s from 0 in the order of forward()"
            )
