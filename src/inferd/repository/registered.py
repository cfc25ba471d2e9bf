"""Repositories registered while the server runs (Triton's ``RegisterModelRepository``).

SageMaker's multi-model endpoints add a folder per model as it is loaded (``/opt/ml/models/<hash>/
model``) and take it away when it is unloaded. A registration is a folder whose subfolders are
models, as a ``--model-repository`` folder, with a mapping that serves some of them under other
names: ``{"t9.tar.gz": "identity_fp32"}`` serves the folder ``identity_fp32`` as the model
``t9.tar.gz`` (its config's ``name`` is then set to it, as the reference does), and not under its
own name. The other subfolders (an ensemble's steps) keep their names.

The checks and texts are the reference's (model control mode explicit only, the folder must exist,
a folder or a mapped name registered once).
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path

from inferd.errors import AlreadyExistsError, InferdError, InvalidArgumentError
from inferd.repository.scan import DuplicateModel, ModelDir, scan_model_dir, scan_repositories

__all__ = ["Registration", "Registrations"]

log = logging.getLogger("inferd.repository")


@dataclass(frozen=True, slots=True)
class Registration:
    """One registered folder: ``mapping`` model name -> its subfolder; ``label``: the registering
    front end's own name for it (a SageMaker model's hash)."""

    path: Path
    mapping: dict[str, str]
    label: str = ""


class Registrations:
    """The folders registered now, in the order they were registered."""

    def __init__(self) -> None:
        self._by_path: dict[str, Registration] = {}

    def add(self, path: Path, mapping: dict[str, str], label: str = "") -> None:
        """Register ``path`` (its texts as the reference's: InvalidArgument, AlreadyExists)."""
        if not path.is_dir():
            raise InvalidArgumentError(f"failed to register '{path}', repository not found")
        if str(path) in self._by_path:
            raise AlreadyExistsError(f"model repository '{path}' has already been registered")
        for name in mapping:
            if any(name in r.mapping for r in self._by_path.values()):
                raise AlreadyExistsError(
                    f"failed to register '{name}', there is a conflicting mapping for '{name}'"
                )
        self._by_path[str(path)] = Registration(path, dict(mapping), label)
        log.info("Model repository registered: %s", path)

    def remove(self, path: Path) -> Registration:
        """Unregister ``path`` (InvalidArgument when it is not registered)."""
        reg = self._by_path.pop(str(path), None)
        if reg is None:
            raise InvalidArgumentError(f"failed to unregister '{path}', repository not found")
        log.info("Model repository unregistered: %s", path)
        return reg

    def all(self) -> list[Registration]:
        """Every registration, oldest first."""
        return list(self._by_path.values())

    def mapped(self, name: str) -> ModelDir | None:
        """The folder a mapping serves as ``name`` (None: no mapping names it, or its folder is gone)."""
        for reg in self._by_path.values():
            sub = reg.mapping.get(name)
            if sub is None:
                continue
            folder = reg.path / sub
            if not folder.is_dir():
                log.error("mapped path '%s' does not exist for model '%s'", folder, name)
                return None
            return dataclasses.replace(scan_model_dir(folder, reg.path, name=name), mapped=True)
        return None

    def names(self) -> set[str]:
        """Every name the registrations serve: the mapped ones, and the other subfolders'."""
        out: set[str] = set()
        for reg in self._by_path.values():
            out.update(reg.mapping)
            out.update(self.unmapped(reg))
        return out

    def unmapped(self, reg: Registration) -> dict[str, ModelDir]:
        """The subfolders of ``reg`` that no mapping renames, by their own names (none when the
        folder went away)."""
        try:
            found = scan_repositories([reg.path])
        except InferdError as e:
            log.error("failed to poll model repository '%s': %s", reg.path, e.message)
            return {}
        renamed = set(reg.mapping.values())
        return {n: e for n, e in found.items() if isinstance(e, ModelDir) and n not in renamed}

    def merged(self, local: dict[str, ModelDir | DuplicateModel]) -> dict[str, ModelDir | DuplicateModel]:
        """``local`` (the ``--model-repository`` folders' models) with the registered folders'
        unmapped models beside them: a name found twice is a duplicate."""
        out = dict(local)
        for reg in self._by_path.values():
            for name, md in self.unmapped(reg).items():
                held = out.get(name)
                if held is None:
                    out[name] = md
                else:
                    paths = held.paths if isinstance(held, DuplicateModel) else (held.path,)
                    out[name] = DuplicateModel(name, (*paths, md.path))
        return dict(sorted(out.items()))
