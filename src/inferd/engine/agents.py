"""Repository agents: ``model_repository_agents`` in a model's config, acting on its files as the
model loads and unloads (Triton's TRITONREPOAGENT API, in Python).

A config names its agents in order, each with parameters::

    model_repository_agents { agents [ { name: "checksum", parameters { key: "MD5:1/model.py" value: "..." } } ] }

Each agent's ``model_action`` runs for every action of the model's life, in the order the config
lists them: ``LOAD`` once the config is read and before anything reads the model's files (an
agent may check them, or put the model elsewhere: ``AgentModel.acquire_location`` gives it a
folder of its own, ``set_location`` points the load there: decryption, conversion), then
``LOAD_COMPLETE`` or ``LOAD_FAIL``, and ``UNLOAD`` / ``UNLOAD_COMPLETE`` around the unload. An
agent that raises during ``LOAD`` fails the load with its message, as the reference fails it (a
failure reading the repository: nothing loads, what serves serves on); errors of the other actions
are logged. A folder an agent acquired is removed once the model no longer uses it.

Agents: ``checksum`` (built in: the reference agent's ``<ALGORITHM>:<file>`` parameters and texts,
MD5 as it supports) and any registered under the ``inferd.repoagents`` entry point (a class
or factory taking no argument). A name neither knows fails the load.
"""

from __future__ import annotations

import enum
import hashlib
import importlib.metadata
import logging
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from inferd.errors import InferdError, InvalidArgumentError, UnsupportedError

if TYPE_CHECKING:
    from inferd.repository.config.schema import ModelConfig

log = logging.getLogger("inferd.repository")

ENTRY_POINT_GROUP = "inferd.repoagents"


class AgentAction(enum.Enum):
    """The reference's TRITONREPOAGENT_ActionType."""

    LOAD = "LOAD"
    LOAD_COMPLETE = "LOAD_COMPLETE"
    LOAD_FAIL = "LOAD_FAIL"
    UNLOAD = "UNLOAD"
    UNLOAD_COMPLETE = "UNLOAD_COMPLETE"


@dataclass(eq=False)
class AgentModel:
    """What an agent sees of one model: its name, config, the folder it loads from and the
    agent's parameters. ``location`` may be changed during ``LOAD`` with ``set_location``."""

    name: str
    location: Path
    config: ModelConfig
    parameters: Mapping[str, str] = field(default_factory=dict)
    #: folders this model's agents acquired (removed when the model no longer needs them)
    acquired: list[Path] = field(default_factory=list)

    def acquire_location(self) -> Path:
        """A fresh private folder for the agent to write the model into (then ``set_location``)."""
        folder = Path(tempfile.mkdtemp(prefix=f"inferd-agent-{self.name[:40].replace('/', '_')}-"))
        self.acquired.append(folder)
        return folder

    def set_location(self, folder: Path) -> None:
        """Load the model from ``folder`` (one ``acquire_location`` gave) instead."""
        if folder not in self.acquired:
            raise InvalidArgumentError(
                f"a repository agent of model '{self.name}' may only move it to a folder it acquired"
            )
        self.location = folder

    def release(self) -> None:
        for folder in self.acquired:
            shutil.rmtree(folder, ignore_errors=True)
        self.acquired.clear()


class RepositoryAgent(Protocol):
    """One agent (the reference's TRITONREPOAGENT_ModelAction): raise an InferdError to fail."""

    def model_action(self, action: AgentAction, model: AgentModel) -> None: ...


class ChecksumAgent:
    """The reference's checksum agent: every parameter ``<ALGORITHM>:<file>`` holds the hex digest
    of that file of the model's folder (MD5, as the reference's supports), checked at ``LOAD``."""

    ALGORITHMS = {"md5": ("MD5", hashlib.md5)}

    def model_action(self, action: AgentAction, model: AgentModel) -> None:
        if action is not AgentAction.LOAD:
            return
        for key, expected in model.parameters.items():
            algorithm, sep, relative = key.partition(":")
            if not sep:
                raise InvalidArgumentError(f"failed to parse key: {key}")
            known = self.ALGORITHMS.get(algorithm.lower())
            if known is None:
                raise UnsupportedError(f"Unsupported checksum algorithm: {algorithm}")
            label, new_hash = known
            path = (model.location / relative).resolve()
            if not path.is_relative_to(model.location.resolve()):
                raise InvalidArgumentError(f"failed to open text file for read {relative}: outside the model")
            try:
                data = path.read_bytes()
            except OSError as e:
                raise InvalidArgumentError(
                    f"failed to open text file for read {relative}: {e.strerror or type(e).__name__}"
                ) from None
            got = new_hash(data).hexdigest()
            if got != expected:
                raise InvalidArgumentError(
                    f"Mismatched {label} hash for file {relative}, expect: {expected}, got: {got}"
                )


_BUILTIN: dict[str, type[RepositoryAgent]] = {"checksum": ChecksumAgent}
_cache: dict[str, RepositoryAgent] = {}


def get_agent(name: str) -> RepositoryAgent:
    """The agent ``name``: built in, or registered under the ``inferd.repoagents`` entry point."""
    agent = _cache.get(name)
    if agent is not None:
        return agent
    cls = _BUILTIN.get(name)
    if cls is not None:
        agent = cls()
    else:
        found = [ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP) if ep.name == name]
        if not found:
            raise InvalidArgumentError(
                f"unable to find repository agent '{name}': inferd has {', '.join(sorted(_BUILTIN))}, and "
                f"agents registered under the '{ENTRY_POINT_GROUP}' entry point"
            )
        agent = found[0].load()()
    _cache[name] = agent
    return agent


@dataclass(eq=False)
class AgentChain:
    """A model's agents, in the config's order, with the model as they see it."""

    agents: list[tuple[str, RepositoryAgent, AgentModel]]

    @property
    def location(self) -> Path | None:
        """Where the model loads from after the agents' ``LOAD`` (None: where it is)."""
        return self.agents[-1][2].location if self.agents else None

    def act(self, action: AgentAction) -> None:
        """Run ``action`` on every agent. ``LOAD`` raises the first failure (the load fails);
        other actions' failures are logged."""
        for name, agent, model in self.agents:
            try:
                agent.model_action(action, model)
            except Exception as e:
                if action is AgentAction.LOAD:
                    raise
                why = e.message if isinstance(e, InferdError) else f"{type(e).__name__}: {e}"
                log.error(
                    "repository agent '%s' failed %s of model '%s': %s", name, action.value, model.name, why
                )

    def release(self) -> None:
        for _, _, model in self.agents:
            model.release()


def load_agents(config: ModelConfig, name: str, location: Path) -> AgentChain | None:
    """Run the ``LOAD`` action of ``config``'s agents on the model at ``location``: None when it
    names none; else the chain (its ``location`` is where to load from). InferdError when an agent
    is unknown or refuses the model (what it made is removed)."""
    listed = list(config.model_repository_agents.agents)
    if not listed:
        return None
    chain = AgentChain([])
    where = location
    try:
        for spec in listed:
            model = AgentModel(name, where, config, dict(spec.parameters))
            chain.agents.append((spec.name, get_agent(spec.name), model))
            chain.agents[-1][1].model_action(AgentAction.LOAD, model)
            where = model.location
    except InferdError:
        chain.release()
        raise
    except Exception as e:  # an agent's own bug: the load fails with what it raised
        chain.release()
        raise InvalidArgumentError(f"repository agent failed: {type(e).__name__}: {e}") from e
    return chain
