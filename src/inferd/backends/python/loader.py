"""Loading a ``model.py``: its import as Triton's stub does it (its helper modules importing from its
own folders, own_imports.py; ``import model`` answering with the calling model's module), and a
model's errors as the stub prints them."""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import logging
import os
import sys
import traceback
import types
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from inferd.backends.python import own_imports, pb_utils
from inferd.backends.python.own_imports import loading as loading
from inferd.errors import InternalError, InvalidArgumentError

if TYPE_CHECKING:
    from inferd.repository.config.schema import ModelConfig

log = logging.getLogger("inferd.python")

#: what a model's code may raise out of execute and still get an answer to its clients (``sys.exit``
#: or ``unittest.main()`` in execute raise SystemExit; the reference answers it as an error)
MODEL_ERRORS = (Exception, SystemExit, KeyboardInterrupt)

#: inferd's own source folder: its frames never reach a client (the full traceback goes to the log)
_OWN_SOURCES = str(Path(__file__).resolve().parents[2]) + os.sep
#: a compiled module's frames (inferd/hotpath.py) name its source relative to the checkout it was built in
_OWN_COMPILED = os.path.join("src", "inferd", "")


def format_exception(e: BaseException, model_dir: Path | None = None, model_name: str = "") -> str:
    """``Type: message\\n\\nAt:\\n  file(line): function`` as Triton's stub prints a Python error; a
    file of the model's folder ``model_dir`` named from the repository's root (``m/1/model.py``: the
    server's paths are the log's business, not a client's)."""
    # the model's frames only: Triton's stub calls into model.py from C++, and the server's own
    # files are nobody's business but the log's
    log.debug("a Python model raised", exc_info=e)
    frames = [
        f
        for f in traceback.extract_tb(e.__traceback__)
        if not f.filename.startswith((_OWN_SOURCES, _OWN_COMPILED))
    ]
    folder = str(model_dir) + os.sep if model_dir is not None else None

    def shown(filename: str) -> str:
        if folder is not None and filename.startswith(folder):
            return f"{model_name}{os.sep}{filename[len(folder) :]}"
        return filename

    at = "".join(f"  {shown(f.filename)}({f.lineno}): {f.name}\n" for f in reversed(frames))
    return f"{type(e).__name__}: {str(e) or '<EMPTY MESSAGE>'}\n\nAt:\n{at}"


def model_file(config: ModelConfig, version_dir: Path) -> Path:
    return version_dir / (config.default_model_filename or "model.py")


# -- ``import model`` ------------------------------------------------------------------------------
class _ModelModule(types.ModuleType):
    """What ``import model`` gives a model's code: that model's own module.

    Triton runs each model in a process of its own, where ``model.py`` (on ``sys.path``) imports as
    ``model``; models rely on it, e.g. ``unittest.main("model")``. Here every model shares the
    process, so ``model`` resolves to the module of the model the calling thread runs for.
    """

    def _target(self) -> ModuleType | None:
        return getattr(loading, "module", None) or pb_utils._hooks().module()  # type: ignore[no-any-return]

    def __getattr__(self, name: str) -> Any:
        mod = self._target()
        if mod is None:  # no model runs in this thread (hasattr() and friends look too)
            raise AttributeError(f"module 'model' has no attribute '{name}' outside a model")
        return getattr(mod, name)

    def __dir__(self) -> list[str]:
        mod = self._target()
        return dir(mod) if mod is not None else []


def _install_model_alias(model_folders: set[str]) -> None:
    """Register ``model`` as ``_ModelModule`` unless something real already answers to that name."""
    if "model" in sys.modules:
        return
    paths = [p for p in sys.path if p not in model_folders]
    if importlib.machinery.PathFinder.find_spec("model", paths) is None:
        sys.modules["model"] = _ModelModule("model")


_model_folders: set[str] = set()


def import_model(path: Path, module_name: str, folders: list[str] | None = None) -> ModuleType:
    """Import the model file ``path`` as ``module_name``; ``release`` forgets it and its own modules.
    ``folders``: where its own modules are (default: the version folder and the model's folder)."""
    if not path.is_file():
        raise InvalidArgumentError(f"unable to find '{path}': the Python model file is missing")
    held = sys.modules.get(module_name)
    if held is not None and getattr(held, "__file__", None) != str(path):
        # another folder's model of this name and version (--model-namespacing: one per repository):
        # each keeps a module of its own
        module_name += "_" + hashlib.blake2b(str(path).encode(), digest_size=4).hexdigest()
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise InvalidArgumentError(f"unable to load '{path}' as a Python module")
    module = importlib.util.module_from_spec(spec)
    if folders is None:  # the version folder, then the model's folder, as the reference's stub appends them
        folders = [str(path.parent), str(path.parent.parent)]
    _model_folders.update(folders)
    _install_model_alias(_model_folders)
    for folder in folders:
        if folder not in sys.path:
            sys.path.append(folder)  # for what imports past own_imports (a process the model spawns)
    own_imports.register(module, folders, path.stem)
    loading.module = module
    # importable by name, as a module should be: pickle finds the model's functions through it
    # (multiprocessing.Pool in a model, qa/L0_backend_python bls)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except MODEL_ERRORS as e:
        release(module)
        raise InternalError(f"Failed to load model file '{path}': {format_exception(e)}") from e
    finally:
        loading.module = None
    if not hasattr(module, "TritonPythonModel"):
        release(module)
        raise InvalidArgumentError(f"'{path}' does not define class TritonPythonModel")
    return module


def release(module: ModuleType) -> None:
    """Forget a model's module and its own modules (it unloaded, or failed to load)."""
    if sys.modules.get(module.__name__) is module:
        del sys.modules[module.__name__]
    own_imports.release(module)
