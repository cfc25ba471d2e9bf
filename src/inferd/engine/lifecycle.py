"""Model states, as Triton names them."""

from __future__ import annotations

import enum


class ModelState(enum.Enum):
    """The state of one model version."""

    UNKNOWN = "UNKNOWN"
    LOADING = "LOADING"
    READY = "READY"
    UNLOADING = "UNLOADING"
    UNAVAILABLE = "UNAVAILABLE"
