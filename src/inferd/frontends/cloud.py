"""The SageMaker and Vertex AI front ends' start: their settings from the environment, the reference's
port rules, and their servers (the HTTP front end's ``HttpServer``, one per port).

What the environment decides, as tritonserver 2.51 reads it (``command_line_parser.cc``):
``AIP_MODE=PREDICTION`` turns Vertex AI on and HTTP and gRPC off unless flags say otherwise;
``AIP_HTTP_PORT`` is ``--vertex-ai-port``'s default; ``AIP_STORAGE_URI`` is the repository when no
``--model-repository`` is given (a ``gs://`` URL through inferd's GCS repository). The ports of every
API must differ (on one address), and with ``--sagemaker-safe-port-range`` the others must lie in it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from inferd.errors import InferdError
from inferd.frontends.access import AccessPolicy
from inferd.frontends.http.server import HttpServer
from inferd.frontends.starting import FrontendError, http_limits

if TYPE_CHECKING:
    from inferd.options import ServerOptions
    from inferd.runtime import Runtime

__all__ = [
    "CLOUD_ADDRESS",
    "CloudServers",
    "env_defaults",
    "port_conflict",
    "safe_port_range",
    "start_cloud_frontends",
]

log = logging.getLogger("inferd")

#: the address both listen on (the reference has no flag for it)
CLOUD_ADDRESS = "0.0.0.0"


def env_defaults(environ: Mapping[str, str] = os.environ) -> dict[str, Any]:
    """``inferd serve``'s defaults that the environment changes (ValueError: AIP_HTTP_PORT is no
    number, with the reference's words)."""
    out: dict[str, Any] = {}
    if environ.get("AIP_MODE", "") == "PREDICTION":
        out.update(allow_vertex_ai=True, allow_http=False, allow_grpc=False)
    port = environ.get("AIP_HTTP_PORT", "8080")
    try:
        out["vertex_ai_port"] = int(port)
    except ValueError:
        raise ValueError(f"Invalid option value. Got {port}") from None
    return out


def safe_port_range(text: str) -> tuple[int, int]:
    """``--sagemaker-safe-port-range``: ``<first>-<second>`` (ValueError with the reference's text)."""
    parts = text.split("-")
    if len(parts) != 2:
        raise ValueError(
            "Cannot parse pair option due to incorrect number of inputs.--<pair option> argument requires "
            f"format <first>-<second>. Found: {text}"
        )
    try:
        return int(parts[0]), int(parts[1])
    except ValueError:
        bad = parts[0] if not parts[0].strip().lstrip("+-").isdigit() else parts[1]
        raise ValueError(f"Invalid option value. Got {bad}") from None


def port_conflict(options: ServerOptions) -> str | None:
    """The reference's ``CheckPortCollision``: why the APIs asked for cannot listen as asked, or None.
    Port 0 (any free port, inferd's) is never a conflict."""
    safe = safe_port_range(options.sagemaker_safe_port_range) if options.sagemaker_safe_port_range else None
    services: list[tuple[str, str, int, tuple[int, int] | None]] = []
    if options.allow_http:
        services.append(("HTTP", options.http_address, options.http_port, None))
    if options.allow_grpc:
        services.append(("GRPC", options.grpc_address, options.grpc_port, None))
    if options.allow_metrics:
        services.append(
            ("metrics", options.metrics_address or options.http_address, options.metrics_port, None)
        )
    if options.allow_sagemaker:
        services.append(("SageMaker", CLOUD_ADDRESS, options.sagemaker_port, safe))
    if options.allow_vertex_ai:
        services.append(("Vertex AI", CLOUD_ADDRESS, options.vertex_ai_port, None))
    for i, (name, address, port, allowed) in enumerate(services):
        # a service with a range is compared with every other; the rest with those after them
        for j, (other, other_address, other_port, _) in enumerate(services):
            if j == i or (allowed is None and j < i) or address != other_address:
                continue
            if allowed is not None and not allowed[0] <= other_port <= allowed[1]:
                return (
                    f"The server cannot listen to {other} requests at port {other_port}, allowed port range "
                    f"is [{allowed[0]}, {allowed[1]}]"
                )
            if port == other_port and port != 0:
                return (
                    f"The server cannot listen to {name} requests and {other} requests at the same address "
                    f"and port {address}:{port}"
                )
    return None


class CloudServers:
    """The SageMaker and Vertex AI ports of one server, stopped as the HTTP port is (runtime.py)."""

    def __init__(self) -> None:
        #: "sagemaker" / "vertex" -> its server
        self.servers: dict[str, HttpServer] = {}

    def stop_listening(self) -> None:
        for s in self.servers.values():
            s.stop_listening()

    def wind_down(self, idle_grace_s: float) -> int:
        return sum(s.wind_down(idle_grace_s) for s in self.servers.values())

    async def stop(self) -> None:
        for s in self.servers.values():
            await s.stop()


async def _serve(runtime: Runtime, app: Any, what: str, port: int) -> HttpServer:
    reuse = runtime.place is not None
    server = HttpServer(app, CLOUD_ADDRESS, port, http_limits(runtime.options), reuse_port=reuse)
    try:
        await server.start()
    except OSError as e:
        raise FrontendError(f"failed to start {what} service at {CLOUD_ADDRESS}:{port}: {e}") from e
    return server


async def start_cloud_frontends(runtime: Runtime, environ: Mapping[str, str] = os.environ) -> CloudServers:
    """The SageMaker and Vertex AI servers the options ask for (FrontendError when one cannot
    start: its settings, its default model, its port; what started is in the result)."""
    from inferd.metrics.collector import render

    options, core = runtime.options, runtime.front_core
    out = CloudServers()
    # the reference builds these servers without --http-restricted-api; API keys hold for them too
    access = AccessPolicy({}, runtime.http_access.keys, runtime.http_access.exempt)
    if options.allow_sagemaker:
        from inferd.frontends.sagemaker import SageMakerApp, SageMakerSettings
        from inferd.frontends.sagemaker_mme import MultiModels

        try:
            settings = SageMakerSettings(environ)
        except InferdError as e:
            raise FrontendError(f"failed to start Sagemaker service: Invalid argument - {e.message}") from e
        app = runtime.http_app(access=access)
        sagemaker = SageMakerApp(
            core, app, MultiModels(core, app, options.sagemaker_models_root), settings, access
        )
        out.servers["sagemaker"] = await _serve(runtime, sagemaker, "Sagemaker", options.sagemaker_port)
        log.info("Started Sagemaker HTTPService at %s:%d", CLOUD_ADDRESS, out.servers["sagemaker"].port)
    if options.allow_vertex_ai:
        from inferd.frontends.vertex import VertexApp, VertexRoutes, default_model

        try:
            routes = VertexRoutes.from_env(environ)
            model = default_model(core, options.vertex_ai_default_model)
        except InferdError as e:
            await out.stop()
            raise FrontendError(f"failed to start Vertex AI service: Invalid argument - {e.message}") from e
        gather: Callable[[], Awaitable[bytes]] | None = getattr(core, "gather_metrics", None)
        if gather is None:

            async def gather() -> bytes:  # this process's (one process: the whole server)
                return render(runtime.core)

        vertex = VertexApp(runtime.http_app(access=access), routes, model, gather, access)
        try:
            out.servers["vertex"] = await _serve(runtime, vertex, "Vertex AI", options.vertex_ai_port)
        except FrontendError:
            await out.stop()
            raise
        log.info("Started Vertex AI HTTPService at %s:%d", CLOUD_ADDRESS, out.servers["vertex"].port)
    return out
