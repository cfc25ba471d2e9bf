"""A load's ``file:<path>`` overrides: a client's files, written to a private folder of their own.

The files are untrusted input. Each load's go to a fresh folder in the temporary folder (never into a
repository, and never under a path made from the model's name: a client sends any string), checked
before anything is written:

- each path stays inside the folder (relative, no ``..``, no NUL), is at most ``MAX_DEPTH`` names
  deep with names of at most ``MAX_NAME`` bytes, and no path is another's folder (``1`` beside
  ``1/model.py``); at most ``MAX_FILES`` files;
- the bytes of every upload the server holds at once (each load's files count until its model is
  unloaded or loaded again) stay within ``--model-upload-max-bytes``.

A file that still cannot be written (a full disk) fails the load with the system's reason, never
with a server path. The folders are named ``inferd-override-<pid>-...``: a server starting removes
those whose process is gone (a server that crashed or was killed left them).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import logging
import os
import shutil
import tempfile
import threading
from pathlib import Path, PurePosixPath
from typing import Any

from google.protobuf import json_format

from inferd.errors import InternalError, InvalidArgumentError
from inferd.repository import DuplicateModel, ModelDir, fingerprint
from inferd.repository.config.schema import ModelConfig
from inferd.repository.remote import RepositorySet, Unreadable
from inferd.repository.scan import Fingerprint, scan_model_dir

log = logging.getLogger("inferd.repository")

FILE_PREFIX = "file:"
OVERRIDE_PREFIX = "inferd-override-"
#: files one load may carry
MAX_FILES = 1000
#: names in one file's path (``1/model.py`` is 2)
MAX_DEPTH = 32
#: bytes of one name in a path (the file systems' NAME_MAX)
MAX_NAME = 255


def _refused(name: str, rel: str, why: str) -> InvalidArgumentError:
    shown = rel.replace("\0", "\\0")
    if len(shown) > 100:  # a path thousands of names deep is shown by its start
        shown = shown[:100] + "..."
    return InvalidArgumentError(
        f"failed to load '{name}', failed to poll from model repository: Invalid file parameter "
        f"'{FILE_PREFIX}{shown}': {why}"
    )


def path_problem(rel: str) -> str | None:
    """Why the override path ``rel`` cannot be written inside its folder; None when it can."""
    if not rel:
        return "the path is empty"
    if "\0" in rel:
        return "the path holds a NUL character"
    pure = PurePosixPath(rel)
    if pure.is_absolute() or ".." in pure.parts or not pure.parts or pure.parts == (".",):
        return "the path must stay within the model directory"
    if len(pure.parts) > MAX_DEPTH:
        return f"the path is {len(pure.parts)} names deep; at most {MAX_DEPTH} are allowed"
    for part in pure.parts:
        if len(part.encode("utf-8", "surrogateescape")) > MAX_NAME:
            return f"a name in the path is longer than {MAX_NAME} bytes"
    return None


class Uploads:
    """The override folders this server holds, and their bytes against ``max_bytes`` (0: no bound)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        #: folder -> the bytes of its files (loads of different models write at once: ``_guard``)
        self._held: dict[Path, int] = {}
        self._guard = threading.Lock()

    @property
    def held_bytes(self) -> int:
        return sum(self._held.values())

    def write(self, name: str, files: dict[str, bytes]) -> Path:
        """Write ``files`` (path -> bytes) to a fresh folder, the model's folder for this load;
        InvalidArgumentError naming the file and why when one cannot be written (nothing is kept)."""
        with self._guard:  # checked and counted at once: two loads cannot both take the last room
            self._check(name, files)
            root = Path(tempfile.mkdtemp(prefix=f"{OVERRIDE_PREFIX}{os.getpid()}-")).resolve()
            self._held[root] = sum(len(d) for d in files.values())
        try:
            for rel, data in files.items():
                target = root / PurePosixPath(rel)
                try:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    with open(target, "xb") as f:
                        f.write(data)
                except OSError as e:  # the reason only: the folder's path is the server's business
                    raise _refused(
                        name, rel, f"it cannot be written: {e.strerror or type(e).__name__}"
                    ) from None
        except BaseException:
            self.remove(root)
            raise
        return root

    def _check(self, name: str, files: dict[str, bytes]) -> None:
        if len(files) > MAX_FILES:
            raise InvalidArgumentError(
                f"failed to load '{name}', failed to poll from model repository: {len(files)} file "
                f"parameters; at most {MAX_FILES} are allowed"
            )
        parts: dict[PurePosixPath, str] = {}
        for rel in files:
            why = path_problem(rel)
            if why is not None:
                raise _refused(name, rel, why)
            parts[PurePosixPath(rel)] = rel
        for pure, rel in parts.items():  # a file that is another one's folder
            for parent in pure.parents:
                if parent in parts:
                    raise _refused(name, rel, f"'{FILE_PREFIX}{parts[parent]}' is a file, not a folder")
        size = sum(len(d) for d in files.values())
        if self.max_bytes and self.held_bytes + size > self.max_bytes:
            raise InvalidArgumentError(
                f"failed to load '{name}', failed to poll from model repository: its files ({size} bytes) "
                f"and the models uploaded before ({self.held_bytes} bytes) exceed --model-upload-max-bytes "
                f"({self.max_bytes}); unload an uploaded model first"
            )

    def remove(self, folder: Path) -> None:
        """Remove ``folder``, a folder ``write`` made, and nothing else: a path that is not such a
        folder (not named so, not directly in the temporary folder, a link) is left alone."""
        with self._guard:
            self._held.pop(folder, None)
        _remove(folder)


def _remove(folder: Path) -> None:
    if (
        folder.name.startswith(OVERRIDE_PREFIX)
        and folder.parent == Path(tempfile.gettempdir()).resolve()
        and not folder.is_symlink()
    ):
        shutil.rmtree(folder, ignore_errors=True)
    else:  # never expected: a bug, said loudly rather than a tree removed
        log.error("not removing '%s': it is not an override folder of this server", folder)


def _owner_pid(folder: str) -> int | None:
    """The pid in an override folder's name (``inferd-override-<pid>-...``), or None."""
    pid, sep, _ = folder[len(OVERRIDE_PREFIX) :].partition("-")
    return int(pid) if sep and pid.isdigit() and pid.isascii() else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def sweep_stale(tmp: Path | None = None) -> list[Path]:
    """Remove the override folders of this user's servers that are gone (crashed, killed) from
    ``tmp`` (the temporary folder): at start. A folder whose process still runs (another server on
    this machine) is left alone."""
    tmp = Path(tempfile.gettempdir()).resolve() if tmp is None else tmp
    removed = []
    try:
        entries = list(os.scandir(tmp))
    except OSError:
        return []
    uid = os.getuid()
    for entry in entries:
        if not entry.name.startswith(OVERRIDE_PREFIX):
            continue
        pid = _owner_pid(entry.name)
        try:
            if pid is None or pid == os.getpid() or not entry.is_dir(follow_symlinks=False):
                continue
            if entry.stat(follow_symlinks=False).st_uid != uid or _alive(pid):
                continue
        except OSError:
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        removed.append(Path(entry.path))
    if removed:
        log.info("removed %d override folder(s) left by servers that are gone", len(removed))
    return removed


def load_parameters(params: dict[str, Any], base64_files: bool) -> tuple[str | None, dict[str, bytes]]:
    """A load request's parameters: the ``config`` override and the ``file:<path>`` overrides
    (base64 text over HTTP, bytes over gRPC), with the reference's answers to other values."""
    config: str | None = None
    files: dict[str, bytes] = {}
    for key, value in params.items():
        if key == "config":
            if not isinstance(value, str):
                raise InternalError("attempt to access JSON non-string as string")
            config = value
        elif key.startswith(FILE_PREFIX):
            if base64_files:
                if not isinstance(value, str):
                    raise InternalError("attempt to access JSON non-string as string")
                try:
                    data = base64.b64decode(value, validate=True)
                except binascii.Error as e:
                    raise InvalidArgumentError(f"the contents of '{key}' are not base64: {e}") from None
            elif isinstance(value, bytes):
                data = value
            else:
                raise InvalidArgumentError(f"the contents of '{key}' must be bytes_param")
            files[key[len(FILE_PREFIX) :]] = data
        else:
            raise InternalError(
                f"unexpected error on creating Triton parameter: '{key}' is not a load parameter "
                "('config' or 'file:<path>')"
            )
    return config, files


def poll_failed(name: str, why: str) -> InternalError:
    return InternalError(f"failed to load '{name}', failed to poll from model repository: {why}")


def load_source(
    sources: RepositorySet,
    uploads: Uploads,
    name: str,
    model: str,
    config: str | None,
    files: dict[str, bytes],
) -> tuple[ModelDir, ModelConfig | None, Fingerprint | None]:
    """What a load of ``name`` (a registry key; ``model`` its model's name) loads: its folder (in a repository, or a fresh one
    holding its ``file:`` overrides), the config override, and the folder's fingerprint (None for
    a folder of file overrides)."""
    override = None
    if config is not None:
        try:
            override = json_format.Parse(config, ModelConfig())
        except json_format.ParseError as e:
            raise poll_failed(name, f"Invalid config override: {e}") from None
        except RecursionError:  # JSON nested thousands deep: no config is
            raise poll_failed(name, "Invalid config override: nested too deeply") from None
        if not override.name:
            override.name = name
    if files:
        if override is None:
            raise poll_failed(name, "Load parameter 'config' must be specified for model file override")
        folder = uploads.write(model, files)
        md = dataclasses.replace(
            scan_model_dir(folder, folder.parent, name=model),
            uploaded=True,
            key="" if name == model else name,
        )
        return md, override, None
    entry = sources.find(name)
    if entry is None:
        raise poll_failed(name, "model not found in any model repository")
    if isinstance(entry, DuplicateModel | Unreadable):
        raise poll_failed(name, entry.reason)
    return entry, override, fingerprint(entry)
