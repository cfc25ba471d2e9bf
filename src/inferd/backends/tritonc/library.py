"""The host library in this process: loaded once, and the backend libraries it opened.

``host()`` imports the ``_tritonc`` extension from the built host (``build.find``), which loads
``libtritonserver.so`` (soname ``libtritonserver.so``) beside it, and hands it inferd's classes and
callbacks: the backends' log lines go to the ``inferd.tritonc`` logger with their file and line,
``TRITONSERVER_ServerModelIsReady`` asks the server of the model that loaded last (one host per
process, as one core per tritonserver process), and a backend's requests to other models go to that
server too (``bls.py``).

``open_backend`` opens a backend library once per file (``TRITONBACKEND_Initialize`` then
``GetBackendAttribute``); one that fails to open or initialize fails the load that named it, and is
tried again by the next. Backends stay loaded for the life of the process (their
static state and threads may outlive their models). Before ``dlopen``, every ``libtritonserver*.so``
name the library needs (NVIDIA's wheels rename the core ``libtritonserver-<hash>.so``) is made an
alias of the host: a symlink beside the extension, opened once by that bare name, so the dynamic loader
finds the host already loaded by that name (and never loads another core).
"""

from __future__ import annotations

import ctypes
import importlib.machinery
import importlib.util
import json
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from inferd.backends.base import MetricRegistry, ServerLinks
from inferd.backends.tritonc import bls, build, search
from inferd.backends.tritonc.search import check_elf, needed
from inferd.core.response import InferResponse
from inferd.core.tensor import Tensor
from inferd.core.types import BY_TRITON_CODE
from inferd.errors import ErrorCode, InferdError, error_for_code

log = logging.getLogger("inferd.tritonc")

#: TRITONSERVER_LogLevel -> logging level (VERBOSE: inferd.logs' VERBOSE1, logging.DEBUG)
_LEVELS = (logging.INFO, logging.WARNING, logging.ERROR, logging.DEBUG)
_CODES = tuple(ErrorCode)  # TRITONSERVER_Error_Code order: UNKNOWN, INTERNAL, NOT_FOUND, ...

_lock = threading.Lock()
_host: ModuleType | None = None
_backends: dict[str, Any] = {}  # library path -> its _tritonc.Backend
_aliases: dict[str, Path] = {}  # an alias name -> its symlink
_global: list[ctypes.CDLL] = []  # the host library, opened in the global scope
_links: dict[str, Callable[[str, str], bool] | None] = {"model_ready": None}
#: the loading server's custom metric registry (its /metrics renders what backends put there)
_metrics: list[MetricRegistry | None] = [None]
#: who holds the backends' metric references in the registry (backends are not models: they stay)
METRICS_OWNER = "triton C/C++ backends"


def error_of(code: int, message: str) -> InferdError:
    """A TRITONSERVER_Error as inferd's error of the same code."""
    return error_for_code(_CODES[code] if 0 <= code < len(_CODES) else ErrorCode.UNKNOWN, message)


def translate(e: Exception, what: str = "") -> InferdError:
    """A ``_tritonc.Error`` (args: code, message) as an InferdError; ``what`` prefixes the message."""
    code, message = e.args if len(e.args) == 2 else (0, str(e))
    return error_of(int(code), f"{what}{message}")


def _log(level: int, file: str, line: int, message: str) -> None:
    py_level = _LEVELS[level] if 0 <= level < len(_LEVELS) else logging.INFO
    if log.isEnabledFor(py_level):
        log.handle(log.makeRecord(log.name, py_level, file, line, message, (), None))


def _model_ready(name: str, version: int) -> bool:
    ready = _links["model_ready"]
    return bool(ready is not None and ready(name, "" if version <= 0 else str(version)))


def _model_txn(name: str, version: int) -> int:
    # inferd's links do not say whether another model is decoupled: one-to-one, as most are
    return 1


def metrics_call(op: str, *args: Any) -> Any:
    """A backend's custom metric call (``TRITONSERVER_Metric*``) on the server's registry. ``family_new``
    answers whether the server keeps the family (False: no registry, the host keeps it itself)."""
    registry = _metrics[0]
    if op == "family_new":
        if registry is None:
            return False
        name, description, kind = args
        registry.family_new(METRICS_OWNER, name, description, kind)
        return True
    assert registry is not None  # the host calls the rest only for families the server keeps
    if op == "family_delete":
        return registry.family_delete(METRICS_OWNER, args[0])
    if op == "metric_new":
        family, labels, buckets = args
        return registry.metric_new(METRICS_OWNER, family, tuple(labels), buckets)
    if op == "metric_delete":
        return registry.metric_delete(METRICS_OWNER, args[0])
    metric, what, value = args
    return registry.metric_op(metric, what, value)


def log_levels() -> int:
    """The TRITONSERVER_LogLevels on now (a bit each), from the ``inferd.tritonc`` logger's level."""
    return sum(1 << i for i, level in enumerate(_LEVELS) if log.isEnabledFor(level))


def host() -> ModuleType:
    """The ``_tritonc`` extension, loaded and set up once; UnavailableError when it is not built."""
    global _host
    with _lock:
        if _host is not None:
            return _host
        folder = build.find()
        if folder is None:
            raise build.missing("C/C++")
        # the host first, into the global scope: a backend linked against libtritonserver.so finds it by
        # its soname, and one linked against nothing (its symbols left to the process) finds it there
        _global.append(ctypes.CDLL(str(folder / build.LIBRARY), mode=os.RTLD_NOW | os.RTLD_GLOBAL))
        path = folder / build.extension_name()
        loader = importlib.machinery.ExtensionFileLoader("_tritonc", str(path))
        spec = importlib.util.spec_from_file_location("_tritonc", path, loader=loader)
        assert spec is not None
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
        datatypes = tuple(BY_TRITON_CODE.get(code) for code in range(max(BY_TRITON_CODE) + 1))
        module.setup(
            tensor=Tensor,
            response=InferResponse,
            datatypes=datatypes,
            make_error=error_of,
            log=_log,
            model_ready=_model_ready,
            model_txn=_model_txn,
            bls_submit=bls.submit,
            bls_cancel=bls.cancel,
            metrics=metrics_call,
        )
        bls.attach(module.bls_respond)
        _host = module
        return module


def configure(backend_directory: str, links: ServerLinks) -> None:
    """A server starts: where it looks for backend libraries (``--backend-directory``) and what its
    backends call back into (readiness, BLS, custom metrics), before any library opens."""
    search.set_backend_directory(backend_directory)
    set_links(links)


def set_links(links: ServerLinks) -> None:
    """What the loading server offers its models: the readiness ``TRITONSERVER_ServerModelIsReady``
    answers with, the submission ``TRITONSERVER_ServerInferAsync`` goes through (BLS)."""
    if links.model_ready is not None:
        _links["model_ready"] = links.model_ready
    if links.metrics is not None:
        _metrics[0] = links.metrics
    bls.set_links(links.infer_async, links.model_ready)


def _answer_to(library: Path, host_dir: Path, module: ModuleType) -> None:
    """Make the host known by every ``libtritonserver*`` name ``library`` needs: a symlink of that
    name beside the extension (found by its RUNPATH, ``$ORIGIN``) opened by its bare name."""
    for name in needed(library):
        if not name.startswith("libtritonserver") or name == build.LIBRARY or name in _aliases:
            continue
        link = host_dir / name
        try:
            if not link.is_symlink():
                link.symlink_to(build.LIBRARY)
            module.alias(name)
        except OSError as e:
            raise error_of(
                2,
                f"backend library {library} needs {name}, which inferd's host could not answer to: {e} "
                f"(its folder {host_dir} must be writable once)",
            ) from None
        _aliases[name] = link
        log.info("backend library %s needs %s: answered by inferd's host", library.name, name)


def _open(module: ModuleType, name: str, library: Path, config: dict[str, Any]) -> Any:
    check_elf(library)
    host_dir = build.find()
    assert host_dir is not None
    _answer_to(library, host_dir, module)
    module.set_log_levels(log_levels())
    try:
        backend = module.open_backend(
            name, str(library.parent), str(library), json.dumps(config, separators=(",", ":"))
        )
        backend.initialize()
    except module.Error as e:
        raise translate(e) from None  # the reference's text: what the backend (or dlopen) said
    return backend


def open_backend(name: str, library: Path, config: dict[str, Any]) -> Any:
    """The backend in ``library`` (a ``_tritonc.Backend``), opened and initialized once per file.

    A library that fails to open or initialize is tried again at the next load that names it (the
    reference opens it again), with the same error if nothing changed."""
    module = host()
    key = str(library.resolve())
    with _lock:
        known = _backends.get(key)
        if known is not None:
            return known
        try:
            backend = _open(module, name, library, config)
        except InferdError as e:
            # the model's reason is the reference's text; the log names the backend and its library too
            log.error("backend '%s' (%s) did not load: %s", name, library, e.message)
            raise
        _backends[key] = backend
        log.info("loaded backend '%s' from %s", name, library)
        return backend
