"""Backend name -> implementation, imported lazily; third-party backends come through entry points."""

from __future__ import annotations

import importlib

from inferd.backends.base import Backend
from inferd.errors import InvalidArgumentError

#: built-in backends: name -> "module:factory"
_BUILTIN: dict[str, str] = {
    "python": "inferd.backends.python.backend:PythonBackend",
    "onnxruntime": "inferd.backends.onnxruntime.backend:OnnxRuntimeBackend",
    "pytorch": "inferd.backends.pytorch.backend:PyTorchBackend",
    "openvino": "inferd.backends.openvino.backend:OpenVinoBackend",
    "tensorflow": "inferd.backends.tensorflow.backend:TensorFlowBackend",
    "fil": "inferd.backends.fil.backend:FilBackend",
}
_ENTRY_POINT_GROUP = "inferd.backends"
_cache: dict[str, Backend] = {}


def get_backend(name: str) -> Backend:
    """The backend called ``name``, created on first use."""
    cached = _cache.get(name)
    if cached is not None:
        return cached
    target = _BUILTIN.get(name)
    installed: list[str] = []
    if target is None:
        from importlib.metadata import entry_points  # only for third-party backends: 90 ms at start

        for ep in entry_points(group=_ENTRY_POINT_GROUP):
            installed.append(ep.name)
            if ep.name == name:
                target = ep.value
                break
    if target is None:
        names = ", ".join(sorted(_BUILTIN))
        more = f"; installed through the '{_ENTRY_POINT_GROUP}' entry point: {', '.join(sorted(installed))}"
        raise InvalidArgumentError(
            f"unable to find backend '{name}': inferd's backends are {names}"
            + (more if installed else "")
            + f" (a third-party backend registers under the '{_ENTRY_POINT_GROUP}' entry point)"
        )
    module_name, _, attr = target.partition(":")
    factory = getattr(importlib.import_module(module_name), attr)
    backend: Backend = factory()
    _cache[name] = backend
    return backend
