"""``ModelLifecycle``: the registry of model versions, and the one writer of their state.

Every version the server knows is listed here by name and version (``models``), beside the names
whose load failed before any version could be made (``failed``: name -> reason). A version's state
and reason change through this class's transitions alone (``ready``, ``unavailable``,
``unloading``, ``unloaded``), as do the lists (``register``, ``list_failed``, ``refused``,
``forget``...). The maps a request is routed by (``ready_default``: name -> its highest READY
version; ``routes``: name -> how requests naming no version are split, engine/routing.py) are
refreshed inside each transition for the names it touches: nobody refreshes them by hand, and no
transition leaves them pointing at a version that stopped.

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
from inferd.errors import InferdError

#: the reason of a version that was stopped (the index lists it UNAVAILABLE "unloaded")
UNLOADED = "unloaded"


class ModelLifecycle:
    """name -> {version -> Model}, what failed to load and why, and the transitions between states."""

    def __init__(self) -> None:
        self._models: dict[str, dict[int, Model]] = {}
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
    def is_ready(self, name: str, version: str = "") -> bool:
        """Whether ``name`` has a READY version (``version`` "": any)."""
        versions = self._models.get(name, {})
        if not version:
            return any(m.ready for m in versions.values())
        m = versions.get(int(version))
        return m is not None and m.ready

    def all_versions(self) -> list[Model]:
        """Every version listed, of every model."""
        return [m for versions in self._models.values() for m in versions.values()]

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
            names.add(model.name)
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
        self._refresh(name)

    def list_failed(self, name: str, versions: Mapping[int, Model]) -> None:
        """A load of ``name`` none of whose versions serves: ``versions`` (its failed ones) replace
        what was listed, so that the index shows why."""
        self._models[name] = dict(versions)
        self._refresh(name)

    def refused(self, name: str, reason: str) -> None:
        """No version of ``name`` could be made (its config, a duplicate, a store unreadable)."""
        self._failed[name] = reason

    def clear_failure(self, name: str) -> None:
        """``name``'s failure is past (a store that is readable again)."""
        self._failed.pop(name, None)

    def forget(self, name: str) -> None:
        """``name`` left the repositories, none of its versions running: not listed any more."""
        self._models.pop(name, None)
        self._failed.pop(name, None)
        self._refresh(name)

    # -- inside ----------------------------------------------------------------------------------------
    def _move(self, model: Model, state: ModelState, reason: str) -> None:
        model._state, model._reason = state, reason
        if self._models.get(model.name, {}).get(model.version) is model:
            self._refresh(model.name)

    def _refresh(self, name: str) -> None:
        """``ready_default`` and ``routes`` of ``name``, from its versions' states now."""
        ready = [m for m in self._models.get(name, {}).values() if m.ready]
        if not ready:
            self._ready_default.pop(name, None)
            self._routes.pop(name, None)
            return
        self._ready_default[name] = max(ready, key=lambda m: m.version)
        try:
            router = router_for(ready)
        except InferdError:  # checked at load; an ensemble's config is not: it serves unsplit
            router = None
        if router is None:
            self._routes.pop(name, None)
        else:
            self._routes[name] = router
