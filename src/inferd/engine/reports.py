"""What the server reports of its models: the repository index, the statistics extension, and the
load failures and model table printed at start. Read-only functions of the registry
(engine/lifecycle.py), which ServerCore answers with."""

from __future__ import annotations

from typing import Any

from inferd.engine.lifecycle import UNLOADED, ModelLifecycle
from inferd.engine.model import ModelState
from inferd.errors import InferdError, InvalidArgumentError


def load_failures(registry: ModelLifecycle) -> list[tuple[str, str, str]]:
    """(model, version, reason) of every model or version that failed to load."""
    out = [(name, "", reason) for name, reason in sorted(registry.failed.items())]
    for name, versions in sorted(registry.models.items()):
        for v, m in sorted(versions.items()):
            if m.state is ModelState.UNAVAILABLE and m.reason != UNLOADED:
                out.append((name, str(v), m.reason))
    return out


def model_table(registry: ModelLifecycle) -> list[tuple[str, str, str]]:
    """(model, version, status) rows as the reference prints them at start."""
    rows = [(name, "-", f"UNAVAILABLE: {reason}") for name, reason in sorted(registry.failed.items())]
    for name, versions in registry.models.items():
        for v, m in versions.items():
            status = m.state.value + (f": {m.reason}" if m.reason else "")
            rows.append((name, str(v), status))
    return sorted(rows)


def statistics(registry: ModelLifecycle, name: str = "", version: str = "") -> dict[str, Any]:
    """The statistics extension's answer: every READY version's, or one model's (one version's)."""
    stats: list[dict[str, Any]] = []
    if not name:
        for _key, versions in sorted(registry.models.items()):
            for v, m in sorted(versions.items()):
                if m.ready:
                    stats.append(m.stats.to_json(m.name, str(v)))
        return {"model_stats": stats}
    try:
        key = registry.resolve(name)
    except InferdError:  # a name two namespaces serve: the reference's answer
        key = ""
    ready = {v: m for v, m in registry.models.get(key, {}).items() if m.ready}
    if not ready:
        raise InvalidArgumentError(f"requested model '{name}' is not available")
    if version:
        one = ready.get(int(version))
        if one is None:
            raise InvalidArgumentError(f"requested model version is not available for model '{name}'")
        return {"model_stats": [one.stats.to_json(name, version)]}
    for v, mv in sorted(ready.items()):
        stats.append(mv.stats.to_json(name, str(v)))
    return {"model_stats": stats}


def repository_index(
    registry: ModelLifecycle, known: list[str], ready_only: bool = False
) -> list[dict[str, Any]]:
    """The repository index: every model listed, failed or (``known``: in the repositories) never
    loaded, by name; under namespacing a key is shown by its name."""
    out: list[dict[str, Any]] = []
    keys = set(registry.models) | set(registry.failed) | set(known)
    names = sorted(keys, key=lambda k: (registry.name_of(k), k))
    for key in names:  # a key: the name (--model-namespacing: <namespace>::<name>)
        name = registry.name_of(key)
        versions = registry.models.get(key, {})
        if not versions:
            if not ready_only and key not in registry.failed:
                out.append({"name": name})  # in the repository, never loaded (explicit mode)
            elif not ready_only:
                entry: dict[str, Any] = {"name": name, "version": "", "state": "UNAVAILABLE"}
                entry["reason"] = registry.failed.get(key, "")
                out.append({k: v for k, v in entry.items() if v != ""})
            continue
        for v, m in sorted(versions.items()):
            if ready_only and not m.ready:
                continue
            entry = {"name": name, "version": str(v), "state": m.state.value}
            if m.reason:
                entry["reason"] = m.reason
            out.append(entry)
    return out
