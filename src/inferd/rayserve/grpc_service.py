"""GRPCInferenceService for Serve's gRPC proxy: the generated registration, without message types.

Serve's proxy pickles each request message on its way to a replica; tritonclient's generated
messages cannot be pickled (their classes name a module, ``grpc_service_pb2``, that does not
import). Registered here with no (de)serializers, the proxy carries each request as its encoded
bytes, which is what the replica's ``InferenceServicer`` reads anyway: nothing is decoded twice.
``deploy.py`` names this function in Serve's ``grpc_servicer_functions``.
"""

from __future__ import annotations

from typing import Any

import grpc

from inferd.frontends.grpc.service import SERVICE, UNARY_RPCS


def add_GRPCInferenceServiceServicer_to_server(servicer: Any, server: Any) -> None:
    """Register every RPC of Triton's service on ``server`` (the proxy routes each to a replica's
    method of the same name)."""
    handlers: dict[str, grpc.RpcMethodHandler] = {
        rpc: grpc.unary_unary_rpc_method_handler(getattr(servicer, rpc)) for rpc in UNARY_RPCS
    }
    handlers["ModelStreamInfer"] = grpc.stream_stream_rpc_method_handler(servicer.ModelStreamInfer)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
