"""Python-based backends: ``backend: "<name>"`` served by ``<backend directory>/<name>/model.py``.

Triton 2.51's rule (core's ``TritonModel::GetBackendLibraryProperties``, ``tritonc/search.py``): a
backend that is no library in the model's version folder, model folder or ``<backend directory>/<name>/``
but has a ``model.py`` in that last folder is Python-based, as is any ``runtime: "model.py"``; the
model's config then says ``runtime: "model.py"``. One ``model.py`` serves every model that names the
backend (the layout of Triton's vLLM backend): its ``initialize`` gets each model's own ``args``
(``model_repository`` the model's folder, ``model_version``...), from which it reads the model's files
(``model.json``, weights); a ``model.py`` in the model's own folders is not looked at. The backend's
folder is where its ``model.py`` imports its own modules from (the reference's stub puts it on
``sys.path``), each model its own copy (own_imports.py).

Everything else is the Python backend's: instances in threads or worker processes
(``execution_mode``; a worker finds the file the same way, the server's ``--backend-directory``
handed to it), ``auto_complete_config``, errors in the stub's words (a frame of the backend's file
named by its full path, as the reference names it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from inferd.backends.base import BackendModel, LoadContext
from inferd.backends.python.backend import PythonBackend
from inferd.backends.tritonc import search
from inferd.backends.tritonc.backend import TritonCBackend
from inferd.errors import InferdError


class NamedBackend(TritonCBackend):
    """A backend inferd does not ship: per model, a Triton C/C++ library (``TritonCBackend``) or a
    Python-based backend (``PythonBackend(based=name)``), as ``search.python_based`` finds."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.python = PythonBackend(based=name)

    def _python_based(self, config: Any, model_dir: Path, version_dir: Path | None) -> bool:
        if search.python_based(config, model_dir, version_dir) is None:
            return False
        config.runtime = search.PYTHON_BASED_RUNTIME  # the reference's config says so
        return True

    def find_library(self, config: Any, model_dir: Path, version_dir: Path | None) -> Path:
        """The model's library or ``model.py`` (what ``inferd check`` asks: nothing runs)."""
        path = search.python_based(config, model_dir, version_dir)
        return path if path is not None else super().find_library(config, model_dir, version_dir)

    def auto_complete(
        self, config: Any, model_dir: Path, version_dir: Path | None, *, default_max_batch_size: int = 4
    ) -> None:
        try:
            based = self._python_based(config, model_dir, version_dir)
        except InferdError:
            if not config.input and not config.output:  # nothing else would say why
                raise
            return  # the load fails saying why, as the reference's
        if based:
            self.python.auto_complete(
                config, model_dir, version_dir, default_max_batch_size=default_max_batch_size
            )
        else:
            super().auto_complete(
                config, model_dir, version_dir, default_max_batch_size=default_max_batch_size
            )

    def load(self, ctx: LoadContext) -> Any:
        if self._python_based(ctx.config, ctx.model_dir, ctx.version_dir):
            model: BackendModel = self.python.load(ctx)
            return model
        return super().load(ctx)
