"""cuML's forests need a GPU: the QA's ``cuml`` model is not built here."""

from __future__ import annotations

from typing import Any


class _NeedsGPU:
    def __init__(self, *_: Any, **__: Any) -> None:
        raise RuntimeError("cuML's random forests run on a GPU: the 'cuml' model is not built by fil.sh")


class RandomForestClassifier(_NeedsGPU):
    pass


class RandomForestRegressor(_NeedsGPU):
    pass
