"""Repositories registered at run time (repository/registered.py) and RepositorySet's lookups through
them: a mapping serves a folder under another name (and not under its own), the other subfolders keep
theirs, and the reference's refusals and texts."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferd.errors import AlreadyExistsError, InvalidArgumentError
from inferd.repository.registered import Registrations
from inferd.repository.remote import RepositorySet
from inferd.repository.scan import DuplicateModel, ModelDir


def models(root: Path, *names: str) -> Path:
    for n in names:
        (root / n / "1").mkdir(parents=True)
        (root / n / "config.pbtxt").write_text(f'name: "{n}"\nbackend: "python"\n')
    return root


def test_a_mapping_renames_a_folder_and_hides_its_own_name(tmp_path: Path) -> None:
    repo = models(tmp_path / "h1" / "model", "ens", "step")
    regs = Registrations()
    regs.add(repo, {"target.tar.gz": "ens"}, "h1")
    md = regs.mapped("target.tar.gz")
    assert md is not None and md.mapped and md.name == "target.tar.gz" and md.path == repo / "ens"
    assert regs.names() == {"target.tar.gz", "step"}
    assert regs.mapped("ens") is None
    assert [(r.label, r.path) for r in regs.all()] == [("h1", repo)]


def test_the_references_refusals(tmp_path: Path) -> None:
    repo = models(tmp_path / "a", "m")
    regs = Registrations()
    with pytest.raises(
        InvalidArgumentError, match=f"failed to register '{tmp_path / 'nope'}', repository not found"
    ):
        regs.add(tmp_path / "nope", {})
    regs.add(repo, {"t": "m"})
    with pytest.raises(AlreadyExistsError, match=f"model repository '{repo}' has already been registered"):
        regs.add(repo, {})
    other = models(tmp_path / "b", "m")
    with pytest.raises(
        AlreadyExistsError, match="failed to register 't', there is a conflicting mapping for 't'"
    ):
        regs.add(other, {"t": "m"})
    with pytest.raises(InvalidArgumentError, match=f"failed to unregister '{other}', repository not found"):
        regs.remove(other)
    regs.remove(repo)
    assert regs.all() == [] and regs.names() == set()


def test_a_mapped_folder_gone_is_no_model(tmp_path: Path) -> None:
    repo = models(tmp_path / "a", "m")
    regs = Registrations()
    regs.add(repo, {"t": "m"})
    (repo / "m" / "config.pbtxt").unlink()
    (repo / "m" / "1").rmdir()
    (repo / "m").rmdir()
    assert regs.mapped("t") is None


def test_repository_set_finds_registered_models_beside_its_folders(tmp_path: Path) -> None:
    local = models(tmp_path / "local", "shared", "alone")
    sources = RepositorySet([local])
    archive = models(tmp_path / "h2" / "model", "main", "shared")
    sources.registered.add(archive, {"served": "main"}, "h2")
    found = sources.find("served")
    assert isinstance(found, ModelDir) and found.path == archive / "main"
    assert isinstance(sources.find("shared"), DuplicateModel)  # a step name held by two repositories
    assert sources.find("main") is None
    assert set(sources.names()) == {"alone", "served", "shared"}
