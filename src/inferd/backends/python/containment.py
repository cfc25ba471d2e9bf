"""``execution_mode``: the mode a model asks for (``execution_mode``), and for ``auto`` whether a
model's own code can end the process it runs in.

A Python model in a thread instance shares the server's process: a segfault in native code it calls,
or an ``os._exit``, ends the server and every other model with it. A worker process contains that
(``process.py``: the requests it held fail, it restarts), at about twice the CPU per request of a
thread for a small model (add_sub, HTTP, concurrency 8, this 2-core machine: 157-169 against
77-84 us). So ``auto`` pays it only where the model's own code can crash: it calls into native code
itself (``ctypes``, ``cffi``, an extension module in its own folder) or ends its process on purpose
(``os._exit``, ``os.abort``); and a model that raises the recursion limit, which the server's process
keeps at Python's default (recursion.py), gets it in a worker. Packages a model imports (numpy, torch, tokenizers ...) are not counted:
their native code is what many users run every day, and moving every model that imports one would
cost each of them its thread path.

The check reads the model's source files (``model.py`` and the Python files beside it) with ``ast``;
nothing is imported, so a model that crashes while it is imported crashes in its worker, not here.
"""

from __future__ import annotations

import ast
import importlib.machinery
import logging
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from inferd.backends.process import IN_WORKER
from inferd.backends.python.recursion import CAP as RECURSION_CAP
from inferd.errors import InvalidArgumentError

if TYPE_CHECKING:
    from inferd.backends.base import LoadContext

log = logging.getLogger("inferd.python")

#: top-level modules that call into arbitrary native code: a wrong pointer or signature segfaults
_FOREIGN = {"ctypes": "ctypes", "_ctypes": "ctypes", "cffi": "cffi"}
#: functions of ``os`` (and ``posix``) that end the process at once, with no exception to catch
_EXITS = frozenset({"_exit", "abort"})
_OS = frozenset({"os", "posix"})
#: how many Python files of a model's folder are read at most, and how many entries looked at (a
#: vendored package or a data folder is not the model's code)
_MAX_FILES = 200
_MAX_ENTRIES = 5000
#: one ``ast.parse`` at a time in this process: CPython 3.11's AST constructor keeps its recursion depth
#: in interpreter state, and models loading in parallel threads raced on it ("SystemError: AST
#: constructor recursion depth mismatch", python/cpython#106905): the model failed its load
_PARSE = threading.Lock()


def runs_in_workers(model_name: str, model_file: Path, memory_limited: bool) -> bool:
    """``auto``'s choice at load: True (logged with why) when the model's instances start in worker
    processes: its code can crash the process (``crash_risks``), or it has a memory limit, which
    holds for a worker process only (memory.py)."""
    reasons = []
    risks = crash_risks(model_file)
    if risks:
        reasons.append(", ".join(risks) + ": in a thread, a crash there would end the server")
    if memory_limited:
        reasons.append("its memory_limit_bytes holds there only")
    if reasons:
        log.info(
            "model '%s' (execution_mode auto) runs in worker processes: %s (execution_mode thread keeps "
            "it in threads)",
            model_name,
            "; ".join(reasons),
        )
    return bool(reasons)


def crash_risks(model_file: Path) -> list[str]:
    """Why the model of ``model_file`` could end the process it runs in, one phrase per reason
    (empty: nothing says so). Looks at ``model_file`` and the Python and extension files of its
    folder."""
    reasons: list[str] = []
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    files = [model_file] if model_file.is_file() else []
    for path in _folder_files(model_file.parent):
        if path.name.endswith(suffixes):
            reason = f"its folder holds the extension module {path.name}"
            if not any(r.startswith("its folder holds") for r in reasons):
                reasons.append(reason)
        elif path.suffix == ".py" and path != model_file and len(files) < _MAX_FILES:
            files.append(path)
    for path in files:
        for reason in _source_risks(path):
            if reason not in reasons:
                reasons.append(reason)
    return reasons


def _folder_files(folder: Path) -> list[Path]:
    """The files under ``folder`` (not __pycache__), at most ``_MAX_ENTRIES`` looked at."""
    out: list[Path] = []
    seen = 0
    for root, dirs, names in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(names):
            out.append(Path(root) / name)
        seen += len(names) + len(dirs)
        if seen > _MAX_ENTRIES:
            break
    return out


def _source_risks(path: Path) -> list[str]:
    try:
        source = path.read_bytes()
        with _PARSE:
            tree = ast.parse(source, str(path))
    except (OSError, SyntaxError, ValueError):
        return []  # the load reports what is wrong with it
    scan = _Scan()
    scan.visit(tree)
    return scan.found


def _called(node: ast.Call) -> str:
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _forks(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Call) and _called(n) in ("fork", "forkpty") for n in ast.walk(node))


class _Scan(ast.NodeVisitor):
    """The risks of one source file. ``os._exit`` in a function that also forks is how the forked
    child ends (``multiprocessing`` does the same), not a crash of the model's process."""

    def __init__(self) -> None:
        self.found: list[str] = []
        self._forking = [False]

    def _note(self, reason: str) -> None:
        if reason not in self.found:
            self.found.append(reason)

    def _imports(self, name: str) -> None:
        foreign = _FOREIGN.get(name.partition(".")[0])
        if foreign is not None:
            self._note(f"it imports {foreign}")

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self._forking.append(self._forking[-1] or _forks(node))
        self.generic_visit(node)
        self._forking.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            self._imports(a.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level == 0 and node.module:
            self._imports(node.module)
            if node.module in _OS and any(a.name in _EXITS for a in node.names) and not self._forking[-1]:
                self._note("it calls os._exit or os.abort")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        value = node.value
        if node.attr in _EXITS and isinstance(value, ast.Name) and value.id in _OS and not self._forking[-1]:
            self._note(f"it calls os.{node.attr}")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        first = node.args[0].value if node.args and isinstance(node.args[0], ast.Constant) else None
        called = _called(node)
        if called in ("__import__", "import_module") and isinstance(first, str):
            self._imports(first)
        elif called == "setrecursionlimit" and not (isinstance(first, int) and first <= RECURSION_CAP):
            self._note("it raises the recursion limit, which holds in a worker process only (recursion.py)")
        self.generic_visit(node)


# -- the mode asked for -------------------------------------------------------------------------
EXECUTION_MODES = ("auto", "thread", "process")


def execution_mode(ctx: LoadContext) -> str:
    """The model's ``execution_mode`` parameter, else ``--backend-config=python,execution-mode=...``."""
    if ctx.backend_config.get(IN_WORKER):
        return "thread"
    param = ctx.config.parameters.get("execution_mode")
    mode = param.string_value if param is not None else ctx.backend_config.get("execution-mode", "auto")
    if mode not in EXECUTION_MODES:
        raise InvalidArgumentError(
            f"execution_mode of model '{ctx.model_name}' must be one of {', '.join(EXECUTION_MODES)}, "
            f"got '{mode}'"
        )
    return mode
