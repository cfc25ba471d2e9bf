"""Which field of a config text a problem's message is about.

A check that knows its field passes it as ``base`` (a text path, ``("input", 1)``); the message
then narrows it down (``dims`` inside that input for "dimension must be integer >= 1"). A
message with no base (a backend's auto-complete, the model-file check) is placed by what it
names: a tensor (``input 'X'``), an ensemble step (``step 2``), an instance group, or a field.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from inferd.check.positions import ConfigIndex, FieldPath, Occurrence, normalize_path

__all__ = ["field_words", "locate"]

#: (what a message says, the field it means), most specific first
_KEYWORDS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern), name)
    for pattern, name in (
        (r"preferred (?:batch )?size", "preferred_batch_size"),
        (r"default priority level", "default_priority_level"),
        (r"priority queue policy", "priority_queue_policy"),
        (r"[Qq]ueue policy", "default_queue_policy"),
        (r"slot utilization", "minimum_slot_utilization"),
        (r"control tensor|control kinds|false_true|for CONTROL_|control CONTROL", "control_input"),
        (r"reshape", "reshape"),
        (r"dimension|\bdims\b|shape", "dims"),
        (r"data_?type|data type", "data_type"),
        (r"NHWC|NCHW|[Nn]on-linear", "format"),
        (r"shape tensor", "is_shape_tensor"),
        (r"more than once", "name"),
        (r"profile", "profile"),
        (r"KIND_\w+ but specifies one or more GPUs|unsupported gpu id|specifies no GPUs", "gpus"),
        (r"kind KIND_", "kind"),
        (r"Response Cache", "response_cache"),
        (r"decoupled", "decoupled"),
        (r"max_batch_size|max(?:imum)? batch size", "max_batch_size"),
        (r"version policy|versions? (?:must|available)", "version_policy"),
        (r"model_version|version \d+ of", "model_version"),
        (r"input_map|input of model|inputs of model", "input_map"),
        (r"output_map|output of model|outputs of model", "output_map"),
        (r"model_name|is not in the (?:model )?repositor", "model_name"),
        (r"platform", "platform"),
        (r"backend", "backend"),
        (r"default_model_filename|model file", "default_model_filename"),
        (r"batch input|source input", "batch_input"),
        (r"batch output|target output", "batch_output"),
        (r"metric", "model_metrics"),
        (r"\binput\b", "input"),
        (r"\boutput\b", "output"),
    )
)
_QUOTED = re.compile(r"(?<!\w)'([^']*)'")  # not the apostrophe of "graph's"
_TENSOR = re.compile(r"\b(input|output)s? '([^']+)'")
_STEP = re.compile(r"\bstep (\d+)\b")
_GROUP = re.compile(r"instance group (\S+) of model")
_FIELD_NAME = re.compile(r"[a-z][a-z0-9_]*")


def field_words(message: str) -> list[str]:
    """The field names a message points at, most specific first: quoted field-like words
    (``'max_batch_size'``), then the fields its wording stands for."""
    words = [w for w in _QUOTED.findall(message) if _FIELD_NAME.fullmatch(w) and "_" in w]
    words += [name for pattern, name in _KEYWORDS if pattern.search(message)]
    return list(dict.fromkeys(words))


def _anchors(
    index: ConfigIndex, message: str, base: FieldPath | None
) -> tuple[list[FieldPath], list[FieldPath]]:
    """Elements of the text the message is about, most specific first: those ``base`` gives, and
    those the message names (a tensor, an instance group, an ensemble step), present in the text."""
    given: list[FieldPath] = []
    if base:
        full = normalize_path(base)
        step = _STEP.search(message)
        if step and full[0] == "ensemble_scheduling" and len(full) < 4:  # "... in step 2 of ensemble"
            full = (*full[:2], "step", int(step.group(1)))
        given.append(full)
    named: list[FieldPath] = []
    for kind, name in _TENSOR.findall(message):
        named.append(index.element((), kind, name) or ())
    for group in _GROUP.findall(message):
        named.append(index.element((), "instance_group", group) or ())
    step = _STEP.search(message)
    if step:
        named.append(("ensemble_scheduling", 0, "step", int(step.group(1))))
    return (
        [a for a in given if index.get(a) is not None],
        [a for a in named if a and index.get(a) is not None],
    )


def _field_under(index: ConfigIndex, anchor: FieldPath, name: str) -> Occurrence | None:
    """The first ``name`` field below ``anchor``: a direct child first, then any descendant (only
    direct children of the whole config: a ``dims`` somewhere is no answer to a message about dims)."""
    below = list(index.under(anchor))
    direct = [o for o in below if len(o.path) == len(anchor) + 2 and o.path[-2] == name]
    deeper = [o for o in below if o.path[-2] == name] if anchor else []
    found = direct or deeper
    return found[0] if found else None


def _field(index: ConfigIndex, anchor: FieldPath, words: list[str]) -> Occurrence | None:
    """A field the message names, below ``anchor``."""
    for word in words:
        found = _field_under(index, anchor, word)
        if found is not None:
            return found
    return None


def _value(index: ConfigIndex, anchor: FieldPath, values: list[str]) -> Occurrence | None:
    """A value the message quotes (a tensor name in a step), below ``anchor``."""
    for value in values:
        found = index.find_value(value, under=anchor)
        if found is not None:
            return found
    return None


def locate(index: ConfigIndex, message: str, base: Sequence[str | int] | None = None) -> Occurrence | None:
    """The occurrence a problem is about, or None when nothing the message names is in the text.

    In this order: a field the message names below ``base``; ``base`` when it is a single value; a
    field the message names, or a value it quotes, below what it names (a tensor, an instance group,
    a step); a value it quotes below ``base``; the ``name`` of what it names or of ``base``, or
    that itself; a field it names at the top of the config."""
    words = field_words(message)
    values = [v for v in _QUOTED.findall(message) if v]
    given, named = _anchors(index, message, tuple(base) if base else None)
    for anchor in given:
        if (found := _field(index, anchor, words)) is not None:
            return found
    for anchor in given:
        occ = index.get(anchor)
        if occ is not None and occ.value is not None:
            return occ
    for anchor in named:
        if (found := _field(index, anchor, words) or _value(index, anchor, values)) is not None:
            return found
    for anchor in given:
        if (found := _value(index, anchor, values)) is not None:
            return found
    elements = (*named, *given)
    if elements:
        return index.get((*elements[0], "name")) or index.get(elements[0])
    return _field(index, (), words)
