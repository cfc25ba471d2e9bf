"""``model_config_pb2`` from tritonclient, loaded without importing grpcio.

``import tritonclient.grpc.model_config_pb2`` runs ``tritonclient.grpc``'s package ``__init__``,
which imports grpcio and the gRPC client.  The module file is loaded on its own instead, under
its usual name (or taken from ``sys.modules`` when already there), so every importer shares one
module object: the protobuf descriptor pool accepts ``model_config.proto`` only once.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType
from typing import TYPE_CHECKING

__all__ = ["pb2"]

_MODNAME = "tritonclient.grpc.model_config_pb2"


def _load() -> ModuleType:
    mod = sys.modules.get(_MODNAME)
    if mod is not None:
        return mod
    spec = importlib.util.find_spec("tritonclient")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("tritonclient is not installed: pip install 'tritonclient[grpc]'")
    base = next(iter(spec.submodule_search_locations))
    fspec = importlib.util.spec_from_file_location(_MODNAME, f"{base}/grpc/model_config_pb2.py")
    if fspec is None or fspec.loader is None:
        raise ImportError(f"cannot load {_MODNAME} from {base}")
    mod = importlib.util.module_from_spec(fspec)
    sys.modules[_MODNAME] = mod
    try:
        fspec.loader.exec_module(mod)
    except BaseException:
        del sys.modules[_MODNAME]
        raise
    return mod


if TYPE_CHECKING:  # typings/tritonclient/grpc/model_config_pb2.pyi (scripts/proto_stubs.py)
    from tritonclient.grpc import model_config_pb2 as pb2
else:
    pb2 = _load()
