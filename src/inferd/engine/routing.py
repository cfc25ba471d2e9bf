"""Traffic split between versions (beyond the reference): blue/green and canary deployments.

A model's ``version_weights`` parameter (``parameters { key: "version_weights" value:
{ string_value: "1:90,2:10" } }``) routes the inference requests that name no version among its
READY versions by weight; a request that names a version gets that version, and metadata, config
and readiness without a version still mean the highest READY version, as in the reference. The
weights are read from the highest READY version's config, so a load with a config override moves
the traffic without a restart; the statistics of each version show its share. Routing is a smooth
weighted round robin (as nginx's): exact shares over any window of the weights' sum, no
randomness, no lock (it runs on the event loop).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from inferd.engine.model import Model
from inferd.errors import InvalidArgumentError

if TYPE_CHECKING:
    from inferd.repository.config.schema import ModelConfig

WEIGHTS_PARAM = "version_weights"


def parse_weights(cfg: ModelConfig) -> dict[int, int]:
    """The config's ``version_weights`` as {version: weight}; {} when it has none."""
    param = cfg.parameters.get(WEIGHTS_PARAM)
    if param is None:
        return {}
    text = param.string_value
    weights: dict[int, int] = {}
    for part in text.split(","):
        version, colon, weight = part.strip().partition(":")
        try:
            v, w = int(version), int(weight)
        except ValueError:
            v = w = -1
        if not colon or v < 1 or w < 0 or v in weights:
            raise InvalidArgumentError(
                f"model '{cfg.name}': parameter '{WEIGHTS_PARAM}' must read '<version>:<weight>,...' with "
                f"versions >= 1 named once and weights >= 0, not '{text}'"
            )
        weights[v] = w
    if not any(weights.values()):
        raise InvalidArgumentError(
            f"model '{cfg.name}': parameter '{WEIGHTS_PARAM}' gives every version weight 0"
        )
    return weights


class VersionRouter:
    """Picks the version of each request that names none."""

    __slots__ = ("_current", "_models", "_total", "_weights")

    def __init__(self, weighted: list[tuple[Model, int]]) -> None:
        self._models = [m for m, _ in weighted]
        self._weights = [w for _, w in weighted]
        self._total = sum(self._weights)
        self._current = [0] * len(weighted)

    def pick(self) -> Model:
        current, weights = self._current, self._weights
        best = 0
        for i, w in enumerate(weights):
            current[i] += w
            if current[i] > current[best]:
                best = i
        current[best] -= self._total
        return self._models[best]


def router_for(ready: list[Model]) -> VersionRouter | None:
    """The router of a model's READY versions, or None when its config sets no weights (or none
    of the weighted versions is READY: the highest READY version serves)."""
    if not ready:
        return None
    weights = parse_weights(max(ready, key=lambda m: m.version).config)
    weighted = [
        (m, weights[m.version]) for m in sorted(ready, key=lambda m: m.version) if weights.get(m.version)
    ]
    return VersionRouter(weighted) if weighted else None
