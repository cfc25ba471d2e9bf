"""Backend name -> implementation, imported lazily; third-party backends come through entry points;
any other name is a Triton C/C++ backend (``backends/tritonc``) or a Python-based backend
(``backends/python/based.py``), which of the two found per model."""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING

from inferd.backends.base import Backend
from inferd.backends.builtin import BUILTIN as _BUILTIN
from inferd.backends.builtin import NAMED as _NAMED
from inferd.errors import InvalidArgumentError

if TYPE_CHECKING:
    from inferd.repository.config.schema import ModelConfig

_ENTRY_POINT_GROUP = "inferd.backends"
log = logging.getLogger("inferd.backends")
_cache: dict[str, Backend] = {}


def get_backend(name: str) -> Backend:
    """The backend called ``name``, created on first use."""
    cached = _cache.get(name)
    if cached is not None:
        return cached
    target = _BUILTIN.get(name)
    if target is None:
        from importlib.metadata import entry_points  # only for third-party backends: 90 ms at start

        for ep in entry_points(group=_ENTRY_POINT_GROUP):
            if ep.name == name:
                target = ep.value
                break
    backend: Backend
    if target is None:
        # any other name may be a Triton C/C++ backend (libtriton_<name>.so) or a Python-based one
        # (<backend directory>/<name>/model.py): each model finds which, or fails its load saying
        # where it looked (a name with a path in it finds nothing: tritonc/search.py)
        module_name, _, attr = _NAMED.partition(":")
        backend = getattr(importlib.import_module(module_name), attr)(name)
    else:
        module_name, _, attr = target.partition(":")
        factory = getattr(importlib.import_module(module_name), attr)
        backend = factory()
    _cache[name] = backend
    return backend


def backend_for(config: ModelConfig) -> Backend:
    """The backend of a model's config. A ``runtime`` naming a shared library asks for that Triton
    C/C++ library whatever ``backend`` says (``backend: "python" runtime: "libtriton_python.so"``: the
    reference's own Python backend, not inferd's); otherwise ``get_backend(config.backend)``."""
    runtime = str(getattr(config, "runtime", "") or "")
    name = str(config.backend)
    if name in _BUILTIN and runtime.endswith(".so"):
        key = f"{name}@{runtime}"
        cached = _cache.get(key)
        if cached is None:
            from inferd.backends.tritonc.backend import TritonCBackend

            cached = _cache[key] = TritonCBackend(name)
        return cached
    return get_backend(name)


def runs_on_gpu(name: str) -> bool:
    """Whether backend ``name`` can place an instance on a GPU in this process: its optional
    ``gpu_available()`` (which may import its framework), True without one (the reference's rule for
    every backend) and for a backend that is not found (the config checks say why)."""
    try:
        backend = get_backend(name)
    except InvalidArgumentError:
        return True
    check = getattr(backend, "gpu_available", None)
    return True if check is None else bool(check())


def auto_gpu(cfg: ModelConfig, have_gpus: bool) -> bool:
    """Whether the ``KIND_AUTO`` groups of ``cfg`` (a config before normalisation) may become
    ``KIND_GPU``: the server has GPUs and the model's backend can run there (asked only then, as
    it may import the framework)."""
    if not have_gpus or cfg.platform == "ensemble":
        return False
    if runs_on_gpu(cfg.backend):
        return True
    if len(cfg.instance_group) == 0 or any(g.kind == g.KIND_AUTO for g in cfg.instance_group):
        log.info(
            "model '%s': KIND_AUTO is KIND_CPU: the %s backend cannot run on a GPU here",
            cfg.name,
            cfg.backend,
        )
    return False
