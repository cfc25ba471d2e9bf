"""The Server facade: lifecycle, health, metadata, inference, statistics, repository index.

Frontends and the in-process API are its clients; request semantics live here, codecs there.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

from inferd import __version__
from inferd.core.classification import classify
from inferd.core.lifecycle import ModelState
from inferd.core.model import Model
from inferd.core.repository_manager import LoadedModels, check_mode_allows_load, load_repositories
from inferd.core.request import InferRequest
from inferd.core.response import InferResponse, ResponseStream
from inferd.core.validate import validate_request
from inferd.errors import (
    InferdError,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    UnavailableError,
)
from inferd.options import ServerOptions

log = logging.getLogger("inferd")

#: The Triton protocol version inferd answers as (clients compare it, not inferd's own version).
PROTOCOL_VERSION = "2.51.0"
#: Extensions that really work; the frontends add theirs.
EXTENSIONS = (
    "classification",
    "model_repository",
    "model_configuration",
    "system_shared_memory",
    "cuda_shared_memory",
    "binary_tensor_data",
    "parameters",
    "statistics",
)


class Server:
    """One inference server: models, their schedulers and statistics."""

    def __init__(self, options: ServerOptions) -> None:
        self.options = options
        self.registry = LoadedModels()
        self.loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._live = False
        self._stopping = False
        self.version = __version__

    # -- lifecycle -------------------------------------------------------------------------------
    async def start(self) -> None:
        """Load the repositories (control mode none: every model, now)."""
        self.loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._live = True
        await load_repositories(
            [p for p in self.options.model_repository],
            loop=self.loop,
            infer=self.infer,
            infer_blocking=self.infer_blocking,
            registry=self.registry,
            strict_model_config=self.options.strict_model_config,
            config_name=self.options.model_config_name,
            default_max_batch_size=self.options.default_max_batch_size,
            load_threads=self.options.model_load_thread_count,
        )

    async def stop(self, timeout_s: float | None = None) -> None:
        """Stop taking requests, finish in-flight ones (up to the exit timeout), unload."""
        if self._stopping:
            return
        self._stopping = True
        timeout = self.options.exit_timeout_secs if timeout_s is None else timeout_s
        models = [m for versions in self.registry.models.values() for m in versions.values()]
        # ensembles first: they feed the others
        models.sort(key=lambda m: 0 if m.platform == "ensemble" else 1)
        for m in models:
            if m.scheduler is not None:
                await m.scheduler.stop(timeout)
            m.state = ModelState.UNAVAILABLE
            m.reason = "unloaded"
        self.registry.refresh_defaults()
        self._live = False

    def inflight(self) -> int:
        return sum(
            m.scheduler.inflight()
            for versions in self.registry.models.values()
            for m in versions.values()
            if m.scheduler is not None
        )

    def load_failures(self) -> list[tuple[str, str, str]]:
        """(model, version, reason) of every model or version that failed to load."""
        out = [(name, "", reason) for name, reason in sorted(self.registry.failed.items())]
        for name, versions in sorted(self.registry.models.items()):
            for v, m in sorted(versions.items()):
                if m.state is ModelState.UNAVAILABLE and m.reason != "unloaded":
                    out.append((name, str(v), m.reason))
        return out

    def model_table(self) -> list[tuple[str, str, str]]:
        """(model, version, status) rows as the reference prints them at start."""
        rows = [
            (name, "-", f"UNAVAILABLE: {reason}") for name, reason in sorted(self.registry.failed.items())
        ]
        for name, versions in self.registry.models.items():
            for v, m in versions.items():
                status = m.state.value + (f": {m.reason}" if m.reason else "")
                rows.append((name, str(v), status))
        return sorted(rows)

    # -- health and metadata ----------------------------------------------------------------------
    def live(self) -> bool:
        return self._live and not self._stopping

    def ready(self) -> bool:
        if not self.live():
            return False
        return not (self.options.strict_readiness and self.load_failures())

    def metadata(self, extra_extensions: tuple[str, ...] = ()) -> dict[str, Any]:
        return {
            "name": self.options.id,
            "version": PROTOCOL_VERSION,
            "extensions": list(EXTENSIONS + extra_extensions),
        }

    def get_model(self, name: str, version: str = "") -> Model:
        """The READY model version (default: the highest READY one) or NotFoundError."""
        if not version:
            m = self.registry.ready_default.get(name)
            if m is not None:
                return m
            if name in self.registry.models or name in self.registry.failed:
                raise NotFoundError(f"Request for unknown model: '{name}' has no available versions")
            raise NotFoundError(f"Request for unknown model: '{name}' is not found")
        versions = self.registry.models.get(name)
        if versions is None:
            if name in self.registry.failed:
                raise NotFoundError(f"Request for unknown model: '{name}' has no available versions")
            raise NotFoundError(f"Request for unknown model: '{name}' is not found")
        m = versions.get(int(version))
        if m is None:
            raise NotFoundError(f"Request for unknown model: '{name}' version {int(version)} is not found")
        if not m.ready:
            raise UnavailableError(
                f"Request for unknown model: '{name}' version {int(version)} is not at ready state"
            )
        return m

    def model_ready(self, name: str, version: str = "") -> bool:
        try:
            return self.get_model(name, version).ready
        except InferdError:
            return False

    def model_metadata(self, name: str, version: str = "") -> dict[str, Any]:
        m = self.get_model(name, version)
        inputs, outputs = m.io_metadata()
        if version:  # asked for one version: the reference lists that one alone
            versions = [m.version_str]
        else:
            versions = [str(v) for v, mm in sorted(self.registry.models[name].items()) if mm.ready]
        return {
            "name": m.name,
            "versions": versions,
            "platform": m.platform,
            "inputs": inputs,
            "outputs": outputs,
        }

    def model_config(self, name: str, version: str = "") -> dict[str, Any]:
        return self.get_model(name, version).config_json()

    # -- inference --------------------------------------------------------------------------------
    def submit(
        self, request: InferRequest, model: Model | None = None, validated: bool = False
    ) -> ResponseStream:
        """Validate and queue ``request``; its responses arrive on the returned stream.

        ``validated``: a frontend vouches that an identical request (same names, datatypes,
        shapes and byte sizes) to this same ``model`` passed validation already.
        """
        if self._stopping:
            raise UnavailableError("Server is stopping")
        if model is None:
            model = self.get_model(request.model_name, request.model_version)
        if not validated:
            validate_request(request, model)
        assert self.loop is not None
        stream = ResponseStream(self.loop)
        request.stream = stream
        assert model.scheduler is not None
        model.scheduler.enqueue(request)
        return stream

    async def infer(self, request: InferRequest, model: Model | None = None) -> InferResponse:
        """Run a unary request; errors of the model come back in ``response.error``."""
        if model is None:
            model = self.get_model(request.model_name, request.model_version)
        stream = self.submit(request, model)
        resp = await stream.first()
        self.postprocess(request, resp, model)
        return resp

    @staticmethod
    def postprocess(request: InferRequest, resp: InferResponse, model: Model) -> None:
        """What the core does to a response before any codec: the classification extension."""
        if resp.error is None and request.outputs is not None:
            _apply_classification(request, resp, model)

    def infer_blocking(self, request: InferRequest) -> list[InferResponse]:
        """``infer`` from a worker thread (BLS): waits for the response."""
        assert self.loop is not None
        if self._loop_thread == threading.get_ident():
            # a model executing inline on the loop cannot wait for the loop; its pool now uses threads
            raise InternalError("BLS request issued from the event loop thread; retry the request")
        future = asyncio.run_coroutine_threadsafe(self._infer_catching(request), self.loop)
        return [future.result()]

    async def _infer_catching(self, request: InferRequest) -> InferResponse:
        try:
            return await self.infer(request)
        except InferdError as e:
            return InferResponse(request.model_name, request.model_version, request.id, error=e)

    # -- statistics and repository ----------------------------------------------------------------
    def statistics(self, name: str = "", version: str = "") -> dict[str, Any]:
        stats: list[dict[str, Any]] = []
        if not name:
            for mname, versions in sorted(self.registry.models.items()):
                for v, m in sorted(versions.items()):
                    if m.ready:
                        stats.append(m.stats.to_json(mname, str(v)))
            return {"model_stats": stats}
        ready = {v: m for v, m in self.registry.models.get(name, {}).items() if m.ready}
        if not ready:
            raise InvalidArgumentError(f"requested model '{name}' is not available")
        if version:
            one = ready.get(int(version))
            if one is None:
                raise InvalidArgumentError(f"requested model version is not available for model '{name}'")
            return {"model_stats": [one.stats.to_json(name, version)]}
        for v, mv in sorted(ready.items()):
            stats.append(mv.stats.to_json(name, str(v)))
        return {"model_stats": stats}

    def repository_index(self, ready_only: bool = False) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        names = sorted(set(self.registry.models) | set(self.registry.failed))
        for name in names:
            versions = self.registry.models.get(name, {})
            if not versions:
                if not ready_only:
                    entry: dict[str, Any] = {"name": name, "version": "", "state": "UNAVAILABLE"}
                    entry["reason"] = self.registry.failed.get(name, "")
                    out.append({k: v for k, v in entry.items() if v != ""})
                continue
            for v, m in sorted(versions.items()):
                if ready_only and not m.ready:
                    continue
                entry = {"name": name, "version": str(v), "state": m.state.value}
                if m.reason:
                    entry["reason"] = m.reason
                out.append(entry)
        return out

    def load_model(self, name: str) -> None:
        check_mode_allows_load(self.options.model_control_mode)

    def unload_model(self, name: str) -> None:
        check_mode_allows_load(self.options.model_control_mode)


def _apply_classification(request: InferRequest, resp: InferResponse, model: Model) -> None:
    assert request.outputs is not None
    wanted = {o.name: o.classification for o in request.outputs if o.classification > 0}
    if not wanted:
        return
    resp.outputs = [
        classify(
            t,
            wanted[t.name],
            model.outputs[t.name].labels if t.name in model.outputs else (),
            model.max_batch_size > 0,
        )
        if t.name in wanted
        else t
        for t in resp.outputs
    ]
