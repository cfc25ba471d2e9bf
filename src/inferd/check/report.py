"""Problems as ``inferd check`` prints them, and the per-model reporter that places them in the text.

A problem in a config file is printed ``file:line:column: severity: message``. Line 1, column 1
means "this config as a whole": the field the problem is about is not written in the file (a
missing ``dims``, a field auto-complete filled) and nothing closer was found. A problem with a
folder or a file that is not a config (no version folder, a missing ``model.onnx``, a duplicate
model) is printed ``path: severity: message``, with no position.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from inferd.check.locate import locate
from inferd.check.positions import ConfigIndex, FieldPath, Occurrence

__all__ = ["ModelReport", "Problem", "Severity"]

Severity = Literal["error", "warning", "note"]


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing ``inferd check`` found: where, how bad, what."""

    path: Path
    message: str
    severity: Severity = "error"
    line: int | None = None
    column: int | None = None

    def __str__(self) -> str:
        where = str(self.path) if self.line is None else f"{self.path}:{self.line}:{self.column}"
        return f"{where}: {self.severity}: {self.message}"

    def sort_key(self) -> tuple[str, int, int]:
        return str(self.path), self.line or 0, self.column or 0


@dataclass(slots=True)
class ModelReport:
    """The problems of one model, placed in its config text when they are about the config.

    ``suppressed``: spans of the text (an input, a step) where ``text_format`` refused a field
    that was then blanked out to read the rest; later problems placed inside them follow from that
    refusal (a blanked ``data_type`` is a missing one) and are not reported twice.
    """

    model_dir: Path
    problems: list[Problem]
    config_path: Path | None = None
    index: ConfigIndex | None = None
    suppressed: list[tuple[int, int]] = field(default_factory=list)
    errors: int = 0

    def add(self, problem: Problem) -> None:
        self.problems.append(problem)
        if problem.severity == "error":
            self.errors += 1

    def at(self, line: int, column: int, message: str, severity: Severity = "error") -> None:
        """A problem at a known position of the config file."""
        assert self.config_path is not None
        self.add(Problem(self.config_path, message, severity, line, column))

    def config(
        self, message: str, base: Sequence[str | int] | None = None, severity: Severity = "error"
    ) -> None:
        """A problem with the config, placed at the field ``base`` and ``message`` point at
        (:func:`~inferd.check.locate.locate`); at 1:1 when that is not in the text. A model without
        a config file gets it on its folder."""
        if self.config_path is None:
            self.add(Problem(self.model_dir, message, severity))
            return
        occ = locate(self.index, message, base) if self.index is not None else None
        if occ is not None and any(start <= occ.start < end for start, end in self.suppressed):
            return
        line, column = (occ.line, occ.column) if occ is not None else (1, 1)
        self.add(Problem(self.config_path, message, severity, line, column))

    def file(self, path: Path, message: str, severity: Severity = "error") -> None:
        """A problem with a file or folder as a whole (no position)."""
        self.add(Problem(path, message, severity))

    def element(self, kind: str, name: str, fallback: int) -> FieldPath:
        """The text path of the ``kind`` element named ``name`` (an input, an instance group), or
        of occurrence ``fallback`` when no element of the text has that name."""
        if self.index is None:
            return (kind, fallback)
        at = self.index.get((kind, fallback, "name"))
        if at is not None and at.value == name:  # duplicates: this one, not the first of that name
            return (kind, fallback)
        found = self.index.element((), kind, name)
        return found if found is not None else (kind, fallback)

    def suppress(self, blanked: Occurrence) -> None:
        """Problems inside the element holding ``blanked`` follow from its refusal: drop them."""
        if self.index is None:
            return
        parent = self.index.get(blanked.path[:-2]) if len(blanked.path) > 2 else None
        if parent is not None:
            self.suppressed.append((parent.start, parent.end))
        else:
            self.suppressed.append((blanked.field_start, blanked.field_end))
