"""Repository scans: models, version directories, duplicates, fingerprints."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from inferd.errors import InvalidArgumentError
from inferd.repository import (
    DUPLICATE_REASON,
    DuplicateModel,
    ModelDir,
    fingerprint,
    parse_version_dir_name,
    scan_model_dir,
    scan_repositories,
)
from repo_paths import REFERENCE_MODELS


def _mkdirs(root: Path, *names: str) -> None:
    for name in names:
        (root / name).mkdir(parents=True, exist_ok=True)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("1", 1),
        ("0", 0),
        ("10", 10),
        ("9223372036854775807", 2**63 - 1),
        ("9223372036854775808", None),
        ("007", None),
        ("00", None),
        ("", None),
        ("-1", None),
        ("+1", None),
        ("1a", None),
        ("abc", None),
        ("\u0661", None),  # ARABIC-INDIC DIGIT ONE: a digit, but not ASCII
        (" 1", None),
    ],
)
def test_parse_version_dir_name(name: str, expected: int | None) -> None:
    assert parse_version_dir_name(name) == expected


def test_scan_versions(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    _mkdirs(repo / "m", "1", "0", "10", "007", "abc", "configs")
    (repo / "m" / "2").write_text("a file, not a version")
    (repo / "m" / "config.pbtxt").write_text("")
    models = scan_repositories([repo])
    assert list(models) == ["m"]
    model = models["m"]
    assert isinstance(model, ModelDir)
    assert model.name == "m"
    assert model.path == repo / "m"
    assert model.repository == repo
    assert list(model.versions) == [0, 1, 10]
    assert model.versions[10] == repo / "m" / "10"
    assert model.ignored == ("007", "abc", "configs")


def test_scan_model_without_versions(tmp_path: Path) -> None:
    _mkdirs(tmp_path, "repo/empty")
    model = scan_repositories([tmp_path / "repo"])["empty"]
    assert isinstance(model, ModelDir)
    assert model.versions == {}


def test_scan_ignores_files_in_repository_and_sorts(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    _mkdirs(repo, "zeta/1", "alpha/1", ".hidden")
    (repo / "README.md").write_text("")
    assert list(scan_repositories([repo])) == [".hidden", "alpha", "zeta"]


def test_scan_multiple_repositories_and_duplicates(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    _mkdirs(a, "only_a/1", "both/1")
    _mkdirs(b, "only_b/1", "both/2")
    models = scan_repositories([a, b])
    assert list(models) == ["both", "only_a", "only_b"]
    dup = models["both"]
    assert isinstance(dup, DuplicateModel)
    assert dup.paths == (a / "both", b / "both")
    assert dup.reason == DUPLICATE_REASON == "model appears in two or more repositories"
    only_b = models["only_b"]
    assert isinstance(only_b, ModelDir) and only_b.repository == b


def test_scan_same_repository_twice_is_a_duplicate(tmp_path: Path) -> None:
    _mkdirs(tmp_path, "repo/m/1")
    assert isinstance(scan_repositories([tmp_path / "repo", tmp_path / "repo"])["m"], DuplicateModel)


def test_scan_missing_repository(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(InvalidArgumentError) as info:
        scan_repositories([missing])
    assert str(info.value) == f"failed to stat file {missing}"


def test_scan_repository_is_a_file(tmp_path: Path) -> None:
    path = tmp_path / "file"
    path.write_text("")
    with pytest.raises(InvalidArgumentError, match="failed to open directory"):
        scan_repositories([path])


def test_scan_empty_list() -> None:
    assert scan_repositories([]) == {}


def test_scan_reference_repository() -> None:
    models = scan_repositories([REFERENCE_MODELS])
    assert sorted(models) == [
        "add_sub",
        "batched_sleep",
        "ensemble_add_sub",
        "identity_bytes",
        "identity_fp32",
        "mul_fp32",
    ]
    for model in models.values():
        assert isinstance(model, ModelDir)
        assert list(model.versions) == [1]


def test_scan_model_dir_directly(tmp_path: Path) -> None:
    _mkdirs(tmp_path, "m/3")
    model = scan_model_dir(tmp_path / "m")
    assert model.repository == tmp_path
    assert list(model.versions) == [3]
    with pytest.raises(InvalidArgumentError, match="failed to open directory"):
        scan_model_dir(tmp_path / "missing")


def test_model_dir_is_slotted() -> None:
    model = ModelDir(name="m", path=Path("/r/m"), repository=Path("/r"), versions={})
    assert not hasattr(model, "__dict__")


# --------------------------------------------------------------------------------------------------
# fingerprint


def _model(tmp_path: Path) -> Path:
    model = tmp_path / "m"
    _mkdirs(model, "1")
    (model / "config.pbtxt").write_text('backend: "python"\n')
    (model / "1" / "model.py").write_text("x = 1\n")
    return model


def _bump(path: Path) -> None:
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


def test_fingerprint_stable(tmp_path: Path) -> None:
    model = _model(tmp_path)
    assert fingerprint(model) == fingerprint(model)
    assert fingerprint(model) == fingerprint(scan_model_dir(model))
    names = [entry[0] for entry in fingerprint(model)]
    assert names == ["1/", "1/model.py", "config.pbtxt"]


@pytest.mark.parametrize(
    "change",
    [
        lambda m: _bump(m / "config.pbtxt"),
        lambda m: (m / "config.pbtxt").write_text('backend: "python"\nmax_batch_size: 8\n'),
        lambda m: _bump(m / "1" / "model.py"),
        lambda m: (m / "1" / "model.py").unlink(),
        lambda m: (m / "2").mkdir(),
        lambda m: (m / "1" / "helper.py").write_text(""),
        lambda m: (m / "labels.txt").write_text("a\n"),
        lambda m: (m / "config.pbtxt").unlink(),
    ],
)
def test_fingerprint_changes(tmp_path: Path, change: object) -> None:
    model = _model(tmp_path)
    before = fingerprint(model)
    assert callable(change)
    change(model)
    assert fingerprint(model) != before


def test_fingerprint_ignores_bytecode_caches(tmp_path: Path) -> None:
    model = _model(tmp_path)
    before = fingerprint(model)
    cache = model / "1" / "__pycache__"
    cache.mkdir()
    (cache / "model.cpython-311.pyc").write_bytes(b"\0")
    (model / "1" / "stray.pyc").write_bytes(b"\0")
    assert fingerprint(model) == before


def test_fingerprint_follows_symlinks_without_looping(tmp_path: Path) -> None:
    model = _model(tmp_path)
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "model.py").write_text("")
    (model / "2").symlink_to(target, target_is_directory=True)
    (model / "1" / "loop").symlink_to(model, target_is_directory=True)
    names = [entry[0] for entry in fingerprint(model)]
    assert "2/model.py" in names
    before = fingerprint(model)
    _bump(target / "model.py")
    assert fingerprint(model) != before


def test_fingerprint_of_missing_dir_is_empty(tmp_path: Path) -> None:
    assert fingerprint(tmp_path / "missing") == ()
