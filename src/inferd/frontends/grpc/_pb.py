"""``service_pb2`` from tritonclient, loaded without running ``tritonclient.grpc``'s ``__init__``.

``import tritonclient.grpc.service_pb2`` first runs the package ``__init__``, which imports the
whole gRPC client and ``tritonclient.utils`` (ml_dtypes): 100-300 ms at start for a server.
The generated module's one import of its package (``model_config_pb2``) is satisfied from the
module ``repository/_proto.py`` already loaded under its usual name, and the module is registered
under its usual name too, so a later ``import tritonclient.grpc`` in the same process (an
embedding program's client) shares it: the protobuf descriptor pool accepts a file only once.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from types import ModuleType
from typing import TYPE_CHECKING

from inferd.repository._proto import pb2 as _model_config_pb2

__all__ = ["pb"]

_MODNAME = "tritonclient.grpc.service_pb2"
_IMPORT = "from tritonclient.grpc import model_config_pb2 as model__config__pb2"


def _load() -> ModuleType:
    mod = sys.modules.get(_MODNAME)
    if mod is not None:
        return mod
    spec = importlib.util.find_spec("tritonclient")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("tritonclient is not installed: pip install 'tritonclient[grpc]'")
    path = f"{next(iter(spec.submodule_search_locations))}/grpc/service_pb2.py"
    with open(path, encoding="utf-8") as f:
        source = f.read()
    if source.count(_IMPORT) != 1:  # generated differently: take the ordinary (slower) way
        return importlib.import_module(_MODNAME)
    source = source.replace(_IMPORT, "model__config__pb2 = __inferd_model_config_pb2")
    mod = ModuleType(_MODNAME)
    mod.__file__ = path
    mod.__dict__["__inferd_model_config_pb2"] = _model_config_pb2
    sys.modules[_MODNAME] = mod
    try:
        exec(compile(source, path, "exec"), mod.__dict__)
    except BaseException:
        del sys.modules[_MODNAME]
        raise
    return mod


if TYPE_CHECKING:  # typings/tritonclient/grpc/service_pb2.pyi (scripts/proto_stubs.py)
    from tritonclient.grpc import service_pb2 as pb
else:
    pb = _load()
