"""``ModelLifecycle``: the registry of model versions, and the one writer of their state.

Every version the server knows is listed here by name and version (``models``), beside the names
whose load failed before any version could be made (``failed``: name -> reason). A version's state
and reason change through this class's transitions alone (``ready``, ``unavailable``,
``unloading``, ``unloaded``), as do the lists (``register``, ``list_failed``, ``refused``,
``forget``...). The maps a request is routed by (``ready_default``: name -> its highest READY
version; ``routes``: name -> how requests naming no version are split, engine/routing.py) are
refreshed inside each transition for the names it touches: nobody refreshes them by hand, and no
transition leaves them pointing at a version that stopped.

Under ``--model-namespacing`` (repository/namespaced.py) the registry lists versions by key
(``<namespace>::<name>``), and a name that one serving key carries is an alias in ``ready_default``
and ``routes`` too, refreshed with the key: requests by name cost one look-up as before. A name two
serving keys carry is refused as the reference refuses it (``resolve``).

Readers get the maps as read-only ``Mapping``s: the same dicts, so that a request's look-up costs
what it always did (``ServerCore.submit``). A version's load (``ready``, ``unavailable``) may run
on a load thread, before the version is registered; registered versions and the maps change on the
event loop only (single writes of a dict: a look-up from another thread sees the old entry or the
new one).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from inferd.engine.model import Model, ModelState
from inferd.engine.routing import VersionRouter, router_for
from inferd.errors import InferdError, InvalidArgumentError, NotFoundError
from inferd.repository.scan import KEY_SEP, key_name, model_key

#: the reason of a version that was stopped (the index lists it UNAVAILABLE "unloaded")
UNLOADED = "unloaded"


class ModelLifecycle:
    """key -> {version -> Model}, what failed to load and why, and the transitions between states.

    A key is the model's name, or under ``--model-namespacing`` ``<namespace>::<name>``."""

    def __init__(self, namespacing: bool = False) -> None:
        #: ``--model-namespacing``: names resolve to keys (``resolve``), as the reference's global map
        self.namespacing = namespacing
        self._models: dict[str, dict[int, Model]] = {}
        #: name -> the namespaced keys listed with it (``--model-namespacing``)
        self._keys: dict[str, set[str]] = {}
        self._failed: dict[str, str] = {}
        self._ready_default: dict[str, Model] = {}
        self._routes: dict[str, VersionRouter] = {}
        #: name -> {version -> Model}: every version listed (READY or not)
        self.models: Mapping[str, Mapping[int, Model]] = self._models
        #: model name -> reason, when no version of it could be made
        self.failed: Mapping[str, str] = self._failed
        #: name -> its highest READY version
        self.ready_default: Mapping[str, Model] = self._ready_default
        #: name -> how requests naming no version are split between its versions (engine/routing.py)
        self.routes: Mapping[str, VersionRouter] = self._routes

    # -- reading ---------------------------------------------------------------------------------------
    def resolve(self, name: str) -> str:
        """The key requests naming ``name`` go to: itself, or (``--model-namespacing``) the one
        key of that name that has a READY version, else the one listed. Two READY keys of one name
        are refused as the reference refuses them."""
        keys = self._keys.get(name)
        if not keys or name in self._models:
            return name
        ready = sorted(k for k in keys if k in self._ready_default)
        if not ready:  # a key unloaded leaves the reference's global map; one that failed stays
            ready = sorted(k for k in keys if k in self._failed or not self._unloaded(k))
        if len(ready) > 1:
            raise InvalidArgumentError(
                f"There are {len(ready)} identifiers of model '{name}' in global map, model namespace "
                "must be provided to resolve ambiguity."
            )
        if ready:
            return ready[0]
        raise NotFoundError(f"Identifier of model '{name}' is not found in global map")

    def unknown(self, name: str) -> InferdError:
        """What a request naming a model nobody listed gets: the reference's NOT_FOUND, and with
        ``--model-namespacing`` its INVALID_ARG (the look-up in its global map fails that way)."""
        text = f"Request for unknown model: '{name}' is not found"
        return InvalidArgumentError(text) if self.namespacing else NotFoundError(text)

    def name_of(self, key: str) -> str:
        """The model name of a key (without namespacing a key is the name, "::" or not)."""
        return key_name(key) if self.namespacing else key

    def step_key(self, name: str, namespace: str) -> str:
        """Where an ensemble of ``namespace`` sends its step on ``name``: the model of its own
        namespace when that one serves, else whatever ``name`` resolves to."""
        key = model_key(namespace, name)
        return key if key in self._ready_default else name

    def keys_of(self, name: str) -> list[str]:
        """The keys listed with ``name`` (itself without namespacing)."""
        keys = self._keys.get(name)
        return sorted(keys) if keys else [name]

    def is_ready(self, name: str, version: str = "") -> bool:
        """Whether ``name`` has a READY version (``version`` "": any)."""
        try:
            name = self.resolve(name)
        except InferdError:
            return False
        versions = self._models.get(name, {})
        if not version:
            return any(m.ready for m in versions.values())
        m = versions.get(int(version))
        return m is not None and m.ready

    def all_versions(self) -> list[Model]:
        """Every version listed, of every model."""
        return [m for versions in self._models.values() for m in versions.values()]

    def _unloaded(self, key: str) -> bool:
        """Whether every version of ``key`` was unloaded (none listed: as good as)."""
        return all(m.reason == UNLOADED and not m.ready for m in self._models.get(key, {}).values())

    # -- a version's transitions -----------------------------------------------------------------------
    def ready(self, model: Model) -> None:
        """Loaded: it takes requests (once registered)."""
        self._move(model, ModelState.READY, "")

    def unavailable(self, model: Model, reason: str) -> None:
        """Its load failed (or was given up) with ``reason``; also a new reason for a failed version
        (the text clients read: engine/repository_manager.py ``without_paths``)."""
        self._move(model, ModelState.UNAVAILABLE, reason)

    def unloading(self, models: Iterable[Model]) -> None:
        """Takes no new requests: it drains."""
        names = set()
        for model in models:
            model._state = ModelState.UNLOADING
            names.add(model.key)
        for name in names:
            self._refresh(name)

    def unloaded(self, model: Model) -> None:
        """Stopped and released: listed UNAVAILABLE "unloaded"."""
        self._move(model, ModelState.UNAVAILABLE, UNLOADED)

    # -- the lists -------------------------------------------------------------------------------------
    def register(self, name: str, versions: Mapping[int, Model]) -> None:
        """A load of ``name`` made ``versions``: they serve from now on (READY ones take the requests
        naming no version), beside the versions listed before that the load did not make again,
        and the name's earlier failure is forgotten."""
        before = self._models.get(name, {})
        self._models[name] = {**{v: m for v, m in before.items() if v not in versions}, **versions}
        self._failed.pop(name, None)
        self._listed(name)
        self._refresh(name)

    def list_failed(self, name: str, versions: Mapping[int, Model]) -> None:
        """A load of ``name`` none of whose versions serves: ``versions`` (its failed ones) replace
        what was listed, so that the index shows why."""
        self._models[name] = dict(versions)
        self._listed(name)
        self._refresh(name)

    def refused(self, name: str, reason: str) -> None:
        """No version of ``name`` could be made (its config, a duplicate, a store unreadable)."""
        self._failed[name] = reason
        self._listed(name)

    def clear_failure(self, name: str) -> None:
        """``name``'s failure is past (a store that is readable again)."""
        self._failed.pop(name, None)

    def forget(self, name: str) -> None:
        """``name`` left the repositories, none of its versions running: not listed any more."""
        self._models.pop(name, None)
        self._failed.pop(name, None)
        if self.namespacing and KEY_SEP in name:
            keys = self._keys.get(key_name(name), set())
            keys.discard(name)
            if not keys:
                self._keys.pop(key_name(name), None)
        self._refresh(name)

    # -- inside ----------------------------------------------------------------------------------------
    def _listed(self, key: str) -> None:
        if self.namespacing and KEY_SEP in key:
            self._keys.setdefault(key_name(key), set()).add(key)

    def _move(self, model: Model, state: ModelState, reason: str) -> None:
        model._state, model._reason = state, reason
        if self._models.get(model.key, {}).get(model.version) is model:
            self._refresh(model.key)

    def _refresh(self, name: str) -> None:
        """``ready_default`` and ``routes`` of key ``name``, from its versions' states now (and of
        its name's alias under namespacing)."""
        ready = [m for m in self._models.get(name, {}).values() if m.ready]
        if not ready:
            self._ready_default.pop(name, None)
            self._routes.pop(name, None)
        else:
            self._ready_default[name] = max(ready, key=lambda m: m.version)
            try:
                router = router_for(ready)
            except InferdError:  # checked at load; an ensemble's config is not: it serves unsplit
                router = None
            if router is None:
                self._routes.pop(name, None)
            else:
                self._routes[name] = router
        if self.namespacing and KEY_SEP in name:
            self._alias(key_name(name))

    def _alias(self, name: str) -> None:
        """``name`` routes as its one serving key does, or not at all (none, or two: ambiguous)."""
        ready = [k for k in self._keys.get(name, ()) if k in self._ready_default]
        if len(ready) != 1:
            self._ready_default.pop(name, None)
            self._routes.pop(name, None)
            return
        self._ready_default[name] = self._ready_default[ready[0]]
        route = self._routes.get(ready[0])
        if route is None:
            self._routes.pop(name, None)
        else:
            self._routes[name] = route
