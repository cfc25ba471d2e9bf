"""A model's own modules: ``import utils`` in a model's code imports the ``utils`` of its own folder.

Triton runs each model in a stub process of its own, whose ``sys.path`` ends with the model's
version folder and its model folder (the stub's model_context.cc appends both), so a model imports
the helpers beside its ``model.py`` by their plain names (Triton's vLLM backend: ``utils/``). Thread
instances share one interpreter here, where one ``sys.modules["utils"]`` would be the first model's
for every model. So each loaded model gets a package of its own, ``_inferd_own<N>``, whose path is
those two folders, and an import of a top-level name by the model's code that resolves to its
folders imports ``<package>.<name>`` instead: each model its own copy, loaded by the standard
machinery (relative imports and submodules work, a reload of the model imports them afresh).

A name the rest of ``sys.path`` provides (the standard library, site-packages) stays that module,
as on the reference, where those entries come first. ``model`` (the model file's own name) keeps
its alias (loader.py).

Which model imports: the importing module's, by its ``__name__`` (the model's module or one of its
own modules); for another module's import of a name not imported yet, the model whose instance the
thread acts for (pb_context.py) or that is being loaded (``loading``). What this covers: import
statements (``builtins.__import__``: ``import utils``, ``from utils import x``, ``from utils.sub
import y``, in ``execute`` and in the model's own threads too), ``importlib.import_module``, and
pickling (a class of ``<package>.utils`` pickles under that name, which this process and its forks
import). Not covered: ``importlib.util.find_spec``, a process started with ``spawn`` (it imports the
model's helpers from ``sys.path``, where the models' folders stay appended for such uses).
The hooks are installed when the first model with modules of its own loads.
"""

from __future__ import annotations

import builtins
import importlib
import importlib.machinery
import itertools
import os
import sys
import threading
import types
import weakref
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from inferd.backends.python import pb_context

#: the module a thread is importing or initializing (loader.py and backend.py set it)
loading = threading.local()

_lock = threading.Lock()
_count = itertools.count(1)
#: module name (a model's module, a model's package) -> its model's own modules
_registry: dict[str, OwnModules] = {}
#: the folders of every model loaded since the start, ``os.sep``-terminated: what "the rest of
#: sys.path" leaves out (they stay on sys.path, appended, after their model unloads); a frozenset
#: replaced whole under ``_lock``: every import reads it without the lock, while another model's load
#: adds to it ("Set changed size during iteration" failed a model's `import json` at start)
_folders: frozenset[str] = frozenset()
#: a model's module -> its own modules (released with it)
_of_module: weakref.WeakKeyDictionary[types.ModuleType, OwnModules] = weakref.WeakKeyDictionary()
_original_import = builtins.__import__
_original_import_module = importlib.import_module


class OwnModules:
    """One loaded model's modules: the package ``name`` over its ``folders``."""

    __slots__ = ("_owns", "folders", "name", "stem")

    def __init__(self, folders: Sequence[str], stem: str) -> None:
        self.name = f"_inferd_own{next(_count)}"
        self.folders = list(folders)
        self.stem = stem
        #: top-level name -> whether it is this model's (asked once per name)
        self._owns: dict[str, bool] = {}
        package = types.ModuleType(self.name, "The Python modules of one model's folders (own_imports.py).")
        spec = importlib.machinery.ModuleSpec(self.name, None, is_package=True)
        spec.submodule_search_locations = list(folders)
        package.__spec__ = spec
        package.__path__ = list(folders)
        sys.modules[self.name] = package

    def owns(self, top: str) -> bool:
        own = self._owns.get(top)
        if own is None:
            own = top != self.stem and not _found_elsewhere(top) and _find(top, self.folders)
            self._owns[top] = own
        return own

    def load(self, name: str, fromlist: Sequence[str] | None) -> Any:
        """``import name`` (``from name import fromlist``) of this model's module ``name``."""
        try:
            module = _original_import(f"{self.name}.{name}", None, None, fromlist or (), 0)
        except ImportError as e:
            raise self.unprefixed(e) from None
        if fromlist:
            return module
        return sys.modules[f"{self.name}.{name.partition('.')[0]}"]

    def import_module(self, name: str) -> types.ModuleType:
        try:
            return _original_import_module(f"{self.name}.{name}")
        except ImportError as e:
            raise self.unprefixed(e) from None

    def unprefixed(self, e: ImportError) -> ImportError:
        """``e`` naming the modules as the model does (``No module named 'utils.nope'``)."""
        prefix = self.name + "."
        if e.msg and prefix in e.msg:
            e.msg = e.msg.replace(prefix, "")
            e.args = (e.msg, *e.args[1:])
        if e.name and e.name.startswith(prefix):
            e.name = e.name[len(prefix) :]
        return e


def _find(top: str, folders: list[str]) -> bool:
    return importlib.machinery.PathFinder.find_spec(top, folders) is not None


def _in_model_folder(path: str | None) -> bool:
    return path is not None and any(path.startswith(f) for f in _folders)


def _found_elsewhere(top: str) -> bool:
    """Whether ``top`` is imported, or importable, from somewhere else than a model's folder."""
    module = sys.modules.get(top)
    if module is not None:
        return not _in_model_folder(getattr(module, "__file__", None))
    rest = [p for p in sys.path if os.path.join(p, "") not in _folders]
    for finder in sys.meta_path:
        try:
            if finder is importlib.machinery.PathFinder:
                spec = importlib.machinery.PathFinder.find_spec(top, rest)
            else:
                find_spec = getattr(finder, "find_spec", None)
                spec = find_spec(top, None) if find_spec is not None else None
        except (ImportError, ValueError, AttributeError):
            continue  # a finder that cannot say: the rest may
        if spec is not None:
            locations: Iterable[str] = spec.submodule_search_locations or ()
            if not _in_model_folder(spec.origin) and not any(_in_model_folder(p) for p in locations):
                return True
    return False


def _acting() -> OwnModules | None:
    """The modules of the model the thread works for (loading it, or acting for its instance)."""
    module = getattr(loading, "module", None)
    if module is None:
        hooks = pb_context._acting_for()
        module = hooks.module() if hooks is not None else None
    return None if module is None else _registry.get(module.__name__)


def _owner(importer: Mapping[str, Any] | None, top: str) -> OwnModules | None:
    """Whose modules an import of ``top`` by the module of globals ``importer`` looks in."""
    if importer is not None:
        name = importer.get("__name__")
        if isinstance(name, str):
            own = _registry.get(name) or _registry.get(name.partition(".")[0])
            if own is not None:
                return own
    if top in sys.modules:
        return None  # another module's import of what is imported already: the fast way
    return _acting()


def _import(
    name: str,
    globals: Mapping[str, Any] | None = None,
    locals: Mapping[str, Any] | None = None,
    fromlist: Sequence[str] | None = (),
    level: int = 0,
) -> Any:
    """``builtins.__import__``: a model's own module, else as Python imports."""
    if level == 0 and name:
        top = name.partition(".")[0]
        own = _owner(globals, top)
        if own is not None and own.owns(top):
            return own.load(name, fromlist)
    return _original_import(name, globals, locals, fromlist or (), level)


def _import_module(name: str, package: str | None = None) -> types.ModuleType:
    """``importlib.import_module``: a model's own module (its caller's model), else as Python does."""
    if name and not name.startswith("."):
        own = _owner(sys._getframe(1).f_globals, name.partition(".")[0])
        if own is not None and own.owns(name.partition(".")[0]):
            return own.import_module(name)
    return _original_import_module(name, package)


def _has_modules(folders: Sequence[str], stem: str) -> bool:
    """Whether a model's folders hold a module other than its model file (most hold none)."""
    for folder in folders:
        try:
            entries = os.listdir(folder)
        except OSError:
            continue
        for entry in entries:
            base = entry.partition(".")[0]
            if base == stem or base == "__pycache__" or not base.isidentifier():
                continue
            if entry == base or any(entry.endswith(s) for s in importlib.machinery.all_suffixes()):
                return True
    return False


def _install() -> None:
    global _original_import, _original_import_module
    if builtins.__import__ is not _import:
        _original_import = builtins.__import__  # whatever imports now (another hook too) stays below
        builtins.__import__ = _import
    if importlib.import_module is not _import_module:
        _original_import_module = importlib.import_module
        importlib.import_module = _import_module


def register(module: types.ModuleType, folders: Sequence[str], stem: str) -> None:
    """A model's ``module``, about to load: its own modules are those of ``folders`` (in order)."""
    global _folders
    own = OwnModules(folders, stem)
    with _lock:
        _folders = _folders | {os.path.join(f, "") for f in folders}
        _registry[module.__name__] = own
        _registry[own.name] = own
        _of_module[module] = own
        if _has_modules(folders, stem):
            _install()


def release(module: types.ModuleType) -> None:
    """The model of ``module`` unloaded (or failed to load): forget its own modules (a new load
    imports them afresh)."""
    with _lock:
        own = _of_module.pop(module, None)
        if own is None:
            return
        for key in [k for k, v in _registry.items() if v is own]:
            del _registry[key]
        prefix = own.name + "."
        # list() copies the keys in one step: other threads import while a comprehension would iterate
        for key in [k for k in list(sys.modules) if k == own.name or k.startswith(prefix)]:
            sys.modules.pop(key, None)
