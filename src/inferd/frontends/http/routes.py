"""The HTTP API's routes as paths: which model route a path is, and the access category of each."""

from __future__ import annotations

import re

from inferd.frontends.access import Category
from inferd.frontends.http.status import PATHS as STATUS_PATHS

MODEL_RE = re.compile(
    r"^/v2/models/([^/]+)(?:/versions/([0-9]+))?(?:/(infer|generate|generate_stream|ready|config|stats|trace/setting))?$"
)


_ACTION_CATEGORY = {
    None: Category.METADATA,
    "ready": Category.HEALTH,
    "config": Category.MODEL_CONFIG,
    "stats": Category.STATISTICS,
    "infer": Category.INFERENCE,
    "generate": Category.INFERENCE,
    "generate_stream": Category.INFERENCE,
    "trace/setting": Category.TRACE,
}


def route_category(path: str) -> Category | None:
    """The API category of a route (None: no such route)."""
    if path.startswith("/v2/models/"):
        if path == "/v2/models/stats":
            return Category.STATISTICS
        m = MODEL_RE.match(path)
        return None if m is None else _ACTION_CATEGORY[m.group(3)]
    if path.startswith("/v2/health/"):
        return Category.HEALTH
    if path in STATUS_PATHS:
        return Category.STATISTICS
    if path in ("/v2", "/v2/openapi.json"):
        return Category.METADATA
    if path.startswith("/v2/repository"):
        return Category.MODEL_REPOSITORY
    if path.startswith(("/v2/systemsharedmemory", "/v2/cudasharedmemory")):
        return Category.SHARED_MEMORY
    if path.startswith("/v2/trace"):
        return Category.TRACE
    if path.startswith("/v2/logging"):
        return Category.LOGGING
    return None
