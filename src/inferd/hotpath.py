"""The compiled hot path (issue 48): which request-path modules run as mypyc extensions, or why not.

``make install`` (``python -m inferd.hotpath_build``, where a C compiler is present) compiles the
modules of ``MODULES`` with mypyc, unchanged: each gets an extension next to its ``.py`` (and the
group's runtime, ``inferd_hotpath__mypyc``, beside the package). Python's import system prefers an
extension to the source beside it, so a build is used without any switch. The source stays the only
copy of the code: the pure-Python path is the same files, interpreted.

``select()`` runs first thing in ``import inferd`` (on this module's import) and picks the pure path, by a finder that loads
these modules from their ``.py``, when ``INFERD_PURE_PYTHON`` is set (to anything but ``0``), or when
the build is stale: a module's source changed since it was compiled (the build wrote each source's
hash into ``hotpath_build.json``), or a module has no extension. A stale build would otherwise run old
code silently after an edit. ``describe()`` says which path runs and why (the server logs it once).
Only the standard library here: this runs before anything else of inferd is imported.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

#: compiled together as one mypyc group; what the request path runs through (benchmarks/calls.py's
#: profile). Not core/response.py (an async generator) nor scheduling/instances.py (``continue`` in a
#: ``try/finally``): mypyc 2.4 does not compile them. Handlers take a ``Responder`` Protocol, not the
#: compiled ``HttpResponder``: a compiled class is checked at every typed boundary of the group, and
#: LoggedResponder, TracedResponder stand in for it (responder.py). The lean gRPC server's request
#: path is compiled (h2wire to infer_call): interpreted, it read the compiled requests, tensors and
#: responses through generic attribute lookups (getset descriptors, which 3.11's specializing
#: interpreter does not specialize), which gave back about half of what compiling the core saved.
#: Not grpc/service.py (the servicer: the unit tests subclass InferenceServicer, and its per-call
#: part is one method and a callback), grpc/inbox.py (an async generator), stream_order.py (streams
#: only), aio.py (grpc.aio's server). The trace recorder and row formatter are compiled for the
#: flush's loops (rows.py's format_few); the trace hooks with them
MODULES = (
    "inferd.frontends.http.protocol",
    "inferd.frontends.http.header_cache",
    "inferd.frontends.http.encode",
    "inferd.frontends.http.infer_call",
    "inferd.frontends.http.app",
    "inferd.frontends.http.head",
    "inferd.frontends.http.responder",
    "inferd.frontends.grpc.h2wire",
    "inferd.frontends.grpc.h2life",
    "inferd.frontends.grpc.h2conn",
    "inferd.frontends.grpc.h2server",
    "inferd.frontends.grpc.request_cache",
    "inferd.frontends.grpc.codec",
    "inferd.frontends.grpc.infer_call",
    "inferd.core.request",
    "inferd.core.response_path",
    "inferd.core.stats",
    "inferd.core.tensor",
    "inferd.scheduling.execute",
    "inferd.scheduling.inline",
    "inferd.scheduling.queue",
    "inferd.engine.server",
    "inferd.backends.python.backend",
    "inferd.trace.record",
    "inferd.trace.rows",
    "inferd.frontends.http.trace",
    "inferd.frontends.grpc.trace",
)
GROUP = "inferd_hotpath"  # the mypyc group's shared runtime: inferd_hotpath__mypyc.<suffix> beside inferd/
ENV = "INFERD_PURE_PYTHON"
PACKAGE_DIR = Path(__file__).resolve().parent
MANIFEST = PACKAGE_DIR / "hotpath_build.json"

_state: dict[str, str] = {"path": "pure", "why": "not selected yet"}


def source(module: str) -> Path:
    return PACKAGE_DIR.parent.joinpath(*module.split(".")).with_suffix(".py")


def extension(module: str) -> Path | None:
    """The module's built extension beside its source, if any."""
    base = source(module).with_suffix("")
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        candidate = base.with_name(base.name + suffix)
        if candidate.exists():
            return candidate
    return None


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class PureFinder(importlib.abc.MetaPathFinder):
    """Loads the compiled modules from their ``.py`` although an extension lies beside it."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MODULES:
            return None
        return importlib.util.spec_from_file_location(fullname, source(fullname))


def why_not_compiled() -> str | None:
    """None when every module's extension is there and built from its current source."""
    built = [m for m in MODULES if extension(m) is not None]
    if not built:
        return "not built (make install builds it where a C compiler is present)"
    if len(built) < len(MODULES) or not MANIFEST.exists():
        return "partial build (python -m inferd.hotpath_build to rebuild)"
    try:
        hashes = json.loads(MANIFEST.read_text())["sources"]
    except (OSError, ValueError, KeyError):
        return f"unreadable {MANIFEST.name} (python -m inferd.hotpath_build to rebuild)"
    changed = [m for m in MODULES if hashes.get(m) != digest(source(m))]
    if changed:
        return f"stale build: {', '.join(changed)} changed since (python -m inferd.hotpath_build)"
    return None


def select() -> None:
    """Choose the path once per process, before any of ``MODULES`` is imported."""
    if _state["why"] != "not selected yet":
        return
    if os.environ.get(ENV, "0") not in ("", "0"):
        why: str | None = f"{ENV}={os.environ[ENV]}"
    else:
        why = why_not_compiled()
    if why is None:
        _state.update(path="compiled", why=f"mypyc, {len(MODULES)} modules")
        return
    _state.update(path="pure", why=why)
    if not any(isinstance(f, PureFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, PureFinder())


def compiled() -> bool:
    return _state["path"] == "compiled"


def describe() -> str:
    return f"{_state['path']} ({_state['why']})"


select()  # on import: inferd/__init__.py imports this module before anything else of the package
