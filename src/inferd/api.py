"""The in-process API: ``inferd.Server(model_repository=...)``, ``start()``, ``infer()``, ``stop()``.

The server runs its own event loop in a background thread, so plain synchronous code can embed
it; ``http_port`` also serves the KServe v2 HTTP protocol, ``grpc_port`` the KServe v2 gRPC
protocol and ``metrics_port`` Prometheus metrics from the same process. It is the same
``Runtime`` as ``inferd serve``: the same start and stop order.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Mapping
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from inferd.core.request import InferRequest, RequestedOutput
from inferd.core.tensor import Tensor
from inferd.core.types import BY_WIRE
from inferd.errors import InternalError, InvalidArgumentError
from inferd.options import ServerOptions
from inferd.runtime import Runtime

T = TypeVar("T")


class Server:
    """An inference server embedded in this process.

    ``model_repository``: one repository or a list (folders, or s3://, as:// and gs:// URLs). A port
    given serves that protocol from this process too (0: a free port; the properties below say which),
    on ``http_address`` / ``grpc_address`` (127.0.0.1 unless given); no port, no listener. Every other
    keyword is a field of :class:`ServerOptions`, named as its ``inferd serve`` flag with underscores
    (``model_control_mode="explicit"``). As a context manager it starts on entry and stops on exit.

    >>> with inferd.Server(model_repository="models") as server:
    ...     out = server.infer("add_sub", {"INPUT0": a, "INPUT1": b})
    """

    def __init__(
        self,
        model_repository: str | Path | list[str | Path],
        *,
        http_port: int | None = None,
        http_address: str = "127.0.0.1",
        grpc_port: int | None = None,
        grpc_address: str = "127.0.0.1",
        metrics_port: int | None = None,
        **options: Any,
    ) -> None:
        repos = model_repository if isinstance(model_repository, list) else [model_repository]
        self.options = ServerOptions(model_repository=[Path(r) for r in repos], **options)
        if self.options.workers != 1:
            raise InvalidArgumentError(
                "'workers' is a flag of 'inferd serve': an in-process server is one process"
            )
        self.options.allow_http = http_port is not None
        self.options.http_port = http_port or 0
        self.options.http_address = http_address
        self.options.allow_grpc = grpc_port is not None
        self.options.grpc_port = grpc_port or 0
        self.options.grpc_address = grpc_address
        self.options.allow_metrics = metrics_port is not None
        self.options.metrics_port = metrics_port or 0
        self.options.metrics_address = self.options.metrics_address or http_address
        self._runtime = Runtime(self.options)
        self._core = self._runtime.core
        #: client shared-memory regions, shared by the frontends
        self.shm = self._runtime.shm
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> Server:
        """Load the models (and start HTTP when asked); returns self once ready."""
        if self._loop is not None:
            return self
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(target=loop.run_forever, name="inferd-loop", daemon=True)
        self._thread.start()
        self._run(self._start())
        return self

    async def _start(self) -> None:
        await self._runtime.load()
        await self._runtime.start_frontends()

    @property
    def runtime(self) -> Runtime:
        """The server's Runtime (its core and front-end factories), for embedders that bring their
        own transport (``inferd.rayserve``); use it on :attr:`loop`."""
        return self._runtime

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The event loop the server runs on (a thread of its own), once started."""
        if self._loop is None:
            raise InternalError("the server is not started: call start() first")
        return self._loop

    @property
    def http_port(self) -> int | None:
        """The port HTTP listens on (useful with ``http_port=0``)."""
        http = self._runtime.http
        return None if http is None else int(http.port)

    @property
    def grpc_port(self) -> int | None:
        """The port gRPC listens on (useful with ``grpc_port=0``)."""
        grpc = self._runtime.grpc
        return None if grpc is None else int(grpc.port)

    @property
    def metrics_port(self) -> int | None:
        """The port of ``GET /metrics`` (useful with ``metrics_port=0``)."""
        metrics = self._runtime.metrics
        return None if metrics is None else int(metrics.port)

    def stop(self) -> None:
        """Drain in-flight requests, unload the models, stop the loop thread."""
        loop = self._loop
        if loop is None:
            return
        self._run(self._runtime.stop())
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join()
        loop.close()
        self._loop = None

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._loop is None:
            coro.close()  # never to run: no "coroutine was never awaited" warning
            raise InternalError("the server is not started: call start() first")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    # -- queries ---------------------------------------------------------------------------------
    def live(self) -> bool:
        """Whether the server is live (``GET /v2/health/live``)."""
        return self._core.live()

    def ready(self) -> bool:
        """Whether the server is ready (``GET /v2/health/ready``; ``strict_readiness``: every model loaded)."""
        return self._core.ready()

    def metadata(self) -> dict[str, Any]:
        """The server metadata (``GET /v2``): name, version, extensions."""
        return self._core.metadata()

    def model_ready(self, name: str, version: str = "") -> bool:
        """READY, and the model's own ``is_ready()`` (if it has one) says so (engine/readiness.py)."""
        if self._core.ready_check(name, version) is None:
            return self._core.model_ready(name, version)
        return self._run(self._core.model_ready_checked(name, version))

    def model_metadata(self, name: str, version: str = "") -> dict[str, Any]:
        """A model's metadata (``GET /v2/models/{name}``): versions, inputs and outputs."""
        return self._core.model_metadata(name, version)

    def model_config(self, name: str, version: str = "") -> dict[str, Any]:
        """A model's configuration as JSON, completed and normalised (``GET /v2/models/{name}/config``)."""
        return self._core.model_config(name, version)

    def statistics(self, name: str = "", version: str = "") -> dict[str, Any]:
        """The statistics extension's answer for a model, or every model (``name`` empty)."""
        return self._core.statistics(name, version)

    def repository_index(self, ready: bool = False) -> list[dict[str, Any]]:
        """The repositories' models with their states (``POST /v2/repository/index``)."""
        return self._core.repository_index(ready)

    def load_model(
        self, name: str, config: str | None = None, files: Mapping[str, bytes] | None = None
    ) -> None:
        """Load or reload ``name`` (``model_control_mode="explicit"``); ``config``: a JSON config
        override, ``files``: file overrides by path within the model's folder (e.g. "1/model.py")."""
        self._run(self._core.load_model(name, config, dict(files or {})))

    def unload_model(self, name: str, unload_dependents: bool = False) -> None:
        """Unload ``name`` once its requests in flight are answered."""
        self._run(self._core.unload_model(name, unload_dependents))

    # -- inference -------------------------------------------------------------------------------
    def infer(
        self,
        model_name: str,
        inputs: Mapping[str, np.ndarray[Any, Any] | Tensor],
        *,
        outputs: list[str] | None = None,
        model_version: str = "",
        parameters: dict[str, Any] | None = None,
        request_id: str = "",
    ) -> dict[str, np.ndarray[Any, Any]]:
        """Run one request; outputs by name. Raises the InferdError the server would answer with."""
        tensors: dict[str, Tensor] = {}
        for name, value in inputs.items():
            if isinstance(value, Tensor):
                tensors[name] = value.renamed(name)
            else:
                arr = np.asarray(value)
                if arr.dtype.kind in ("U", "S"):
                    arr = arr.astype(np.object_)
                t = Tensor.from_array(name, arr)
                if arr.dtype == np.object_:
                    t = Tensor(
                        name, BY_WIRE["BYTES"], t.shape, array=np.vectorize(_to_bytes, otypes=[object])(arr)
                    )
                tensors[name] = t
        request = InferRequest(
            model_name=model_name,
            inputs=tensors,
            model_version=model_version,
            id=request_id,
            parameters=dict(parameters or {}),
            outputs=None if outputs is None else [RequestedOutput(n) for n in outputs],
        )
        resp = self._run(self._core.infer(request))
        if resp.error is not None:
            raise resp.error
        return {t.name: t.array for t in resp.outputs}


def _to_bytes(v: Any) -> bytes:
    return v if isinstance(v, bytes) else str(v).encode()
