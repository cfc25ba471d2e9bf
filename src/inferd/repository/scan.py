"""Model repositories on disk: which models, which version directories, and a change fingerprint."""

from __future__ import annotations

import dataclasses
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from inferd.errors import InvalidArgumentError

__all__ = [
    "DUPLICATE_REASON",
    "KEY_SEP",
    "DuplicateModel",
    "Fingerprint",
    "ModelDir",
    "fingerprint",
    "key_name",
    "key_namespace",
    "model_key",
    "parse_version_dir_name",
    "scan_model_dir",
    "scan_namespaced",
    "scan_repositories",
    "version_files",
]

#: Triton's ``MODEL_READY_REASON_DUPLICATE``.
DUPLICATE_REASON = "model appears in two or more repositories"
#: ``--model-namespacing``: a model's key is its namespace (the repository holding it), this, and
#: its name, as the reference writes it in its log ("loading: /models/a::simple:1")
KEY_SEP = "::"

_INT64_MAX = 2**63 - 1
_IGNORED_NAMES = frozenset({"__pycache__"})


@dataclass(slots=True)
class ModelDir:
    """One model directory: ``versions`` maps each valid version number to its directory.

    ``ignored`` lists subdirectory names that are not versions (non-numeric, leading zeros), which
    Triton logs and skips.
    """

    name: str
    path: Path
    repository: Path
    versions: dict[int, Path]
    ignored: tuple[str, ...] = field(default=())
    #: its files came from a client (a load's ``file:`` overrides), not from a repository: untrusted
    #: input, which backends load and run contained (a worker process)
    uploaded: bool = False
    #: served under a name a registration maps to it (repository/registered.py): its config's
    #: ``name`` is set to that name, as the reference does, instead of having to equal it
    mapped: bool = False
    #: the registry's key (``--model-namespacing``: ``model_key(repository, name)``; "" the name)
    key: str = ""


def model_key(namespace: str, name: str) -> str:
    """The key of the model ``name`` of repository ``namespace`` under ``--model-namespacing``."""
    return f"{namespace}{KEY_SEP}{name}"


def key_name(key: str) -> str:
    """The model name of a registry key (a plain name is its own)."""
    return key.rpartition(KEY_SEP)[2]


def key_namespace(key: str) -> str:
    """The namespace of a registry key ("" for a plain name)."""
    return key.rpartition(KEY_SEP)[0]


@dataclass(frozen=True, slots=True)
class DuplicateModel:
    """A model name found in more than one repository: it must not load (state UNAVAILABLE)."""

    name: str
    paths: tuple[Path, ...]
    reason: str = DUPLICATE_REASON


def parse_version_dir_name(name: str) -> int | None:
    """The version a directory name stands for, or None: ASCII digits, no leading zero but ``0``."""
    if not name or not name.isascii() or not name.isdigit():
        return None
    if len(name) > 1 and name[0] == "0":
        return None
    version = int(name)
    return version if version <= _INT64_MAX else None


def scan_model_dir(path: Path, repository: Path | None = None, name: str | None = None) -> ModelDir:
    """Describe one model directory (its version subdirectories); the model is named after the
    folder unless ``name`` says otherwise (a load's file overrides live in a temporary folder)."""
    versions: dict[int, Path] = {}
    ignored: list[str] = []
    try:
        entries = sorted(path.iterdir(), key=lambda p: p.name)
    except OSError as e:
        raise InvalidArgumentError(f"failed to open directory {path}: {e.strerror or e}") from e
    for entry in entries:
        if not entry.is_dir():
            continue
        version = parse_version_dir_name(entry.name)
        if version is None:
            ignored.append(entry.name)
        else:
            versions[version] = entry
    return ModelDir(
        name=path.name if name is None else name,
        path=path,
        repository=repository if repository is not None else path.parent,
        versions=dict(sorted(versions.items())),
        ignored=tuple(ignored),
    )


def scan_repositories(paths: list[Path]) -> dict[str, ModelDir | DuplicateModel]:
    """Every subdirectory of every repository is a model; the result is sorted by name.

    A name present in two or more repositories becomes a :class:`DuplicateModel` entry.  A
    repository that does not exist or is not a directory raises InvalidArgumentError.
    """
    found: dict[str, list[ModelDir]] = {}
    for repository in paths:
        try:
            st = repository.stat()
        except OSError as e:
            raise InvalidArgumentError(f"failed to stat file {repository}") from e
        if not stat.S_ISDIR(st.st_mode):
            raise InvalidArgumentError(f"failed to open directory {repository}: not a directory")
        try:
            entries = sorted(repository.iterdir(), key=lambda p: p.name)
        except OSError as e:
            raise InvalidArgumentError(f"failed to open directory {repository}: {e.strerror or e}") from e
        for entry in entries:
            if entry.is_dir():
                found.setdefault(entry.name, []).append(scan_model_dir(entry, repository))
    result: dict[str, ModelDir | DuplicateModel] = {}
    for name in sorted(found):
        dirs = found[name]
        if len(dirs) == 1:
            result[name] = dirs[0]
        else:
            result[name] = DuplicateModel(name=name, paths=tuple(d.path for d in dirs))
    return result


def scan_namespaced(paths: list[Path]) -> dict[str, ModelDir]:
    """``--model-namespacing``: every model of every repository by its key (a name two repositories
    hold is two models), sorted; a repository that cannot be read raises as ``scan_repositories``."""
    found: dict[str, ModelDir] = {}
    for repository in paths:
        for name, entry in scan_repositories([repository]).items():
            assert isinstance(entry, ModelDir)  # one repository holds a name once
            key = model_key(str(repository), name)
            found[key] = dataclasses.replace(entry, key=key)
    return dict(sorted(found.items()))


Fingerprint = tuple[tuple[str, int, int], ...]


def fingerprint(model_dir: ModelDir | Path) -> Fingerprint:
    """A value that changes when anything under the model directory changes (for poll mode).

    One ``(relative path, mtime_ns, size)`` per file, ``(relative path/, -1, -1)`` per directory
    (so that additions and removals show even in empty folders), sorted.  ``__pycache__`` and
    ``*.pyc`` are skipped: loading a Python model writes them, which must not look like an edit.
    Directory mtimes are not used for the same reason.  Symlinks are followed (loops cut).
    """
    root = model_dir.path if isinstance(model_dir, ModelDir) else model_dir
    entries: list[tuple[str, int, int]] = []
    seen_dirs: set[tuple[int, int]] = set()

    def walk(directory: Path, rel: str) -> None:
        try:
            st = directory.stat()
        except OSError:
            return
        key = (st.st_dev, st.st_ino)
        if key in seen_dirs:
            return
        seen_dirs.add(key)
        try:
            children = list(os.scandir(directory))
        except OSError:
            return
        for child in children:
            if child.name in _IGNORED_NAMES or child.name.endswith(".pyc"):
                continue
            child_rel = f"{rel}{child.name}"
            try:
                child_st = child.stat()  # follows symlinks
            except OSError:
                continue  # vanished or dangling link
            if stat.S_ISDIR(child_st.st_mode):
                entries.append((f"{child_rel}/", -1, -1))
                walk(Path(child.path), f"{child_rel}/")
            else:
                entries.append((child_rel, child_st.st_mtime_ns, child_st.st_size))

    walk(root, "")
    entries.sort()
    return tuple(entries)


#: what the reference leaves out of a version's files: the config, and the folder of ``--model-config-name``
_CONFIG_ENTRIES = frozenset({"config.pbtxt", "configs"})


def version_files(mark: Fingerprint, version: int) -> Fingerprint:
    """The part of a model folder's fingerprint that decides whether ``version`` changed, as the
    reference's ``IsModelVersionModified``: its version folder and what lies beside the version
    folders, except the config."""
    v = str(version)
    out = []
    for entry in mark:
        top = entry[0].split("/", 1)[0]
        if top == v or not (top.isdigit() or top in _CONFIG_ENTRIES):
            out.append(entry)
    return tuple(out)
