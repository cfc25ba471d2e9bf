"""Model repositories in object storage: ``s3://`` (S3 and S3-compatible stores), ``as://``
(Azure Blob) and ``gs://`` (Google Cloud Storage), the reference's URL forms, alongside local folders.

A remote repository is listed (one paginated listing of its prefix per look) and each model is
fetched into the local cache (``repository/cache.py``) and described as a local
:class:`~inferd.repository.scan.ModelDir`: everything after the scan (config, autofill, backends)
sees a local folder. Poll mode's fingerprint of a remote model comes from the listing (paths,
sizes, ETags), so a change is noticed without downloading anything.

:class:`RepositorySet` is what the core holds: the ``--model-repository`` values, local and remote,
with the last listing of each remote one. Every method that may reach the network is meant to run on
a worker thread (``asyncio.to_thread``). A store that cannot be read yields :class:`Unreadable`
entries whose reason names the URL, never a credential; the other repositories are unaffected.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from inferd.errors import InferdError, UnavailableError
from inferd.repository.cache import ModelCache, StoredObject, safe_relative
from inferd.repository.registered import Registrations
from inferd.repository.scan import (
    DuplicateModel,
    ModelDir,
    scan_model_dir,
    scan_repositories,
)
from inferd.repository.store_url import StoreURL, parse_store_url

__all__ = [
    "ObjectStore",
    "RemoteRepository",
    "RepositorySet",
    "StoreURL",
    "Unreadable",
    "open_store",
    "parse_store_url",
]

log = logging.getLogger("inferd.repository")

Fingerprint = tuple[tuple[str, int, int], ...]

_FETCH_THREADS = 4


class ObjectStore(Protocol):
    """What a repository needs of a store. Errors are InferdErrors whose text names no secret."""

    def list(self) -> list[StoredObject]:
        """Every object under the repository's prefix, paths relative to it."""
        ...

    def download(self, obj: StoredObject, dest: Path) -> None:
        """Write ``obj`` to ``dest`` (failing if it changed since it was listed)."""
        ...


def open_store(url: StoreURL) -> ObjectStore:
    """The store of ``url``; its SDK is imported here (``inferd[s3]``, ``inferd[azure]``,
    ``inferd[gcs]``)."""
    if url.scheme == "s3":
        from inferd.repository.s3 import S3Store

        return S3Store(url)
    if url.scheme == "gs":
        from inferd.repository.gcs import GCSStore

        return GCSStore(url)
    from inferd.repository.azure import AzureBlobStore

    return AzureBlobStore(url)


@dataclass(frozen=True, slots=True)
class Unreadable:
    """A model, or a whole repository (``name`` is then its URL), that could not be read from its
    store: UNAVAILABLE with ``reason``."""

    name: str
    reason: str


Entry = ModelDir | DuplicateModel | Unreadable


class RemoteRepository:
    """One remote repository: its listing, grouped by model, and its models fetched into the cache."""

    def __init__(
        self,
        url: StoreURL,
        cache: ModelCache,
        store_factory: Callable[[StoreURL], ObjectStore] = open_store,
    ) -> None:
        self.url = url
        self._cache = cache
        self._factory = store_factory
        self._store: ObjectStore | None = None
        #: the last listing that succeeded: model name -> its objects
        self.last: dict[str, list[StoredObject]] | None = None

    def _open(self) -> ObjectStore:
        if self._store is None:
            self._store = self._factory(self.url)
        return self._store

    def listing(self) -> dict[str, list[StoredObject]]:
        """The models of the repository and their objects (one listing of the store)."""
        try:
            objects = self._open().list()
        except InferdError as e:
            raise UnavailableError(f"failed to read model repository '{self.url}': {e.message}") from None
        models: dict[str, list[StoredObject]] = {}
        for obj in objects:
            rel = safe_relative(obj.path)
            if rel is None or (len(rel.parts) < 2 and not obj.is_folder):
                continue  # a file beside the models, or a key no folder can hold
            models.setdefault(rel.parts[0], []).append(obj)
        self.last = {name: models[name] for name in sorted(models)}
        return self.last

    def fetch(self, name: str, objects: Sequence[StoredObject]) -> ModelDir:
        """The model fetched (or found in the cache) and described as a local folder."""
        store = self._open()
        try:
            folder = self._cache.fetch(str(self.url), name, objects, store.download)
        except InferdError as e:
            raise UnavailableError(f"failed to fetch '{name}' from '{self.url}': {e.message}") from None
        except OSError as e:
            raise UnavailableError(f"failed to fetch '{name}' from '{self.url}': {e}") from None
        md = scan_model_dir(folder, folder.parent)
        return md

    @staticmethod
    def fingerprint(objects: Iterable[StoredObject]) -> Fingerprint:
        """Poll mode's mark of a model: (path, size, a number from the ETag and time) per object."""
        return tuple(sorted((o.path, o.size, _mark(o.etag, o.modified)) for o in objects))


def _mark(etag: str, modified: str) -> int:
    digest = hashlib.blake2b(f"{etag}\0{modified}".encode(), digest_size=7).digest()
    return int.from_bytes(digest, "big")


class RepositorySet:
    """The server's repositories, local folders and remote stores (see the module docstring)."""

    def __init__(self, locations: Sequence[str | Path], cache: ModelCache | None = None) -> None:
        self.local: list[Path] = []
        self.remote: list[RemoteRepository] = []
        cache = cache if cache is not None else ModelCache()
        for location in locations:
            url = parse_store_url(location)
            if url is None:
                self.local.append(Path(location))
            else:
                self.remote.append(RemoteRepository(url, cache))
        #: repository URL -> why its last listing failed (cleared when one succeeds)
        self.failures: dict[str, str] = {}
        #: folders registered while the server runs (SageMaker's multi-model endpoints)
        self.registered = Registrations()

    def _list(self, repo: RemoteRepository) -> dict[str, list[StoredObject]] | None:
        try:
            listing = repo.listing()
        except InferdError as e:
            log.error("%s", e.message)
            self.failures[str(repo.url)] = e.message
            return None
        self.failures.pop(str(repo.url), None)
        return listing

    def _duplicate(self, name: str, holders: list[tuple[RemoteRepository | None, str]]) -> DuplicateModel:
        return DuplicateModel(name, tuple(Path(where) for _, where in holders))

    def _holders(
        self,
        local: dict[str, ModelDir | DuplicateModel],
        listings: list[dict[str, list[StoredObject]] | None],
    ) -> dict[str, list[tuple[RemoteRepository | None, str]]]:
        """name -> the repositories holding it (None for a local one) with where it is."""
        found: dict[str, list[tuple[RemoteRepository | None, str]]] = {}
        for name, entry in local.items():
            paths = entry.paths if isinstance(entry, DuplicateModel) else (entry.path,)
            found.setdefault(name, []).extend((None, str(p)) for p in paths)
        for repo, listing in zip(self.remote, listings, strict=True):
            for name in listing or {}:
                found.setdefault(name, []).append((repo, f"{repo.url}/{name}"))
        return found

    def scan(self) -> dict[str, Entry]:
        """Every model of every repository (remote ones fetched), sorted by name; a repository that
        could not be listed is an :class:`Unreadable` entry under its URL. A missing local folder
        raises InvalidArgumentError, as ``scan_repositories`` does."""
        local = scan_repositories(self.local)
        listings = [self._list(repo) for repo in self.remote]
        result: dict[str, Entry] = {}
        to_fetch: list[tuple[str, RemoteRepository, list[StoredObject]]] = []
        for name, holders in self._holders(local, listings).items():
            if len(holders) > 1:
                result[name] = self._duplicate(name, holders)
            elif holders[0][0] is None:
                result[name] = local[name]
            else:
                repo = holders[0][0]
                to_fetch.append((name, repo, (repo.last or {})[name]))
        if to_fetch:
            with ThreadPoolExecutor(min(_FETCH_THREADS, len(to_fetch)), "inferd-fetch") as pool:
                fetched = list(pool.map(lambda job: self._fetch_entry(*job), to_fetch))
            for (name, _, _), entry in zip(to_fetch, fetched, strict=True):
                result[name] = entry
        for url, reason in self.failures.items():
            result[url] = Unreadable(url, reason)
        return dict(sorted(result.items()))

    @staticmethod
    def _fetch_entry(name: str, repo: RemoteRepository, objects: list[StoredObject]) -> Entry:
        try:
            return repo.fetch(name, objects)
        except InferdError as e:
            log.error("%s", e.message)
            return Unreadable(name, e.message)

    def find(self, name: str) -> Entry | None:
        """The one model ``name`` (fetched if remote), a duplicate, why it cannot be read, or None
        when no repository holds it."""
        mapped = self.registered.mapped(name)  # a mapping wins over every folder's name
        if mapped is not None:
            return mapped
        local = scan_repositories(self.local)  # cheap; of the remote models only this one is fetched
        local = self.registered.merged(local)
        listings = [self._list(repo) for repo in self.remote]
        holders = self._holders(local, listings).get(name, [])
        if len(holders) > 1:
            return self._duplicate(name, holders)
        if holders:
            repo = holders[0][0]
            if repo is None:
                return local[name]
            return self._fetch_entry(name, repo, (repo.last or {})[name])
        if self.failures:  # it may be in a store that could not be read
            return Unreadable(name, "; ".join(self.failures.values()))
        return None

    def keys(self, name: str) -> list[str]:
        """The registry keys a load of ``name`` loads: the name itself (each repository's model of
        that name under ``--model-namespacing``: repository/namespaced.py)."""
        return [name]

    def names(self) -> list[str]:
        """The models known now, without the network: local folders and the last listings."""
        try:
            names = set(scan_repositories(self.local))
        except InferdError:
            names = set()
        names.update(self.registered.names())
        for repo in self.remote:
            names.update(repo.last or {})
        return sorted(names)

    def fingerprints(
        self, local_fingerprint: Callable[[Path], Fingerprint], relist: bool = True
    ) -> dict[str, Fingerprint]:
        """Poll mode's marks: local folders by ``local_fingerprint``, remote models by their listing
        (a fresh one, or with ``relist`` false the last one: what the load at start used).

        A store that cannot be listed now keeps its last listing's marks, so its models are neither
        reloaded nor unloaded while it is away (the failure is logged and kept in ``failures``).
        A name held by two repositories is left out (it cannot load).
        """
        local = scan_repositories(self.local)
        marks: dict[str, Fingerprint] = {}
        counts: dict[str, int] = {}
        for name, entry in local.items():
            counts[name] = 2 if isinstance(entry, DuplicateModel) else 1
            if isinstance(entry, ModelDir):
                marks[name] = local_fingerprint(entry.path)
        for repo in self.remote:
            listing = self._list(repo) if relist else None
            for name, objects in (listing if listing is not None else repo.last or {}).items():
                counts[name] = counts.get(name, 0) + 1
                marks[name] = (
                    (f"{repo.url}/", -1, -1),
                    *RemoteRepository.fingerprint(objects),
                )
        return {n: m for n, m in sorted(marks.items()) if counts[n] == 1}

    def recovered(self) -> list[str]:
        """The repositories (their URLs: the names their failures are listed under) whose last
        listing succeeded."""
        return [
            str(repo.url)
            for repo in self.remote
            if str(repo.url) not in self.failures and repo.last is not None
        ]
