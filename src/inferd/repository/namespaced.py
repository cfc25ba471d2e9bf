"""``--model-namespacing``: the repositories' models by namespace, as the reference keeps them.

Without namespacing a name held by two repositories is a duplicate that does not load. With it,
every repository is a namespace (its path, or a store's URL) and every model is known by its key,
``<namespace>::<name>`` (``repository/scan.py`` ``model_key``): two repositories may each hold a
model of one name, and both load. What a client sends names a model alone; the registry
(engine/lifecycle.py) resolves the name to the one key of that name that serves, and refuses a name
two serving models share as the reference does ("... model namespace must be provided to resolve
ambiguity."). An ensemble's step goes to the model of its own namespace first
(``ModelLifecycle.step_key``). Every model gets a key, even one whose name no other repository
holds, so that a key never changes while a model serves (a second repository adding the name later
must not reload the first's).

Registered folders (SageMaker's multi-model endpoints, ``repository/registered.py``) keep plain
names: the reference serves them in the default namespace.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path

from inferd.errors import InferdError
from inferd.repository.cache import StoredObject
from inferd.repository.remote import Entry, RemoteRepository, RepositorySet, Unreadable
from inferd.repository.scan import (
    KEY_SEP,
    Fingerprint,
    ModelDir,
    key_name,
    key_namespace,
    model_key,
    scan_model_dir,
    scan_namespaced,
)


class NamespacedRepositories(RepositorySet):
    """The server's repositories, each one a namespace (see the module docstring)."""

    def _remote_keys(
        self, listings: list[dict[str, list[StoredObject]] | None]
    ) -> dict[str, RemoteRepository]:
        found: dict[str, RemoteRepository] = {}
        for repo, listing in zip(self.remote, listings, strict=True):
            for name in listing or {}:
                found[model_key(str(repo.url), name)] = repo
        return found

    def scan(self) -> dict[str, Entry]:
        """Every model of every repository by its key (remote ones fetched); a repository that
        could not be listed is an :class:`Unreadable` entry under its URL."""
        result: dict[str, Entry] = dict(scan_namespaced(self.local))
        listings = [self._list(repo) for repo in self.remote]
        for key, repo in self._remote_keys(listings).items():
            result[key] = self._fetch_key(key, repo)
        for url, reason in self.failures.items():
            result[url] = Unreadable(url, reason)
        return dict(sorted(result.items()))

    def _fetch_key(self, key: str, repo: RemoteRepository) -> Entry:
        name = key_name(key)
        entry = self._fetch_entry(name, repo, (repo.last or {})[name])
        if isinstance(entry, ModelDir):
            entry.key = key
        return entry

    def find(self, name: str) -> Entry | None:
        """The model of key ``name`` (fetched if remote), or None when its repository does not hold
        it (a plain name: a registered folder's, as without namespacing)."""
        if KEY_SEP not in name:
            return super().find(name)
        namespace, model = key_namespace(name), key_name(name)
        for local in self.local:
            if str(local) == namespace:
                folder = local / model
                if not folder.is_dir():
                    return None
                md = scan_model_dir(folder, local)
                md.key = name
                return md
        for repo in self.remote:
            if str(repo.url) == namespace:
                listing = self._list(repo)
                if listing is None:
                    return Unreadable(name, self.failures.get(str(repo.url), "unreadable"))
                return self._fetch_key(name, repo) if model in listing else None
        return None

    def keys(self, name: str) -> list[str]:
        """The key of every repository's model ``name`` (from the folders now and the stores' last
        listings), or ``[name]`` when none holds it (its load says it is not found)."""
        if KEY_SEP in name:
            return [name]
        keys = [k for k in self.names() if key_name(k) == name and KEY_SEP in k]
        return keys or [name]

    def names(self) -> list[str]:
        """The keys of the models known now, without the network (and registered folders' names)."""
        names: set[str] = set(self.registered.names())
        with contextlib.suppress(InferdError):  # a folder unreadable now: its models are not known now
            names.update(scan_namespaced(self.local))
        for repo in self.remote:
            names.update(model_key(str(repo.url), n) for n in repo.last or {})
        return sorted(names)

    def fingerprints(
        self, local_fingerprint: Callable[[Path], Fingerprint], relist: bool = True
    ) -> dict[str, Fingerprint]:
        """Poll mode's marks by key (see ``RepositorySet.fingerprints``); no name is left out."""
        marks = {key: local_fingerprint(md.path) for key, md in scan_namespaced(self.local).items()}
        for repo in self.remote:
            listing = self._list(repo) if relist else None
            for name, objects in (listing if listing is not None else repo.last or {}).items():
                marks[model_key(str(repo.url), name)] = (
                    (f"{repo.url}/", -1, -1),
                    *RemoteRepository.fingerprint(objects),
                )
        return dict(sorted(marks.items()))
