"""Model control: what is loaded after start, in Triton's three modes.

- ``none``: every model loads at start; load and unload requests are refused.
- ``explicit``: only ``--load-model`` models (``*``: all) load at start; the repository API loads
  and unloads, a load optionally with a ``config`` override (JSON) and ``file:<path>`` overrides
  written to a fresh private folder, never into the repository.
- ``poll``: every model loads at start, and the repositories are looked at every
  ``--repository-poll-secs``: a model added, changed (any file's size or modification time) or
  removed is loaded, reloaded or unloaded.

A load of a model whose folder did not change since it was loaded (no file added, removed or
modified, no config override) does nothing, as the reference's. A version whose files did not
change and whose new config differs only in ``instance_group`` (or ``version_policy``) is updated
where it serves: instances added and removed, the others kept (engine/instance_update.py). Any other
reload brings the new versions up beside the old ones and switches when they are READY: a
request is routed to the old or to the new, never to neither (routing and the switch both happen
on the event loop). The old versions then drain (their in-flight requests finish, up to
``--exit-timeout-secs``) and unload. A reload that fails leaves the old versions serving.
Unload answers once the model is gone, drained and released (the reference answers at once, while
the model is still UNLOADING).

Actions on one model run one at a time; actions on different models overlap. One lock guards the
bookkeeping, and is let go while a model's files are read, its versions load (initialize, warmup)
and its old versions drain, so that one slow load (a model's initialize that takes minutes) holds
up no other model's load or unload; an action on a model whose action is under way waits for it
(engine/control_lock.py).

Under ``--model-namespacing`` (repository/namespaced.py) a model is known by its key
(``<repository>::<name>``): a load or unload of a name acts on every repository's model of that
name, as the reference's, and an ensemble unloaded because its step was is loaded again when the
step is (the reference's dependency graph; with or without namespacing).
Under a memory budget (``--model-memory-budget``) every action runs alone: it measures each load's
memory growth.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path
from typing import NoReturn

from inferd.engine.agents import AgentAction, AgentChain
from inferd.engine.control_lock import ControlLock
from inferd.engine.instance_update import requires_reload, update_instances
from inferd.engine.lifecycle import ModelLifecycle
from inferd.engine.model import Model
from inferd.engine.on_demand import MemoryBudget
from inferd.engine.overrides import Uploads, load_source, poll_failed, sweep_stale
from inferd.engine.repository_manager import (
    FoundAtLoad,
    Loader,
    Prepared,
    status_text,
    without_paths,
)
from inferd.errors import InferdError, InvalidArgumentError, UnavailableError, UnsupportedError
from inferd.repository import ModelDir, fingerprint
from inferd.repository.config.schema import ModelConfig
from inferd.repository.namespaced import NamespacedRepositories
from inferd.repository.remote import RepositorySet
from inferd.repository.scan import Fingerprint, version_files

log = logging.getLogger("inferd.repository")

MODES = ("none", "poll", "explicit")


class ModelControl:
    """Loads and unloads the models of ``registry`` after start (see the module docstring)."""

    def __init__(
        self,
        mode: str,
        repositories: list[Path],
        loader: Loader,
        drain_timeout_s: float,
        uploads: Uploads | None = None,
    ) -> None:
        self.mode = mode
        self._repositories = repositories
        #: the repositories, local and in object storage (repository/remote.py)
        self._sources = (NamespacedRepositories if loader.settings.model_namespacing else RepositorySet)(
            repositories
        )
        #: the one load path, shared with the start (engine/repository_manager.py)
        self._loader = loader
        #: the registry, and the one writer of the versions' states (engine/lifecycle.py)
        self._registry: ModelLifecycle = loader.lifecycle
        self._settings = loader.settings
        self._drain_timeout_s = drain_timeout_s
        #: the lock, and one action per model at a time (engine/control_lock.py)
        self._locks = ControlLock()
        #: model name -> the fingerprint of the folder it was loaded from (poll mode's look)
        self._seen: dict[str, Fingerprint] = {}
        #: model name -> its folder's fingerprint when it was last loaded from the repository (none
        #: after a load with file overrides): what tells a load that changes nothing
        self._stamps: dict[str, Fingerprint] = {}
        #: model name -> the private folder of its file overrides (removed when it unloads)
        self._override_dirs: dict[str, Path] = {}
        #: model name -> its repository agents (engine/agents.py), told of its unload
        self._agents: dict[str, AgentChain] = {}
        #: the folders of file overrides and their bytes (``--model-upload-max-bytes``)
        self.uploads = uploads if uploads is not None else Uploads(0)
        #: models loaded only as an ensemble's steps (the reference's explicitly_load_ false):
        #: ``unload_dependents`` takes them along with the last ensemble that used them
        self._implicit: set[str] = set()
        #: step name -> the ensembles unloaded because it was: its next load loads them again, as
        #: the reference's dependency graph does (an ensemble unloaded by name is not among them)
        self._orphans: dict[str, set[str]] = {}
        #: models whose load is under way (lock held): one of them may load another from its
        #: ``initialize`` (pb_utils.load_model) while the lock's holder waits for it
        self._busy: set[str] = set()
        #: ``--model-memory-budget`` (engine/on_demand.py): loads measured, idle models unloaded to fit
        self.budget: MemoryBudget | None = None

    # -- start ---------------------------------------------------------------------------------------
    async def start(self, startup_models: list[str]) -> None:
        await asyncio.to_thread(sweep_stale)  # override folders of servers that crashed or were killed
        if self.budget is not None and startup_models == ["*"]:  # one at a time, each measured
            startup_models = await asyncio.to_thread(self._sources.names)
        if self.mode == "explicit" and startup_models != ["*"]:
            if "*" in startup_models:
                raise InvalidArgumentError(
                    "Wildcard model name '*' must be the ONLY startup model if specified at all."
                )
            for name in startup_models:
                try:
                    await self.load(name, check_mode=False)
                except InferdError as e:
                    log.error("%s", e.message)
                    if not self._registry.models.get(name):
                        self._registry.refused(name, e.message)
            return
        found = await self._loader.load_all(self._sources, self._agents)
        if self.mode != "none":
            ready = {n: md for n, md in found.items() if self._registry.is_ready(n)}
            self._stamps = await asyncio.to_thread(lambda: {n: fingerprint(md) for n, md in ready.items()})
        if self.mode == "poll":  # the stores' marks from the listings the load used
            self._seen = await asyncio.to_thread(self._sources.fingerprints, fingerprint, False)

    def known_models(self) -> list[str]:
        """Every model the repositories hold now (the index lists those not loaded too)."""
        if self.mode == "none":
            return []
        return self._sources.names()  # a store's models as of its last listing: no network here

    # -- the repository API --------------------------------------------------------------------------
    def _check_mode(self) -> None:
        if self.mode != "explicit":
            raise UnavailableError("explicit model load / unload is not allowed if polling is enabled")

    async def load(
        self,
        name: str,
        config: str | None = None,
        files: dict[str, bytes] | None = None,
        check_mode: bool = True,
    ) -> None:
        """Load (or reload) ``name``; an ensemble's missing step models load first."""
        if check_mode:
            self._check_mode()
        async with self._locks.lock:
            await self._load_keys(name, config, files or {})

    async def _load_keys(
        self, name: str, config: str | None, files: dict[str, bytes], locked: bool = True
    ) -> None:
        """Load every model a load of ``name`` means (``--model-namespacing``: each repository's
        of that name, as the reference loads them; the first failure is raised once all were tried)."""
        failure: InferdError | None = None
        for key in await asyncio.to_thread(self._sources.keys, name):
            try:
                await self._load(key, config, files, set(), locked=locked)
            except InferdError as e:
                failure = failure or e
        if failure is not None:
            raise failure

    async def load_if_needed(self, name: str) -> None:
        """Load ``name`` unless it is READY (a load on demand: engine/on_demand.py)."""
        async with self._locks.lock:
            await self._locks.wait_free(name, True)  # a load of it under way: its outcome first
            if not self._registry.is_ready(name):
                await self._load_keys(name, None, {})

    def knows(self, name: str) -> bool:
        """Whether a repository holds ``name`` now (a store's models as of its last listing)."""
        return any(self._registry.name_of(known) == name for known in self._sources.names())

    async def unload(self, name: str, unload_dependents: bool = False, check_mode: bool = True) -> None:
        if check_mode:
            self._check_mode()
        async with self._locks.lock:
            for key in self._registry.keys_of(name):
                await self._unload(key, unload_dependents)

    # -- registered repositories (SageMaker's multi-model endpoints) ---------------------------------
    async def register_repository(self, path: Path, mapping: dict[str, str], label: str = "") -> None:
        """Serve the models of folder ``path`` too, those named in ``mapping`` (model name ->
        subfolder) under those names (repository/registered.py); explicit mode only, as the reference."""
        if self.mode != "explicit":
            raise UnsupportedError(
                "repository registration is not allowed if model control mode is not EXPLICIT"
            )
        async with self._locks.lock:
            await asyncio.to_thread(self._sources.registered.add, path, mapping, label)

    async def unregister_repository(self, path: Path) -> None:
        if self.mode != "explicit":
            raise UnsupportedError(
                "repository unregistration is not allowed if model control mode is not EXPLICIT"
            )
        async with self._locks.lock:
            registered = self._sources.registered
            reg = next((r for r in registered.all() if str(r.path) == str(path)), None)
            served = set() if reg is None else set(reg.mapping) | set(registered.unmapped(reg))
            registered.remove(path)
            # what the folder served and nothing serves now leaves the index, as the reference's
            still = set(self._sources.names())
            for name in served - still:
                versions = self._registry.models.get(name, {})
                if not any(m.scheduler is not None for m in versions.values()):
                    self._registry.forget(name)

    def registrations(self) -> list[tuple[str, str, dict[str, str]]]:
        """The registered folders, oldest first: (label, path, mapping)."""
        return [(r.label, str(r.path), dict(r.mapping)) for r in self._sources.registered.all()]

    # -- from a model (pb_utils.load_model / unload_model) -------------------------------------------
    async def load_from_model(
        self, caller: str, name: str, config: str | None, files: dict[str, bytes]
    ) -> None:
        """A load a model asks for, as the API's. From a model that is being loaded (its
        ``initialize``, as the reference's example does) while its load holds the lock (a memory
        budget lets no load go of it): without the lock, its holder waits for that model, so
        nothing else holding it runs meanwhile."""
        self._check_mode()
        if caller in self._busy and self._locks.lock.locked() and self.budget is not None:
            await self._load_keys(name, config, files, locked=False)
        else:
            async with self._locks.lock:
                await self._load_keys(name, config, files)

    async def unload_from_model(self, caller: str, name: str, unload_dependents: bool) -> None:
        """An unload a model asks for (see ``load_from_model``)."""
        self._check_mode()
        if name in self._busy:
            raise UnavailableError(f"'{name}' is being loaded: it cannot be unloaded meanwhile")
        locked = not (caller in self._busy and self._locks.lock.locked() and self.budget is not None)
        async with self._locks.lock if locked else contextlib.nullcontext():
            for key in self._registry.keys_of(name):
                await self._unload(key, unload_dependents, locked=locked)

    # -- poll mode -----------------------------------------------------------------------------------
    def _scan_fingerprints(self) -> dict[str, Fingerprint]:
        return self._sources.fingerprints(fingerprint)

    async def poll_once(self) -> None:
        """Load what was added or changed since the last look, unload what was removed."""
        async with self._locks.lock:
            try:
                now = await asyncio.to_thread(self._scan_fingerprints)
            except InferdError as e:
                log.error("polling the model repositories failed: %s", e.message)
                return
            for recovered in self._sources.recovered():
                self._registry.clear_failure(recovered)
            for name in sorted(set(self._seen) - set(now)):
                log.info("'%s' left the repository: unloading it", name)
                await self._unload(name, False)
                self._seen.pop(name, None)
                if not any(m.scheduler is not None for m in self._registry.models.get(name, {}).values()):
                    self._registry.forget(name)  # the reference's index stops listing it
            for name, mark in sorted(now.items()):
                if self._seen.get(name) == mark:
                    continue
                log.info(
                    "'%s' %s the repository: loading it",
                    name,
                    "changed in" if name in self._seen else "joined",
                )
                self._seen[name] = mark
                try:
                    await self._load(name, None, {}, set())
                except InferdError as e:
                    log.error("%s", e.message)

    async def poll_forever(self, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            await self.poll_once()

    # -- the work (lock held) ------------------------------------------------------------------------
    def _window(self, locked: bool) -> contextlib.AbstractAsyncContextManager[None]:
        """The lock let go for a slow part (engine/control_lock.py); not under a memory budget,
        which measures each load alone (engine/on_demand.py), nor where this chain does not hold it."""
        return self._locks.window(locked and self.budget is None)

    async def _load(
        self, name: str, config: str | None, files: dict[str, bytes], loading: set[str], locked: bool = True
    ) -> None:
        async with self._locks.claimed(name, locked):
            self._busy.add(name)
            try:
                await self._load_busy(name, config, files, loading, locked)
            finally:
                self._busy.discard(name)

    async def _load_busy(
        self, name: str, config: str | None, files: dict[str, bytes], loading: set[str], locked: bool
    ) -> None:
        registry = self._registry
        if loading:  # a step an ensemble's load needs, not a model asked for by name
            self._implicit.add(name)
        else:
            self._implicit.discard(name)
        loading.add(name)
        async with self._window(locked):
            md, override, mark = await asyncio.to_thread(
                load_source, self._sources, self.uploads, name, registry.name_of(name), config, files
            )
        if (
            override is None
            and mark is not None
            and self._stamps.get(name) == mark
            and registry.is_ready(name)
        ):
            log.info("'%s' is unchanged since it was loaded: nothing to load", name)
            current = registry.ready_default.get(name)
            if current is not None:  # its steps' models are looked for again, as the reference's
                await self._load_steps(current.config, loading, locked)
            if self.budget is not None:
                self.budget.touch(name)
            return
        src = md  # where the load came from; the versions load from where its agents put them
        try:
            async with self._window(locked):
                prepared = await self._loader.prepare(md, override)
        except FoundAtLoad as found:  # as the reference's backends find it at load: the version fails
            e = found.error
            if not md.versions:
                self._drop_override(md, files)
                raise poll_failed(name, without_paths(e.message, md)) from None
            failed_model = Model(
                md.name,
                max(md.versions),
                override or ModelConfig(name=md.name),
                md.path,
                key=name,
            )
            log.error("failed to load '%s' version %d: %s", name, failed_model.version, status_text(e))
            registry.unavailable(failed_model, without_paths(status_text(e), md))
            self._fail(name, [failed_model], md, files)
        except InferdError as e:  # the reference finds it reading the repository: nothing is loaded,
            self._drop_override(md, files)  # what serves serves on, the server stays ready
            raise poll_failed(name, without_paths(e.message, md)) from None
        agents = prepared.agents
        try:
            await self._load_prepared(name, src, prepared, mark, files, loading, locked)
        except BaseException:
            if agents is not None:
                agents.act(AgentAction.LOAD_FAIL)
                agents.release()
            raise
        if agents is not None:
            agents.act(AgentAction.LOAD_COMPLETE)
        for orphan in sorted(self._orphans.pop(registry.name_of(name), ())):
            if orphan not in loading and not registry.is_ready(orphan):
                log.info("loading '%s': its step '%s' is back", orphan, name)
                try:
                    await self._load(orphan, None, {}, set(), locked)
                except InferdError as e:
                    log.error("%s", e.message)

    async def _load_prepared(
        self,
        name: str,
        src: ModelDir,
        prepared: Prepared,
        mark: Fingerprint | None,
        files: dict[str, bytes],
        loading: set[str],
        locked: bool,
    ) -> None:
        """The versions of a model whose config is ready: loaded beside the old ones, switched to,
        the old ones drained. ``src`` is the folder the load came from (its file overrides), the
        versions load from ``prepared.md`` (where its repository agents put it)."""
        settings, registry, loader = self._settings, self._registry, self._loader
        cfg, md, agents = prepared.config, prepared.md, prepared.agents
        old = registry.models.get(name, {})
        updated: dict[int, Model] = {}  # the versions updated in place
        if cfg.platform == "ensemble":
            await self._load_steps(cfg, loading, locked)
            new = loader.ensemble(md, cfg)
        else:
            try:
                versions = loader.versions(name, cfg, md)
            except InferdError as e:  # as the reference words it, and logs it
                log.error("failed to load model '%s': %s", name, e.message)
                self._drop_override(src, files)
                raise InvalidArgumentError(f"load failed for model '{name}': {e.message}\n") from None
            if not versions:
                self._drop_override(src, files)
                raise poll_failed(name, "no version is available")
            was = self._stamps.get(name)
            for v in versions:
                serving = old.get(v)
                if serving is not None and self._updatable(serving, cfg, was, mark, v):
                    updated[v] = serving
            to_load = [v for v in versions if v not in updated]
            budget = self.budget if to_load else None
            baseline = 0 if budget is None else await budget.before_load(name, md.path, loading, self._evict)
            async with self._window(locked):
                new = await loader.load_versions(name, to_load, md, cfg)
            if budget is not None and all(m.ready for m in new):
                try:
                    budget.loaded(name, baseline)
                except InferdError as e:  # larger than the whole budget: not kept
                    for m in new:
                        await self._stop(m)
                    self._drop_override(src, files)
                    if not registry.is_ready(name):
                        registry.refused(name, e.message)
                    raise
        if any(not m.ready for m in new):
            for m in new:
                if m.ready:
                    await self._stop(m)
            self._fail(name, new, src, files)
        for version, model in updated.items():
            try:
                await update_instances(
                    model, cfg, settings.loop, self._drain_timeout_s, settings.rate_limiter
                )
            except Exception as e:  # the version serves on as it was; the new ones go (the reference's)
                for m in new:
                    await self._stop(m)
                self._drop_override(src, files)
                why = status_text(e) if isinstance(e, InferdError) else f"{type(e).__name__}: {e}"
                raise InvalidArgumentError(
                    f"load failed for model '{name}': version {version} is at READY state: {why};\n"
                ) from e
        fresh = {m.version: m for m in new} | updated
        # requests go to the new versions from here on; versions the new load leaves out stay
        # listed, as UNAVAILABLE "unloaded" once stopped
        registry.register(name, fresh)
        if mark is None:
            self._stamps.pop(name, None)
        else:
            self._stamps[name] = mark
        old_dir = self._override_dirs.pop(name, None)
        old_agents = self._agents.pop(name, None)
        if agents is not None:
            self._agents[name] = agents
        if files:
            self._override_dirs[name] = src.path
        log.info("loaded '%s' (%s)", name, ", ".join(f"version {v}" for v in sorted(fresh)))
        async with self._window(locked):  # the old versions drain while other models load
            for m in old.values():
                if updated.get(m.version) is not m:
                    await self._stop(m)
        if old_dir is not None:
            self.uploads.remove(old_dir)
        if old_agents is not None:  # the folders its agents made for the versions now gone
            old_agents.release()
        if self.budget is not None:
            self.budget.touch(name)
            await self.budget.fit(loading, self._evict, why=name)

    async def _load_steps(self, cfg: ModelConfig, loading: set[str], locked: bool) -> None:
        """Load the models an ensemble's steps name that do not serve (namespaced: every
        repository's model of the name, as the reference loads them)."""
        for step in cfg.ensemble_scheduling.step:
            for key in await asyncio.to_thread(self._sources.keys, step.model_name):
                if key not in loading and not self._registry.is_ready(key):
                    await self._load(key, None, {}, loading, locked)

    def _updatable(
        self, model: Model, cfg: ModelConfig, was: Fingerprint | None, mark: Fingerprint | None, version: int
    ) -> bool:
        """Whether a load of ``version`` with ``cfg`` updates ``model`` (serving it) in place."""
        return (
            model.ready
            and model.backend_model is not None
            and bool(model.members)
            and was is not None
            and mark is not None
            and version_files(was, version) == version_files(mark, version)
            and not requires_reload(model.config, cfg)
        )

    def _fail(self, name: str, new: list[Model], md: ModelDir, files: dict[str, bytes]) -> NoReturn:
        """A load whose versions did not all come up: the old ones serve on; with none, the new
        failures are listed (the index shows why)."""
        self._drop_override(md, files)
        registry = self._registry
        if not any(m.ready for m in registry.models.get(name, {}).values()):
            registry.list_failed(name, {m.version: m for m in new})
        failed = [m for m in new if not m.ready]
        reasons = "".join(f"version {m.version} is at UNAVAILABLE state: {m.reason};\n" for m in failed)
        raise InvalidArgumentError(f"load failed for model '{name}': {reasons}")

    def _drop_override(self, md: ModelDir, files: dict[str, bytes]) -> None:
        if files:
            self.uploads.remove(md.path)

    async def _unload(self, name: str, unload_dependents: bool, locked: bool = True) -> None:
        """Unload ``name``, as the reference's dependency graph does: the ensembles using it cannot
        serve without it and are unloaded too; with ``unload_dependents`` so are the models it
        uses (an ensemble's steps) that were loaded only for it and that no other ensemble uses."""
        async with self._locks.claimed(name, locked):
            await self._unload_claimed(name, unload_dependents, locked)

    async def _unload_claimed(self, name: str, unload_dependents: bool, locked: bool) -> None:
        registry = self._registry
        for orphans in self._orphans.values():  # unloaded by name: no step's load brings it back
            orphans.discard(name)
        step_name = registry.name_of(name)
        # namespaced: an ensemble's step goes to another repository's model of the name while one serves
        others = [k for k in registry.keys_of(step_name) if k != name and registry.is_ready(k)]
        for other, versions in list(registry.models.items()) if not others else []:
            if other != name and any(
                _uses(m, step_name) for m in versions.values() if m.scheduler is not None
            ):
                log.info("unloading '%s': its step '%s' is being unloaded", other, name)
                await self._unload(other, False, locked)
                self._orphans.setdefault(step_name, set()).add(other)
        versions = registry.models.get(name, {})
        live = [m for m in versions.values() if m.scheduler is not None]
        steps = {
            s.model_name
            for m in live
            if m.config.platform == "ensemble"
            for s in m.config.ensemble_scheduling.step
        }
        registry.unloading(live)  # no new requests
        agents = self._agents.pop(name, None)
        if agents is not None:
            agents.act(AgentAction.UNLOAD)
        async with self._window(locked):  # they drain while other models load
            for m in live:
                await self._stop(m)
        if agents is not None:
            agents.act(AgentAction.UNLOAD_COMPLETE)
            agents.release()
        folder = self._override_dirs.pop(name, None)
        if folder is not None:
            self.uploads.remove(folder)
        self._implicit.discard(name)
        self._stamps.pop(name, None)
        if live:
            log.info("successfully unloaded '%s'", name)
        if self.budget is not None:
            self.budget.forget(name)
        if unload_dependents:
            for step in sorted(k for k in self._implicit if registry.name_of(k) in steps):
                still_used = any(
                    _uses(m, registry.name_of(step))
                    for ms in registry.models.values()
                    for m in ms.values()
                    if m.scheduler is not None
                )
                if not still_used:
                    await self._unload(step, True, locked)

    async def _evict(self, name: str) -> None:
        """Unload ``name`` (and the ensembles using it), to fit the memory budget (lock held)."""
        await self._unload(name, False)

    async def _stop(self, model: Model) -> None:
        """Drain ``model`` (in-flight requests finish) and release it."""
        self._registry.unloading([model])
        scheduler, model.scheduler = model.scheduler, None
        if scheduler is not None:
            await scheduler.stop(self._drain_timeout_s)
        self._registry.unloaded(model)


def _uses(model: Model, name: str) -> bool:
    """Whether ``model`` is an ensemble with a step on ``name``."""
    cfg = model.config
    return cfg.platform == "ensemble" and any(s.model_name == name for s in cfg.ensemble_scheduling.step)
