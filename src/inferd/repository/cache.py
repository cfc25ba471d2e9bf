"""The local cache of models fetched from object storage: content-addressed, shared, race-safe.

A model's folder is ``<cache>/<key>/<model name>/``, where ``key`` is a digest of the store it came
from (scheme, endpoint, bucket or container, prefix: never a credential), the model's name and the
listing of its objects (each object's path, size and ETag). So:

- two servers on one machine that point at the same store share the folder, and a server that
  restarts finds it there: an unchanged model is not fetched again;
- a change in the store (any object added, removed or rewritten: a new ETag) is a new key, a new
  folder, never an edit of a folder a running model may be reading;
- two processes fetching the same model at once each write a private temporary folder and
  ``rename`` it into place: the first rename wins, the loser removes its copy and uses the winner's.
  A folder under its key is therefore always complete.

Nothing is evicted (a folder per version of a model in the store is kept): remove the cache folder
to reclaim the space.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from inferd.errors import UnavailableError

__all__ = ["CACHE_ENV", "ModelCache", "StoredObject", "default_cache_dir", "safe_relative"]

log = logging.getLogger("inferd.repository")

#: the environment variable that moves the cache (default: ``$XDG_CACHE_HOME/inferd/models``)
CACHE_ENV = "INFERD_MODEL_CACHE"
_TMP_PREFIX = ".fetching-"


@dataclass(frozen=True, slots=True)
class StoredObject:
    """One object of a remote repository, as its store lists it.

    ``path`` is relative to the repository (``add_sub/1/model.py``); a path ending in ``/`` is a
    folder marker (some tools write one per folder, so empty version folders survive).
    ``etag`` and ``modified`` are the store's own text, compared and never interpreted.
    """

    path: str
    size: int
    etag: str
    modified: str = ""

    @property
    def is_folder(self) -> bool:
        return self.path.endswith("/")


def default_cache_dir() -> Path:
    """``$INFERD_MODEL_CACHE``, else ``$XDG_CACHE_HOME/inferd/models``, else ``~/.cache/inferd/models``."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "inferd" / "models"


def safe_relative(path: str) -> PurePosixPath | None:
    """``path`` as a relative path that stays below its folder, or None (absolute, ``..``, empty)."""
    segments = path.rstrip("/").split("/")
    if not path or path.startswith("/") or "\\" in path or any(s in ("", ".", "..") for s in segments):
        return None
    return PurePosixPath(path)


class ModelCache:
    """Models fetched from object storage, under ``root`` (see the module docstring)."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = root if root is not None else default_cache_dir()

    @staticmethod
    def key(source: str, name: str, objects: Sequence[StoredObject]) -> str:
        """The digest naming a model's folder: the store, the model and its listing."""
        h = hashlib.sha256()
        for part in (source, name):
            h.update(part.encode())
            h.update(b"\0")
        for obj in sorted(objects, key=lambda o: o.path):
            h.update(f"{obj.path}\0{obj.size}\0{obj.etag}\n".encode())
        return h.hexdigest()[:40]

    def folder(self, source: str, name: str, objects: Sequence[StoredObject]) -> Path:
        """Where the model lives once fetched (it may not be there yet)."""
        return self.root / self.key(source, name, objects) / name

    def fetch(
        self,
        source: str,
        name: str,
        objects: Sequence[StoredObject],
        download: Callable[[StoredObject, Path], None],
    ) -> Path:
        """The model's folder, fetched with ``download(object, destination)`` unless cached.

        ``objects`` paths start with ``name/``. A download that fails leaves nothing behind.
        """
        final = self.folder(source, name, objects)
        if final.is_dir():
            log.debug("'%s' from %s: cached at %s", name, source, final)
            return final
        self.root.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=_TMP_PREFIX, dir=self.root))
        try:
            model = staging / name
            model.mkdir()
            for obj in objects:
                rel = safe_relative(obj.path)
                if rel is None or rel.parts[0] != name:
                    log.warning("skipping object '%s' of %s: not a path inside the model", obj.path, source)
                    continue
                target = staging.joinpath(*rel.parts)
                if obj.is_folder:
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                download(obj, target)
                got = target.stat().st_size
                if got != obj.size:
                    raise UnavailableError(
                        f"'{obj.path}' of {source} changed while it was fetched "
                        f"(listed {obj.size} bytes, read {got})"
                    )
            self._publish(staging, final.parent)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        log.info("fetched '%s' from %s into %s", name, source, final)
        return final

    @staticmethod
    def _publish(staging: Path, destination: Path) -> None:
        """Rename the complete staging folder into place; another process's copy may have won."""
        try:
            os.rename(staging, destination)
        except OSError as e:
            if e.errno not in (errno.EEXIST, errno.ENOTEMPTY) or not destination.is_dir():
                raise UnavailableError(f"failed to store a fetched model at {destination}: {e}") from e
